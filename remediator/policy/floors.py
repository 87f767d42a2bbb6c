"""Which GPU models a policy set's validations have no NCCL floor for. Such a validation skips
its NCCL check, with a warning on the remediation's timeline, rather than fail a machine over a
gap in the policy; these lists say so before it happens: `remediator policy validate` against
the models it knows of or is given (it cannot see the cluster), `remediator doctor` against the
GPU models each pool's nodes carry (GPU feature discovery's `nvidia.com/gpu.product`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from remediator.model.gpus import GPU_PRODUCT_LABEL, model_key, without_floor
from remediator.policy.schema import Policy, Validate


@dataclass(frozen=True)
class FloorGap:
    """A validate step (`actions[step]` of `policy`) whose `field` has no floor for `models`."""

    policy: str
    step: int
    field: str
    models: tuple[str, ...]

    def describe(self) -> str:
        return (
            f"policy {self.policy} actions[{self.step}].{self.field} has no floor for "
            f"{', '.join(self.models)}"
        )


@dataclass(frozen=True)
class PoolGap:
    """A pool whose nodes carry `model`, which the validating `policies` that select them give
    no floor."""

    pool: str
    model: str
    nodes: int
    policies: tuple[str, ...]

    def describe(self) -> str:
        return (
            f"pool {self.pool} ({self.nodes} x {self.model}): no NCCL floor in "
            f"{', '.join(self.policies)}"
        )


def floor_gaps(policies: Iterable[Policy], models: Sequence[str]) -> list[FloorGap]:
    """Every validate step running an NCCL check that lacks a floor for one of `models`."""
    gaps = []
    for policy in policies:
        for index, step in enumerate(policy.actions):
            if not isinstance(step, Validate):
                continue
            for on, field, floors in (
                (step.nccl, "busbw_floor", step.busbw_floor),
                (step.nccl_pair, "pair_busbw_floor", step.pair_busbw_floor),
            ):
                missing = without_floor(floors, models) if on else []
                if missing:
                    gaps.append(FloorGap(policy.name, index, field, tuple(missing)))
    return gaps


def pool_floor_gaps(
    policies: Sequence[Policy], pools: Mapping[str, Sequence[Mapping[str, str]]]
) -> list[PoolGap]:
    """Each pool (name → its nodes' labels) and GPU model its nodes carry that a validating
    policy selecting those nodes has no floor for; a node without the product label says
    nothing."""
    found = []
    for pool, nodes in sorted(pools.items()):
        by_model: dict[str, tuple[str, list[Mapping[str, str]]]] = {}
        for labels in nodes:
            model = labels.get(GPU_PRODUCT_LABEL)
            if model:
                by_model.setdefault(model_key(model), (model, []))[1].append(labels)
        for model, members in by_model.values():
            lacking = sorted(
                {
                    gap.policy
                    for policy in policies
                    if any(policy.nodes.selects(pool, labels) for labels in members)
                    for gap in floor_gaps([policy], [model])
                }
            )
            if lacking:
                found.append(PoolGap(pool, model, len(members), tuple(lacking)))
    return found
