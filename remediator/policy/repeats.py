"""What a `repeat` counts: the loader's check of `repeat.of` (each entry a policy of the set or a
signal kind) and the selection evaluate applies to a node's past remediations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from remediator.policy.fallbacks import fallback_chain
from remediator.policy.schema import REPLACE, Policy
from remediator.signals.model import SignalKind

KINDS = frozenset(kind.value for kind in SignalKind)


@dataclass(frozen=True, slots=True)
class Counted:
    """Past remediations that count toward a repeat: those of `policies`, or started by a signal
    of one of `kinds`."""

    policies: frozenset[str]
    kinds: frozenset[str] = frozenset()

    def counts(self, policy: str, kind: str | None) -> bool:
        return policy in self.policies or (kind is not None and kind in self.kinds)

    def describe(self) -> str:
        return ", ".join(sorted(self.policies | self.kinds))


def counted(policy: Policy, by_name: Mapping[str, Policy]) -> Counted | None:
    """None for a policy without `repeat`. An `of` entry naming a policy is that policy (the
    loader refuses a name that is both); any other entry is a signal kind."""
    repeat = policy.match.repeat
    if repeat is None:
        return None
    if repeat.of is None:
        chain = {name for name, _ in fallback_chain(policy, by_name) if name != REPLACE}
        return Counted(frozenset({policy.name, *chain}))
    names = frozenset(entry for entry in repeat.of if entry in by_name)
    return Counted(names, frozenset(repeat.of) - names)


def repeat_problems(policies: Sequence[Policy], where: Mapping[str, Sequence[str]]) -> list[str]:
    """One `file:line: field: message` per bad `repeat.of` entry; `where` maps a policy's name to
    the `file:line: policies[i].match.repeat.of[j]` of each entry."""
    names = {p.name for p in policies}
    problems: list[str] = []
    for policy in policies:
        repeat = policy.match.repeat
        if repeat is None or repeat.of is None:
            continue
        places = where.get(policy.name, ())
        for index, entry in enumerate(repeat.of):
            at = places[index] if index < len(places) else f"{policy.name}: repeat.of[{index}]"
            if entry in names and entry in KINDS:
                problems.append(
                    f"{at}: {entry!r} is both a policy and a signal kind: rename the policy"
                )
            elif entry not in names and entry not in KINDS:
                problems.append(
                    f"{at}: {entry!r} is neither a policy of this set nor a signal kind "
                    f"(policies: {', '.join(sorted(names))}; kinds: {', '.join(sorted(KINDS))})"
                )
    return problems
