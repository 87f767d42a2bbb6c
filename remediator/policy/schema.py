"""The policy YAML as pydantic models: every model forbids unknown fields so a typo is an error,
not a silently ignored rule."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from remediator.model.gpus import GPU_PRODUCT_LABEL, floor_for
from remediator.model.optout import DEFAULT_MAX_HOLD, DEFAULT_MAX_OPT_OUT
from remediator.policy.durations import Duration
from remediator.policy.windows import POOL_WINDOW, MaintenanceWindow
from remediator.signals.model import SignalKind

DEFAULT_GRACE = timedelta(seconds=120)
# Kubernetes' own default terminationGracePeriodSeconds, and the floor a policy's grace may have.
DEFAULT_MIN_GRACE = timedelta(seconds=30)
SHORTEST_GRACE = timedelta(seconds=1)
LONGEST_GRACE = timedelta(hours=1)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Threshold(_Strict):
    """A level held for a while. Without `above`/`below`, the signal's mere presence is the breach
    (node conditions); `gap` ends a streak whose readings stopped coming."""

    above: float | None = None
    below: float | None = None
    clear: float | None = None
    for_: Duration = Field(default=timedelta(0), alias="for")
    gap: Duration = timedelta(minutes=2)

    @model_validator(mode="after")
    def _levels(self) -> Threshold:
        if self.above is not None and self.below is not None:
            raise ValueError("give either above or below, not both")
        if self.clear is not None:
            if self.above is None and self.below is None:
                raise ValueError("clear needs above or below")
            if self.above is not None and self.clear > self.above:
                raise ValueError(f"clear ({self.clear}) must not exceed above ({self.above})")
            if self.below is not None and self.clear < self.below:
                raise ValueError(f"clear ({self.clear}) must not be under below ({self.below})")
        return self

    def breached(self, value: float | None) -> bool:
        if self.above is not None:
            return value is not None and value >= self.above
        if self.below is not None:
            return value is not None and value <= self.below
        return True

    def cleared(self, value: float | None) -> bool:
        """Hysteresis: between the trigger and the clear level a running breach keeps running."""
        if self.above is not None:
            if value is None:
                return True
            return value <= self.clear if self.clear is not None else value < self.above
        if self.below is not None:
            if value is None:
                return True
            return value >= self.clear if self.clear is not None else value > self.below
        return False


class Burst(_Strict):
    """`count` qualifying signals within `within`, e.g. 3 NVLink bursts in 10 minutes."""

    count: int = Field(ge=1)
    within: Duration


class Repeat(_Strict):
    """This would be at least the `count`th remediation of the node within `within` (this one
    included). What counts is what the policy means: by default remediations of this policy and
    of the ladders it falls back to (`on_failure`); `of` names the policies or signal kinds to
    count instead (checked by the loader). A notify about something else never makes a repeat.
    `by` says of what: the node name (the default), the GPU the signal names (by UUID, wherever
    it sat) or the machine behind the node (instance id or DMI serial, whatever its name).
    `nth` is the older name of `count`."""

    count: int = Field(ge=2)
    within: Duration
    of: list[str] | None = Field(default=None, min_length=1)
    by: Literal["node", "gpu", "machine"] = "node"

    @model_validator(mode="before")
    @classmethod
    def _older_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and "nth" in data:
            if "count" in data:
                raise ValueError("give count only: nth is its older name")
            data = {**data, "count": data["nth"]}
            del data["nth"]
        return data


class Match(_Strict):
    kind: SignalKind
    codes: list[Annotated[int, Field(ge=0)]] | None = Field(default=None, min_length=1)
    labels: dict[str, str] = Field(default_factory=dict)
    threshold: Threshold | None = None
    burst: Burst | None = None
    repeat: Repeat | None = None


class NodeSelector(_Strict):
    """Both parts must hold when given; an empty selector matches every node."""

    pools: list[str] | None = Field(default=None, min_length=1)
    labels: dict[str, str] = Field(default_factory=dict)

    def selects(self, pool: str | None, labels: Mapping[str, str]) -> bool:
        if self.pools is not None and pool not in self.pools:
            return False
        return all(labels.get(k) == v for k, v in self.labels.items())


class Notify(_Strict):
    action: Literal["notify"]
    message: str | None = None


class Cordon(_Strict):
    action: Literal["cordon"]


class Taint(_Strict):
    action: Literal["taint"]
    key: str = "remediator.io/unhealthy"
    value: str = "true"
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class Checkpoint(_Strict):
    """The one grace: at its start every workload gets its notice. Pods that declare the
    checkpoint handshake are asked to checkpoint, all others are evicted (SIGTERM) at once; each
    pod's clock is its own terminationGracePeriodSeconds held within [min_grace, max_grace], and
    the drain after it continues that clock instead of starting another. `grace` is the older
    name of `max_grace`."""

    action: Literal["checkpoint"]
    min_grace: Duration | None = None
    max_grace: Duration = DEFAULT_GRACE

    @model_validator(mode="before")
    @classmethod
    def _older_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and "grace" in data:
            if "max_grace" in data:
                raise ValueError("give max_grace only: grace is its older name")
            data = {**data, "max_grace": data["grace"]}
            del data["grace"]
        return data

    @model_validator(mode="after")
    def _bounds(self) -> Checkpoint:
        if not SHORTEST_GRACE <= self.max_grace <= LONGEST_GRACE:
            raise ValueError("max_grace must be between 1s and 1h")
        if self.min_grace is not None and not SHORTEST_GRACE <= self.min_grace <= self.max_grace:
            raise ValueError("min_grace must be at least 1s and not above max_grace")
        return self

    @property
    def floor(self) -> timedelta:
        """min_grace, by default Kubernetes' 30 s (or max_grace when that is shorter)."""
        return (
            self.min_grace if self.min_grace is not None else min(DEFAULT_MIN_GRACE, self.max_grace)
        )


