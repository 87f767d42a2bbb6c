"""Kubernetes, imitated: the API server (`api`) and the control loops behind it (`controllers`).

`api` never imports `controllers`: the server reaches the cluster only through the calls it is
handed, as a real API server knows nothing of the kubelet or the controller manager."""
