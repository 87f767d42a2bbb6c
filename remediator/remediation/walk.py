"""A remediation's path through the planner for stated step results, with no cluster: what
`remediator policy test` shows for a scenario that says how its steps go (a repair that fails,
the Nth validation failing some checks). The very `plan` the engine runs decides every move;
this only plays the service's bookkeeping (the new machine a replacement brings, the count of
replacements, a named fallback's ladder taking over).

Wired into the policy CLI by the CLI root (remediator/cli.py, `add_walk`), so policy/ never
imports the planner."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from remediator.actions.outcome import Done, Failed, Outcome
from remediator.model.states import State
from remediator.policy.ladder import LadderStep, parse_ladder
from remediator.remediation.planner import STEP_NAMES, Move, Situation, plan

ENDS = frozenset({State.SUCCEEDED, State.HELD, State.FAILED})
MAX_MOVES = 64  # a ladder that loops is a bug the walk reports instead of hanging on


def walk(
    ladder: Sequence[LadderStep],
    failing_steps: Collection[str],
    validations: Sequence[Collection[str]],
) -> list[str]:
    """The states the remediation moves through after `detected`, in order. `failing_steps`
    name the steps (reboot, diagnose, …) that fail whenever they run; `validations[i]` are the
    checks the (i+1)th validation fails (none, or past the list: it passes)."""
    steps = tuple(ladder)
    state = State.DETECTED
    new_node: str | None = None
    replacements = 0
    ran = 0
    path: list[str] = []
    while state not in ENDS and len(path) < MAX_MOVES:
        outcome: Outcome | None = None
        if state in STEP_NAMES:
            outcome = _outcome(state, failing_steps, validations, ran, replacements)
            ran += state is State.VALIDATING
        decided = plan(
            Situation(
                state=state,
                ladder=steps,
                outcome=outcome,
                new_node=new_node,
                replacements=replacements,
            )
        )
        if not isinstance(decided, Move):
            path.append(f"stays {state.value}: {decided.reason}")
            break
        fields: dict[str, Any] = dict(decided.fields)
        if state is State.REPLACING and decided.action == "replace_done":
            replacements += 1
            new_node = str(fields.get("new_node") or new_node)
        if fields.get("ladder"):
            steps = parse_ladder(fields["ladder"])
        state = decided.target
        path.append(state.value)
    return path


def _outcome(
    state: State,
    failing_steps: Collection[str],
    validations: Sequence[Collection[str]],
    ran: int,
    replacements: int,
) -> Outcome:
    step = STEP_NAMES[state]
    if state is State.VALIDATING:
        fails = sorted(validations[ran]) if ran < len(validations) else []
        if fails:
            return Failed(f"validation failed: {', '.join(fails)}", {"checks": fails})
        return Done("validation passed")
    if step in failing_steps:
        return Failed(f"{step} failed (as the scenario says)")
    if state is State.REPLACING:
        return Done("replaced", {"new_node": f"replacement-{replacements + 1}"})
    return Done(f"{step} done")


def add_walk(policy_actions: Any) -> None:
    """`remediator policy test` walks remediations with this (see remediator/cli.py NESTED)."""
    policy_actions.choices["test"].set_defaults(walk=walk)