class Drain(_Strict):
    action: Literal["drain"]
    grace: Duration = DEFAULT_GRACE
    timeout: Duration = timedelta(minutes=10)
    on_timeout: Literal["force", "hold"] = "hold"


class Replace(_Strict):
    action: Literal["replace"]


class Rma(_Strict):
    """Open an RMA case for the owned GPU (or machine) at fault, with its evidence bundle, and
    send it to `rma.webhook_url` (docs/rma.md). One case per hardware until it is closed."""

    action: Literal["rma"]
    target: Literal["gpu", "machine"] = "gpu"
    # One line: it becomes the case's reason and the ticket's summary.
    reason: str | None = Field(default=None, min_length=1, max_length=500, pattern=r"^[^\n]+$")


class ResetGpu(_Strict):
    """Reset only the faulty GPU(s) (`nvidia-smi --gpu-reset -i N`, a privileged Job pinned to
    the node); follows a full drain, so no pod holds the GPU."""

    action: Literal["reset_gpu"]
    timeout: Duration = timedelta(minutes=5)


class Reboot(_Strict):
    """Reboot through the node pool's provider (or a privileged Job) and wait up to `timeout`
    for the node to be Ready with a new boot id. At most `max_reboots` reboots of one node within
    `window`: one more goes to `on_failure` instead (no reboot loops)."""

    action: Literal["reboot"]
    timeout: Duration = timedelta(minutes=15)
    max_reboots: int = Field(default=2, ge=1, le=100)
    window: Duration = timedelta(days=7)
    # `maintenance`: start the cloud's announced maintenance instead (GCE performMaintenance,
    # EC2 RebootInstances for a reboot event), which also reboots the node; planned ladders only.
    via: Literal["provider", "maintenance"] = "provider"


