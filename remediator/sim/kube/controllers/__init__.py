"""Kubernetes' own control loops, imitated: the kubelet (pod start-up, graceful termination, node
status heartbeats), the scheduler (resource fit, taints, gangs), and the controller manager's
ReplicaSet, DaemonSet, Job, PodDisruptionBudget, node lifecycle and garbage collection, all driven
by `SimCluster.tick` over the API store and its informer-style index.

Left out: node heartbeats are status updates, there are no node Leases in kube-node-lease; Jobs
never complete (their pods run until deleted); Deployments do not roll out (they scale their one
ReplicaSet; a changed template makes no new one); no StatefulSets; no container logs."""
