"""PodDisruptionBudget semantics as the disruption controller and the eviction subresource of a
real API server implement them (pkg/controller/disruption, pkg/registry/core/pod/storage/
eviction.go): the status math, and the check-and-decrement an eviction makes. Pure functions."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from remediator.sim.kube.api.kobj import (
    controller_ref,
    is_ready,
    is_terminating,
    parse_time,
    rfc3339,
)
from remediator.sim.kube.api.store import InternalError, Obj, TooManyRequests

# The disruption controller forgets a disrupted pod that was not deleted within this time.
DELETION_TIMEOUT = timedelta(minutes=2)
EVICTION_DENIED = "Cannot evict pod as it would violate the pod's disruption budget."
MULTIPLE_PDBS = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not "
    "support."
)


class SyncFailed(Exception):
    """The controller cannot compute the budget (e.g. a percentage over pods with no scale)."""


def scaled_value(value: int | str, total: int, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent."""
    if isinstance(value, int):
        return value
    text = value.strip()
    if not text.endswith("%"):
        try:
            return int(text)
        except ValueError as exc:
            raise SyncFailed(f"invalid value for IntOrString: invalid value {value!r}") from exc
    try:
        percent = int(text[:-1])
    except ValueError as exc:
        raise SyncFailed(f"invalid value for IntOrString: invalid value {value!r}") from exc
    scaled = percent * total / 100
    return math.ceil(scaled) if round_up else math.floor(scaled)


def expected_scale(pods: Iterable[Obj], scale_of: Callable[[str, Obj], int | None]) -> int:
    """Sum of the scales of the controllers of the pods (each controller counted once); pods
    without a controller are left out; a controller with no scale is an error, as for Jobs."""
    scales: dict[str, int] = {}
    for pod in pods:
        ref = controller_ref(pod)
        if ref is None or ref["uid"] in scales:
            continue
        scale = scale_of(pod["metadata"].get("namespace", ""), ref)
        if scale is None:
            raise SyncFailed(f'found no controllers for pod "{pod["metadata"]["name"]}"')
        scales[ref["uid"]] = scale
    return sum(scales.values())


def expected_and_desired(
    pdb: Obj, pods: list[Obj], scale_of: Callable[[str, Obj], int | None]
) -> tuple[int, int]:
    """(expectedPods, desiredHealthy) as `getExpectedPodCount` computes them."""
    spec = pdb.get("spec") or {}
    if spec.get("maxUnavailable") is not None:
        expected = expected_scale(pods, scale_of)
        unavailable = scaled_value(spec["maxUnavailable"], expected, round_up=True)
        return expected, max(0, expected - unavailable)
    if spec.get("minAvailable") is not None:
        minimum = spec["minAvailable"]
        if isinstance(minimum, int):
            return len(pods), minimum
        expected = expected_scale(pods, scale_of)
        return expected, scaled_value(minimum, expected, round_up=True)
    return 0, 0


def live_disrupted(pdb: Obj, pods: list[Obj], now: datetime) -> dict[str, str]:
    """Entries of status.disruptedPods still pending: pod present, not yet terminating, stamped
    less than DELETION_TIMEOUT ago."""
    recorded = (pdb.get("status") or {}).get("disruptedPods") or {}
    out: dict[str, str] = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        pending = name in recorded and not is_terminating(pod)
        if pending and parse_time(recorded[name]) + DELETION_TIMEOUT > now:
            out[name] = recorded[name]
    return out


def current_healthy(pods: list[Obj], disrupted: dict[str, str]) -> int:
    return sum(
        1
        for pod in pods
        if not is_terminating(pod) and pod["metadata"]["name"] not in disrupted and is_ready(pod)
    )


def _allowed_condition(
    previous: list[Obj], status: str, reason: str, message: str, generation: int, now: datetime
) -> list[Obj]:
    """meta.SetStatusCondition for DisruptionAllowed: the transition time moves only on change."""
    old = next((c for c in previous if c.get("type") == "DisruptionAllowed"), None)
    transition = rfc3339(now)
    if old is not None and old.get("status") == status:
        transition = old.get("lastTransitionTime", transition)
    cond = {
        "type": "DisruptionAllowed",
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": transition,
    }
    return [c for c in previous if c.get("type") != "DisruptionAllowed"] + [cond]