class Diagnose(_Strict):
    """DCGM diagnostics (`dcgmi diag -r LEVEL -j`) as a Job; any failing test fails the step."""

    action: Literal["diagnose"]
    level: Literal[1, 2, 3] = 2
    timeout: Duration = timedelta(minutes=30)


class InventoryPins(_Strict):
    """Values every node of the pool must show, whatever the rest of the pool runs; what is not
    pinned is compared with the majority of the pool's in-service nodes."""

    gpu_count: int | None = Field(default=None, ge=1, le=1024)
    gpu_model: str | None = Field(default=None, min_length=1)
    driver: str | None = Field(default=None, pattern=r"^[0-9]+(\.[0-9]+)*$")
    cuda: str | None = Field(default=None, pattern=r"^[0-9]+(\.[0-9]+)*$")
    vbios: str | None = Field(default=None, min_length=1)
    ib_active: int | None = Field(default=None, ge=0, le=64)
    ib_rate: int | None = Field(default=None, ge=1)


class Validate(_Strict):
    """Burn-in before a node takes work, after `replace` (the new machine) or a repair (before
    `uncordon`): the node stays fenced while its checks run in one Job on it — inventory
    against the pool's baseline (the majority of its in-service nodes), DCGM diagnostics
    (`dcgm_level` after a repair, `dcgm_level_new` on a new machine), an NCCL all-reduce whose
    bus bandwidth must reach the GPU model's floor (a model without one is skipped, with a
    warning), and optionally (`nccl_pair`) one across two nodes with a healthy peer. A new
    machine that fails is replaced again, at most `max_replacements` times per
    remediation, then held for a human; a repaired node that fails goes to `on_failure`."""

    action: Literal["validate"]
    dcgm_level: Literal[1, 2, 3, 4] = 2
    dcgm_level_new: Literal[1, 2, 3, 4] = 3
    inventory: bool = True
    pins: InventoryPins = InventoryPins()
    nccl: bool = True
    # GPU model (as nvidia-smi names it, or as its nvidia.com/gpu.product label does) → the
    # lowest acceptable all-reduce bus bandwidth, GB/s. A model without one skips the check
    # with a warning on the timeline: a gap in the policy says nothing about the machine.
    busbw_floor: dict[Annotated[str, Field(min_length=1)], Annotated[float, Field(gt=0)]] = Field(
        default_factory=dict
    )
    max_replacements: int = Field(default=2, ge=0, le=10)
    # The two-node all-reduce with a healthy peer of the pool (a validated, schedulable node
    # under no remediation), off by default; its floor is the pair's, not the node's.
    nccl_pair: bool = False
    pair_busbw_floor: dict[Annotated[str, Field(min_length=1)], Annotated[float, Field(gt=0)]] = (
        Field(default_factory=dict)
    )
    timeout: Duration = timedelta(minutes=30)

    @model_validator(mode="after")
    def _floors(self) -> Validate:
        if self.nccl and not self.busbw_floor:
            raise ValueError("nccl needs busbw_floor (GPU model → GB/s), or set nccl: false")
        if self.nccl_pair and not self.pair_busbw_floor:
            raise ValueError("nccl_pair needs pair_busbw_floor (GPU model → GB/s across two nodes)")
        if self.pair_busbw_floor and not self.nccl_pair:
            raise ValueError("pair_busbw_floor is used only with nccl_pair: true")
        return self

    def checks(self) -> dict[str, Any]:
        """As stored on the ladder (actions/burnin.py Checks)."""
        return {
            "dcgm_level": self.dcgm_level,
            "dcgm_level_new": self.dcgm_level_new,
            "inventory": self.inventory,
            "pins": self.pins.model_dump(exclude_none=True),
            "nccl": self.nccl,
            "busbw_floor": dict(self.busbw_floor),
            "max_replacements": self.max_replacements,
            "nccl_pair": self.nccl_pair,
            "pair_busbw_floor": dict(self.pair_busbw_floor),
        }


