"""What a signal is about; its own module so that the bounds and the model can both use it."""

from __future__ import annotations

from enum import StrEnum


class SignalKind(StrEnum):
    XID = "xid"
    THERMAL = "thermal"
    NVLINK = "nvlink"
    INFINIBAND = "infiniband"
    ECC = "ecc"
    ROW_REMAP = "row_remap"
    GPU_MISSING = "gpu_missing"
    NODE_CONDITION = "node_condition"
    # A node Slurm itself set DOWN/DRAIN/FAIL with a reason not ours (remediator/slurm/source.py).
    SLURM_NODE = "slurm_node"
    # Work the cloud or the GPU announced ahead, with an event id, a window and a deadline
    # (remediator/signals/maintenance.py).
    MAINTENANCE = "maintenance"
    # An NVSwitch error (SXid) in a tray's kernel log (remediator/signals/sxid.py): labels carry
    # the switch, link, `fatal` and the NVLink `domain` (clusterUUID) when the agent knows it.
    SXID = "sxid"
    # Fabric Manager not active on a tray, or an error in its log (remediator/agent/fabric.py).
    FABRIC_MANAGER = "fabric_manager"
    # A node carrying the settings' startup taint that no remediation validates: a scale-up or
    # a manual add (remediator/signals/sources/node_conditions.py).
    UNVALIDATED = "unvalidated"


# Kinds whose signal is an event with its own time (a line the kernel logged), not a reading of
# a state that may have changed since: one delivered late is still evidence and is decided by
# its `observed_at` (the push API bounds its age by a day, not by the readings' minutes).
EVENT_KINDS = frozenset({SignalKind.XID, SignalKind.SXID})
