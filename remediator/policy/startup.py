"""The startup taint's part in validation: a policy that validates new machines only keeps them
from work from their first moment if the machines register with a taint the settings name
(`startup_taint`); without it a new machine is schedulable between joining and its validation."""

from __future__ import annotations

from collections.abc import Sequence

from remediator.policy.schema import GlobalSettings, Policy, Validate


def validating_policies(policies: Sequence[Policy]) -> list[str]:
    return [p.name for p in policies if any(isinstance(a, Validate) for a in p.actions)]


def startup_taint_warning(policies: Sequence[Policy], settings: GlobalSettings) -> str | None:
    """What `remediator doctor` and the controller say when policies validate but no startup
    taint is configured; None when there is nothing to say."""
    validating = validating_policies(policies)
    if not validating or settings.startup_taint:
        return None
    return (
        f"{len(validating)} policies validate new machines ({', '.join(validating[:5])}"
        f"{', …' if len(validating) > 5 else ''}) but settings.yaml names no startup_taint: "
        "a new machine can take work between joining and its validation"
    )
