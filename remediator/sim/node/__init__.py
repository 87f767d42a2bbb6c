"""The simulated node's host: its kernel log (kmsg records) and the NVIDIA driver's /proc files,
under one directory per node, so the real node agent can run against a simulated node."""
