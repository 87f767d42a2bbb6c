"""Broken hardware and a misbehaving cloud, on demand: the fault-injection HTTP API and CLI that
make a node show an XID, overheating, NVLink or InfiniBand errors, a condition or a lost GPU, and
the node-pool API fail. It imitates no real API; it stands in for the world going wrong.

Left out: faults show only where the simulator shows them (telemetry, Node conditions and
allocatable GPUs); there is no kernel log or driver file on a node to read them from."""
