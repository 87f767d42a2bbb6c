"""The controller's `slurm:` section: off unless enabled; the simulator's ready file carries a
`slurm` object valid as it stands."""

from __future__ import annotations

import signal as signals
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator

# The names scancel --signal knows (Slurm's sig_name2num), in its order.
SCANCEL_SIGNALS = (
    *("HUP", "INT", "QUIT", "ABRT", "KILL", "ALRM", "TERM", "USR1", "USR2"),
    *("URG", "CONT", "STOP", "TSTP", "TTIN", "TTOU", "XCPU"),
)
_BY_NUMBER = {str(signals.Signals[f"SIG{name}"].value): name for name in SCANCEL_SIGNALS}


def scancel_signal(value: object) -> str:
    """Slurm's name for a signal given as scancel takes it (any case, with or without SIG, or
    its number): `usr1`, `SIGUSR1` and `10` are all `USR1`."""
    text = str(value).strip().upper().removeprefix("SIG")
    name = _BY_NUMBER.get(text, text)
    if name not in SCANCEL_SIGNALS:
        raise ValueError(f"unknown signal {str(value)!r}: one of {', '.join(SCANCEL_SIGNALS)}")
    return name


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
    # sent first, and the jobs still running when the grace ends are requeued. Kept as Slurm's
    # name for it; a name scancel would refuse is refused here, when the config is read.
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

    @field_validator("signal", mode="before")
    @classmethod
    def _known_signal(cls, value: Any) -> str:
        return scancel_signal(value)