def pdb_status(
    pdb: Obj, pods: list[Obj], scale_of: Callable[[str, Obj], int | None], now: datetime
) -> Obj:
    """The status the disruption controller writes for `pdb` over the pods its selector picks."""
    generation = int(pdb["metadata"].get("generation", 1))
    previous = (pdb.get("status") or {}).get("conditions") or []
    try:
        expected, desired = expected_and_desired(pdb, pods, scale_of)
    except SyncFailed as exc:
        old = dict(pdb.get("status") or {})
        old["disruptionsAllowed"] = 0
        old["conditions"] = _allowed_condition(
            previous, "False", "SyncFailed", str(exc), int(old.get("observedGeneration", 0)), now
        )
        return old
    disrupted = live_disrupted(pdb, pods, now)
    healthy = current_healthy(pods, disrupted)
    allowed = healthy - desired
    if expected <= 0 or allowed <= 0:
        allowed = 0
    status: Obj = {
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "disruptionsAllowed": allowed,
        "observedGeneration": generation,
    }
    if disrupted:
        status["disruptedPods"] = disrupted
    if allowed > 0:
        status["conditions"] = _allowed_condition(
            previous, "True", "SufficientPods", "", generation, now
        )
    else:
        status["conditions"] = _allowed_condition(
            previous, "False", "InsufficientPods", "", generation, now
        )
    return status


def recheck_at(pdb: Obj) -> datetime | None:
    """When the oldest pending disruptedPods entry expires (the controller re-syncs then)."""
    recorded = (pdb.get("status") or {}).get("disruptedPods") or {}
    if not recorded:
        return None
    return min(parse_time(t) for t in recorded.values()) + DELETION_TIMEOUT


# -- the eviction subresource ------------------------------------------------------------------


def can_ignore_pdb(pod: Obj) -> bool:
    """Finished, pending and already-terminating pods are deleted without consulting budgets."""
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed", "Pending") or is_terminating(pod)


def multiple_pdbs_error() -> InternalError:
    return InternalError(
        f"Internal error occurred: {MULTIPLE_PDBS}",
        details={"causes": [{"message": MULTIPLE_PDBS}]},
    )


def _too_many(cause: str, retry_after: int) -> TooManyRequests:
    details: dict[str, Any] = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    headers: dict[str, str] = {}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
        headers["Retry-After"] = str(retry_after)
    return TooManyRequests(EVICTION_DENIED, details=details, headers=headers)


def denied_message(pdb: Obj) -> str:
    status = pdb.get("status") or {}
    name = pdb["metadata"]["name"]
    cond = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "DisruptionAllowed"), None
    )
    current, desired = int(status.get("currentHealthy", 0)), int(status.get("desiredHealthy", 0))
    if (
        cond
        and cond.get("status") == "False"
        and cond.get("message")
        and cond.get("reason") == "SyncFailed"
    ):
        return (
            f"The disruption budget {name} does not allow evicting pods currently because it "
            f"failed sync: {cond['message']}"
        )
    if current <= desired:
        return (
            f"The disruption budget {name} needs {desired} healthy pods and has {current} currently"
        )
    if cond and cond.get("status") == "False" and cond.get("message"):
        return (
            f"The disruption budget {name} does not allow evicting pods currently "
            f"({cond['reason']}): {cond['message']}"
        )
    return f"The disruption budget {name} does not allow evicting pods currently"


def unhealthy_pod_may_go(pod: Obj, pdb: Obj) -> bool:
    """An unready pod may be evicted without spending the budget (unhealthyPodEvictionPolicy)."""
    if is_ready(pod):
        return False
    if (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
        return True
    status = pdb.get("status") or {}
    desired = int(status.get("desiredHealthy", 0))
    return int(status.get("currentHealthy", 0)) >= desired and desired > 0


def decrement(pdb: Obj, pod_name: str, now: datetime) -> Obj:
    """checkAndDecrement: the PDB with one disruption spent, or the error the server returns."""
    status = dict(pdb.get("status") or {})
    if int(status.get("observedGeneration", 0)) < int(pdb["metadata"].get("generation", 1)):
        raise _too_many(
            f"The disruption budget {pdb['metadata']['name']} is still being processed by the "
            "server.",
            10,
        )
    allowed = int(status.get("disruptionsAllowed", 0))
    if allowed <= 0:
        raise _too_many(denied_message(pdb), 0)
    status["disruptionsAllowed"] = allowed - 1
    if allowed - 1 == 0:
        generation = int(status.get("observedGeneration", 0))
        status["conditions"] = _allowed_condition(
            status.get("conditions") or [], "False", "InsufficientPods", "", generation, now
        )
    status["disruptedPods"] = {**(status.get("disruptedPods") or {}), pod_name: rfc3339(now)}
    return {**pdb, "status": status}
