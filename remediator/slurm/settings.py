"""The controller's `slurm:` section: off unless enabled; the simulator's ready file carries a
`slurm` object valid as it stands."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, Field


class NotRequeueable(StrEnum):
    """What becomes of a job that did not opt into requeue (`--no-requeue`), decided before it is
    signalled so that honouring SIGTERM changes nothing: requeue it anyway (requeue allowed
    first), cancel it, or leave it running and hold the remediation for a human (nothing sent)."""

    REQUEUE = "requeue"
    CANCEL = "cancel"
    HOLD = "hold"


class SlurmSettings(BaseModel):
    enabled: bool = False
    # Absolute path of slurm.conf, passed to every command as SLURM_CONF (None: Slurm's default).
    slurm_conf: Path | None = None
    # Kubernetes node → Slurm node: the value of this node label when set, else the template
    # (`{name}` is the Kubernetes node's name).
    node_label: str | None = None
    node_template: str = "{name}"
    # Sent to the jobs at the checkpoint step. SIGTERM: requeueable jobs are requeued at once
    # (Slurm itself sends SIGTERM, then SIGKILL after its KillWait). Anything else (USR1):
    # sent first, and the jobs still running when the grace ends are requeued.
    signal: str = "TERM"
    not_requeueable: NotRequeueable = NotRequeueable.REQUEUE
    # A job opts out of automatic replacement with this word in its comment (`sbatch
    # --comment=remediator:opt-out`) or, when set, by requesting this feature (`--constraint`).
    opt_out_comment: str = "remediator:opt-out"
    opt_out_feature: str | None = None
    # Slurm's own DOWN/DRAIN/FAIL nodes become `slurm_node` signals (reasons not ours).
    watch_nodes: bool = True
    partition: str | None = None
    timeout_seconds: float = Field(default=20.0, gt=0)