class Uncordon(_Strict):
    """Return the node to service: remove our cordon and taint (never a human's)."""

    action: Literal["uncordon"]


Step = Annotated[
    Notify
    | Cordon
    | Taint
    | Checkpoint
    | Drain
    | ResetGpu
    | Reboot
    | Diagnose
    | Uncordon
    | Rma
    | Replace
    | Validate,
    Field(discriminator="action"),
]

# Disruptive steps only make sense in this order; notify may go anywhere.
STEP_ORDER = (
    "cordon",
    "taint",
    "checkpoint",
    "drain",
    "reset_gpu",
    "reboot",
    "diagnose",
    "rma",
    "replace",
    "validate",
    "uncordon",
)
REPAIR_STEPS = frozenset({"reset_gpu", "reboot", "diagnose"})
REPLACE = "replace"  # `on_failure: replace`: the replace step, not a policy of that name


def fallback_steps(actions: list[Step]) -> list[Step]:
    """What a ladder contributes as another policy's `on_failure`: its steps from its first
    repair or replace step on (the node is fenced and drained already; notify is left out)."""
    starts = [i for i, s in enumerate(actions) if s.action in REPAIR_STEPS | {REPLACE, "rma"}]
    if not starts:
        return []
    return [s for s in actions[starts[0] :] if s.action != "notify"]


_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


def _policy_name(value: str) -> str:
    # Names end up in label values, URLs and metric labels: keep them DNS-label shaped.
    if not _NAME.fullmatch(value):
        raise ValueError("use lowercase letters, digits and '-', at most 63 characters")
    return value


def _one_line(value: str) -> str:
    if not value.strip() or "\n" in value.strip():
        raise ValueError("must be one non-empty line")
    return value.strip()


class When(_Strict):
    """Planned work (a cloud maintenance event, a pending row remap): act at a chosen moment
    before the signal's deadline instead of at once. `before_deadline` is the margin the work
    must finish by; `at_checkpoint` waits for the job's next checkpoint (its handshake pods
    announce it); `window` is `pool` (the node's pool's maintenance windows) or a window's
    name. `drain_time` overrides the drain's expected time (by default its grace)."""

    before_deadline: Duration = timedelta(0)
    at_checkpoint: bool = False
    window: Annotated[str, AfterValidator(_policy_name)] | None = None
    drain_time: Duration | None = None


