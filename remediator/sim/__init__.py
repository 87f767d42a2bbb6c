"""The simulated GPU cluster: Kubernetes API subset, node-pool API, DCGM-style telemetry and fault
injection, on the real wire protocols so that production code cannot tell it from the real thing.

One subpackage per imitated system, imports running downward only (checked by
tests/unit/sim/test_layering.py): `kube.api` (the API server and its store) ← `kube.controllers`
(kubelet, scheduler, workload controllers) ← `cloud`, `telemetry`, `faults` ← the top level:
`fleet` (the seeded cluster), `services` (the cloud-side ASGI apps), `serve`, `launch`, `cli`."""
