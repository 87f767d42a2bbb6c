"""`on_failure` naming another policy (a named fallback ladder): the loader's checks — the name
exists, the named ladder has a step to continue with and moves on to a different one, the chain
has no cycle — and the chain a decision carries, so that its remediation keeps the ladders it
started with whatever later edits do to the policies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from remediator.policy.schema import REPAIR_STEPS, REPLACE, Policy, Replace, Step, fallback_steps

# (name of the fallback, its steps): ("replace", (replace,)) or (policy, its steps from its first
# repair or replace step).
Fallback = tuple[str, tuple[Step, ...]]


def fallback_chain(policy: Policy, by_name: Mapping[str, Policy]) -> tuple[Fallback, ...]:
    """Every ladder a failed repair of `policy` goes on to, in order."""
    chain: list[Fallback] = []
    seen = {policy.name}
    current = policy
    while current.on_failure is not None:
        name = current.on_failure
        if name == REPLACE:
            chain.append((REPLACE, (Replace(action="replace"),)))
            break
        following = by_name.get(name)
        if following is None or name in seen:
            break  # the loader refuses such a set; a chain never loops
        seen.add(name)
        chain.append((name, tuple(fallback_steps(following.actions))))
        current = following
    return tuple(chain)


def _cycle(start: str, by_name: Mapping[str, Policy]) -> list[str] | None:
    path = [start]
    current = by_name[start].on_failure
    while current is not None and current != REPLACE and current in by_name:
        if current == start:
            return [*path, start]
        if current in path:
            return None  # a loop that `start` only leads into: reported at its members
        path.append(current)
        current = by_name[current].on_failure
    return None


def fallback_problems(policies: Sequence[Policy], where: Mapping[str, str]) -> list[str]:
    """One `file:line: field: message` per bad `on_failure`; `where` maps a policy's name to
    the `file:line: policies[i].on_failure` of its field."""
    by_name = {p.name: p for p in policies}
    problems: list[str] = []
    for policy in policies:
        target = policy.on_failure
        if target is None or target == REPLACE:
            continue
        at = where.get(policy.name, f"{policy.name}: on_failure")
        following = by_name.get(target)
        if following is None:
            known = ", ".join(sorted(set(by_name) - {policy.name})) or "none"
            problems.append(
                f"{at}: no policy named {target!r} to fall back to "
                f"(use 'replace' or a policy's name: {known})"
            )
            continue
        steps = fallback_steps(following.actions)
        if not steps:
            problems.append(
                f"{at}: policy {target!r} has no reset_gpu, reboot, diagnose or replace step "
                "to continue with"
            )
            continue
        own = {s.action for s in policy.actions} & REPAIR_STEPS
        if steps[0].action in own:
            problems.append(
                f"{at}: policy {target!r} continues with {steps[0].action}, which this ladder "
                "has already: a fallback must move on to another step"
            )
        cycle = _cycle(policy.name, by_name)
        if cycle is not None:
            problems.append(f"{at}: fallback cycle {' → '.join(cycle)}")
    return problems