class Policy(_Strict):
    name: Annotated[str, AfterValidator(_policy_name)]
    description: str = Field(min_length=1)
    why: Annotated[str, AfterValidator(_one_line)]
    match: Match
    nodes: NodeSelector = Field(default_factory=NodeSelector)
    priority: int = Field(default=0, ge=0, le=1000)
    actions: list[Step] = Field(min_length=1)
    approval: Literal["auto", "required"] = "auto"
    cooldown: Duration | None = None
    dry_run: bool = False
    # What a node gets while a budget or max_concurrent queues its remediation: `cordon` keeps
    # new work off a sick node (no pod is evicted); never applied while the breaker or a pause
    # holds it, since then the signals themselves are suspect.
    while_queued: Literal["cordon", "nothing"] = "cordon"
    # Where a failed repair goes (reset, reboot or diagnostics failed, or the reboot cap was
    # reached) instead of ending failed: `replace` the node, or the name of another policy whose
    # ladder continues from its first repair or replace step (checked by the loader: it exists,
    # and the chain has no cycle).
    on_failure: Annotated[str, AfterValidator(_policy_name)] | None = None
    # Planned: when to act before the signal's deadline (docs/planned.md); None acts at once.
    when: When | None = None
    # What the ladder acts on (docs/topology.md): the node; the trays of its NVLink clique (a
    # gang job's partition); or its whole NVLink domain (an NVL72 rack). A node with no clique
    # label is remediated per node whatever the scope.
    scope: Literal["node", "clique", "domain"] = "node"
    # With a clique or domain scope: the share of the unit's trays (percent) whose match must
    # hold in the same cycle before the policy acts; fewer, and it does not apply to them (each
    # tray goes to the next policy that matches it, e.g. a per-node one). A node with no clique
    # label is no tray: the policy never applies to it. `rack-down` (policies/racks.yaml).
    quorum_percent: float | None = Field(default=None, gt=0, le=100)

    @model_validator(mode="after")
    def _ladder_order(self) -> Policy:
        steps = {s.action for s in self.actions}
        if "rma" in steps and "uncordon" in steps:
            raise ValueError("rma sends the hardware back: the ladder cannot uncordon after it")
        if "uncordon" in steps and "replace" in steps:
            raise ValueError("a ladder ends in uncordon (repaired) or in replace, not both")
        ranks = [STEP_ORDER.index(s.action) for s in self.actions if s.action != "notify"]
        if ranks != sorted(set(ranks)):
            raise ValueError(
                "actions must not repeat and must follow the order " + " → ".join(STEP_ORDER)
            )
        return self

    @model_validator(mode="after")
    def _one_grace(self) -> Policy:
        graced = any(s.action == "checkpoint" for s in self.actions)
        if graced and any(
            s.action == "drain" and "grace" in s.model_fields_set for s in self.actions
        ):
            raise ValueError(
                "a drain after a checkpoint step continues its grace: give min_grace/max_grace "
                "on the checkpoint step, not a grace on the drain"
            )
        return self

    @model_validator(mode="after")
    def _repair_ladder(self) -> Policy:
        steps = {s.action for s in self.actions}
        if "uncordon" in steps and "replace" in steps:
            raise ValueError("a ladder ends in uncordon (repaired) or in replace, not both")
        if steps & REPAIR_STEPS and "drain" not in steps:
            raise ValueError("reset_gpu, reboot and diagnose need a drain before them")
        if "uncordon" in steps and not steps & {"diagnose", "validate"}:
            raise ValueError(
                "uncordon needs diagnose or validate before it: no node goes back unchecked"
            )
        # A machine that joined by itself (`unvalidated`) has nothing to repair or replace first.
        new_machine = self.match.kind is SignalKind.UNVALIDATED
        if "validate" in steps and not new_machine and not steps & (REPAIR_STEPS | {"replace"}):
            raise ValueError("validate needs a repair or a replace step before it")
        if self.on_failure is not None:
            if not steps & REPAIR_STEPS:
                raise ValueError("on_failure needs a reset_gpu, reboot or diagnose step to follow")
            if "replace" in steps:
                raise ValueError("on_failure and a replace step: use one of them")
            if self.on_failure == self.name:
                raise ValueError("on_failure names this policy itself: a fallback loop")
        return self

    @model_validator(mode="after")
    def _floors_for_named_model(self) -> Policy:
        """A policy that names its nodes' GPU model and validates with NCCL gives that model a
        floor: without one every validation it runs would skip the check."""
        model = self.nodes.labels.get(GPU_PRODUCT_LABEL)
        if not model:
            return self
        for i, step in enumerate(self.actions):
            if not isinstance(step, Validate):
                continue
            for on, name, floors in (
                (step.nccl, "busbw_floor", step.busbw_floor),
                (step.nccl_pair, "pair_busbw_floor", step.pair_busbw_floor),
            ):
                if on and floor_for(floors, model) is None:
                    raise ValueError(
                        f"nodes.labels selects {GPU_PRODUCT_LABEL}={model}, but actions[{i}]."
                        f"{name} has no floor for that model: its NCCL check would be skipped "
                        "(add the model's floor in GB/s)"
                    )
        return self

    @model_validator(mode="after")
    def _planned(self) -> Policy:
        if self.when is not None and self.match.kind is not SignalKind.MAINTENANCE:
            raise ValueError("when: plans around an announced event: match kind maintenance")
        if self.when is not None and not {s.action for s in self.actions} & {"checkpoint", "drain"}:
            raise ValueError("when: plans a drain: the ladder needs a checkpoint or drain step")
        if self.when is None and any(
            getattr(s, "via", None) == "maintenance" for s in self.actions
        ):
            raise ValueError("reboot via: maintenance starts an announced event: it needs when:")
        if self.when is not None and self.approval == "required":
            raise ValueError(
                "when: and approval: required: a planned moment cannot wait on a human"
            )
        return self

    @model_validator(mode="after")
    def _scoped(self) -> Policy:
        if self.scope == "node":
            if self.quorum_percent is not None:
                raise ValueError("quorum_percent needs scope: clique or domain")
            return self
        if self.when is not None:
            raise ValueError(f"scope: {self.scope} and when: planned work is planned per node")
        return self

    @property
    def disruptive(self) -> bool:
        """Notify-only policies take no node out of service, so budgets do not count them."""
        return any(step.action != "notify" for step in self.actions)


