"""The simulated GPU cluster: Kubernetes API subset, node-pool API, DCGM-style telemetry and fault
injection, on the real wire protocols so that production code cannot tell it from the real thing."""
