"""The step table: which executor does the work of each work state. The service looks a state
up here and calls the row's executor with the record, the ladder's step of that name (or a bare
one) and the shared context; a new step is a new module and one row."""

from __future__ import annotations

from remediator.model.states import State
from remediator.remediation.steps import (
    checkpoint,
    diagnose,
    drain,
    quarantine,
    reboot,
    replace,
    reset_gpu,
    rma,
    uncordon,
    validate,
    verify,
)
from remediator.remediation.steps.context import StepContext, StepExecutor

STEPS: dict[State, StepExecutor] = {
    State.QUARANTINED: StepExecutor("quarantine", quarantine.run),
    State.CHECKPOINTING: StepExecutor("checkpoint", checkpoint.run),
    State.DRAINING: StepExecutor("drain", drain.run),
    State.RESETTING_GPU: StepExecutor("reset_gpu", reset_gpu.run),
    State.REBOOTING: StepExecutor("reboot", reboot.run),
    State.DIAGNOSING: StepExecutor("diagnose", diagnose.run),
    State.UNCORDONING: StepExecutor("uncordon", uncordon.run),
    State.OPENING_RMA: StepExecutor("rma", rma.run),
    State.REPLACING: StepExecutor("replace", replace.run),
    State.VALIDATING: StepExecutor("validate", validate.run),
    State.VERIFYING: StepExecutor("verify", verify.run),
}

__all__ = ["STEPS", "StepContext", "StepExecutor"]