class PolicyFile(_Strict):
    """The envelope only: each entry is validated as a Policy on its own, so one broken policy
    does not hide the problems (or the duplicate names) of its neighbours."""

    policies: list[Any] = Field(min_length=1)


class Limit(_Strict):
    """Both bounds apply when both are given; the stricter wins. `min` is the percent bound's
    floor, so that a percent means something on a small cluster too (10% of 16 nodes is 1.6)."""

    count: int | None = Field(default=None, ge=0)
    percent: float | None = Field(default=None, ge=0, le=100)
    min: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _floor_needs_percent(self) -> Limit:
        if self.min is not None and self.percent is None:
            raise ValueError("min is the floor of percent: give percent too")
        return self


class MaxUnhealthy(_Strict):
    per_pool: Limit = Limit(percent=10, min=2)
    cluster: Limit = Limit(percent=10, min=2)
    # An NVLink domain's own budget: its trays fenced by tray remediations beyond this make the
    # domain count as out toward `max_domains_out` (policy/domains_out.py); 2 of an NVL72's 18.
    per_domain: Limit = Limit(percent=10, min=2)


def _count_limit(value: Any) -> Any:
    """`max_new_faults: 20` is shorthand for `{count: 20}`."""
    return {"count": value} if isinstance(value, int) and not isinstance(value, bool) else value


class StormBreaker(_Strict):
    """`max_new_faults` distinct known nodes newly faulted within `window` trip it: every
    decision is queued until a human resets it. The stricter of count and percent (of the
    fleet) wins, so the breaker means the same on 16 and on 16,000 nodes."""

    enabled: bool = True
    max_new_faults: Annotated[Limit, BeforeValidator(_count_limit)] = Limit(
        count=20, percent=10, min=3
    )
    window: Duration = timedelta(minutes=5)

    @model_validator(mode="after")
    def _bounded(self) -> StormBreaker:
        limit = self.max_new_faults
        if limit.count is None and limit.percent is None:
            raise ValueError("max_new_faults needs a count or a percent")
        if limit.count == 0:
            raise ValueError("max_new_faults.count must be at least 1")
        return self


class PlannedBudget(_Strict):
    """Planned remediations are announced days ahead and never a storm: they have their own
    limits instead of max_concurrent and the breaker. `per_pool` nodes of one pool at once."""

    max_concurrent: int = Field(default=2, ge=0)
    per_pool: int = Field(default=1, ge=0)


class NewMachinesBudget(_Strict):
    """Validations of machines that joined by themselves (a scale-up, a manual add) are no
    fault: they have their own limit instead of `max_unhealthy`, `max_concurrent` and the
    breakers, so a 200-node scale-up validates in waves. The stricter of count and percent (of
    the cluster's nodes) wins."""

    max_concurrent: Annotated[Limit, BeforeValidator(_count_limit)] = Limit(
        count=20, percent=10, min=5
    )


