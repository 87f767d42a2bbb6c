"""Node telemetry, imitated: NVIDIA dcgm-exporter's GPU series and node_exporter's InfiniBand
collector, in Prometheus text exposition, derived from the clock and the injected faults.

Left out: one combined endpoint stands in for an exporter per node (series carry the node as a
label); no other node_exporter collectors; no OpenMetrics or protobuf exposition."""