class MachineHoldSettings(_Strict):
    """A machine (by its instance id or DMI serial) that failed validation or was replaced
    `count` times within `within` is quarantined, never returned to a pool (docs/ledger.md).
    Each remediation counts once per machine; `count: 0` turns the rule off."""

    count: int = Field(default=3, ge=0)
    within: Duration = timedelta(days=30)


def _window_names(value: dict[str, MaintenanceWindow]) -> dict[str, MaintenanceWindow]:
    for name in value:
        _policy_name(name)
        if name == POOL_WINDOW:
            raise ValueError(f"{POOL_WINDOW!r} means the node's own pool's windows: pick another")
    return value


class FleetBreaker(_Strict):
    """Off by default. On, this cluster takes part in the breaker of every cluster sharing its
    database: its new faults and its node count go to the shared window, and once
    `max_new_faults` of the fleet's nodes (the stricter of count and percent) newly faulted
    within `window`, every taking-part cluster queues its decisions until a human resets it
    from the fleet console. The cluster's own `storm_breaker` is unchanged."""

    enabled: bool = False
    max_new_faults: Annotated[Limit, BeforeValidator(_count_limit)] = Limit(percent=5, min=3)
    window: Duration = timedelta(minutes=10)

    @model_validator(mode="after")
    def _bounded(self) -> FleetBreaker:
        limit = self.max_new_faults
        if limit.count is None and limit.percent is None:
            raise ValueError("max_new_faults needs a count or a percent")
        if limit.count == 0:
            raise ValueError("max_new_faults.count must be at least 1")
        if self.window <= timedelta(0):
            raise ValueError("window must be longer than zero")
        return self


# kubelet `--register-with-taints` syntax: key[=value]:effect (a taint key may carry a DNS prefix).
STARTUP_TAINT = re.compile(
    r"^(?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
    r"(?:=[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?:(NoSchedule|NoExecute)$"
)


def _startup_taint(value: str | None) -> str | None:
    if value is not None and not STARTUP_TAINT.match(value):
        raise ValueError(
            "a taint as the kubelet's --register-with-taints takes it, key[=value]:effect with "
            "effect NoSchedule or NoExecute (e.g. remediator.io/unvalidated=true:NoSchedule), "
            f"not {value!r}"
        )
    return value


class GlobalSettings(_Strict):
    max_unhealthy: MaxUnhealthy = MaxUnhealthy()
    max_concurrent: int = Field(default=5, ge=0)
    # NVLink domains (NVL72 racks) of one pool out of service at once (docs/topology.md).
    max_domains_out: int = Field(default=1, ge=0)
    storm_breaker: StormBreaker = StormBreaker()
    fleet_breaker: FleetBreaker = FleetBreaker()
    default_cooldown: Duration = timedelta(hours=1)
    dry_run: bool = False
    # Opt-outs (docs/optouts.md): the longest one a person may record, and how long a faulty
    # node may stay held by opt-outs before on-call is paged.
    max_opt_out: Duration = DEFAULT_MAX_OPT_OUT
    max_opt_out_hold: Duration = DEFAULT_MAX_HOLD

    @field_validator("max_opt_out", "max_opt_out_hold")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("must be longer than 0s")
        return value

    # Maintenance windows by name, each assigned to pools (policy/windows.py).
    windows: Annotated[dict[str, MaintenanceWindow], AfterValidator(_window_names)] = Field(
        default_factory=dict
    )
    planned: PlannedBudget = PlannedBudget()
    new_machines: NewMachinesBudget = NewMachinesBudget()
    machine_hold: MachineHoldSettings = MachineHoldSettings()
    # The taint every new machine registers with (kubelet --register-with-taints, docs/
    # validation.md): it keeps the machine from work until a passed validation removes it, and a
    # node that carries it with no remediation (a scale-up, a manual add) gets a validation.
    startup_taint: Annotated[str | None, AfterValidator(_startup_taint)] = None
