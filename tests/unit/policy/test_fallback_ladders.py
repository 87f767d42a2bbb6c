"""`on_failure: <policy>`, a named fallback ladder: checked at load (the name exists, something
to continue with, a different step, no cycle) with `file:line: field` problems and the last good
set kept; resolved into the chain a decision stores; and the planner going on with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediator.actions.outcome import Failed
from remediator.clock import FakeClock
from remediator.errors import PolicyError
from remediator.model.states import State, check_transition
from remediator.policy.fallbacks import fallback_chain
from remediator.policy.ladder import LadderStep, ladder_from_policy, parse_ladder
from remediator.policy.loader import load_policy_dir
from remediator.policy.watcher import PolicyStore
from remediator.remediation.planner import Move, Situation, escalated, plan, step_of, work_states


def ladder_policy(name: str, steps: str, on_failure: str | None = None, codes: str = "95") -> str:
    fallback = f"    on_failure: {on_failure}\n" if on_failure else ""
    return f"""\
  - name: {name}
    description: {name}
    why: NVIDIA XID catalog
    match: {{kind: xid, codes: [{codes}]}}
{fallback}    actions:
      - action: cordon
      - action: drain
{steps}"""


RESET = "      - action: reset_gpu\n      - action: diagnose\n      - action: uncordon\n"
REBOOT = (
    "      - action: reboot\n        timeout: 3m\n      - action: diagnose\n        level: 3\n"
    "      - action: uncordon\n"
)


def policies(*entries: str) -> str:
    return "policies:\n" + "".join(entries)


CHAIN = policies(
    ladder_policy("xid-95-reset", RESET, "xid-79-reboot"),
    ladder_policy("xid-79-reboot", REBOOT, "replace", codes="79"),
)


def problems_of(directory: Path, text: str) -> list[str]:
    (directory / "a.yaml").write_text(text)
    with pytest.raises(PolicyError) as caught:
        load_policy_dir(directory)
    return caught.value.problems


def test_a_named_fallback_chain_loads_and_resolves(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(CHAIN)
    loaded = load_policy_dir(tmp_path)
    by_name = {p.name: p for p in loaded.policies}
    chain = fallback_chain(by_name["xid-95-reset"], by_name)
    assert [(name, [s.action for s in steps]) for name, steps in chain] == [
        ("xid-79-reboot", ["reboot", "diagnose", "uncordon"]),
        ("replace", ["replace"]),
    ]


def test_an_unknown_name_is_refused_with_file_line_and_field(tmp_path: Path) -> None:
    text = policies(ladder_policy("xid-95-reset", RESET, "xid-79-reboto"))
    assert problems_of(tmp_path, text) == [
        "a.yaml:6: policies[0].on_failure: no policy named 'xid-79-reboto' to fall back to "
        "(use 'replace' or a policy's name: none)"
    ]


def test_a_cycle_is_refused(tmp_path: Path) -> None:
    text = policies(
        ladder_policy("a-reset", RESET, "b-reboot"),
        ladder_policy("b-reboot", REBOOT, "a-reset", codes="79"),
    )
    found = problems_of(tmp_path, text)
    assert "a.yaml:6: policies[0].on_failure: fallback cycle a-reset → b-reboot → a-reset" in found
    assert any("policies[1].on_failure: fallback cycle b-reboot → a-reset" in p for p in found)


def test_a_fallback_must_move_on_and_have_something_to_do(tmp_path: Path) -> None:
    fence_only = ladder_policy("d-fence", "", codes="48")  # cordon and drain, nothing more
    text = policies(
        ladder_policy("a-reset", RESET, "b-reset"),
        ladder_policy("b-reset", RESET, codes="79"),
        ladder_policy("c-reset", RESET, "d-fence"),
        fence_only,
    )
    found = problems_of(tmp_path, text)
    assert any(
        "policies[0].on_failure: policy 'b-reset' continues with reset_gpu, which this ladder "
        "has already" in p
        for p in found
    )
    assert any(
        "policies[2].on_failure: policy 'd-fence' has no reset_gpu, reboot, diagnose or replace "
        "step" in p
        for p in found
    )


def test_the_last_good_set_stays_when_a_name_goes_missing(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(CHAIN)
    store = PolicyStore(tmp_path, FakeClock())
    assert store.reload_if_changed() is True
    good = store.active
    (tmp_path / "a.yaml").write_text(CHAIN.replace("on_failure: xid-79-reboot", "on_failure: x"))
    assert store.reload_if_changed() is False
    assert store.active is good
    assert store.last_error is not None
    assert "no policy named 'x'" in store.last_error.problems[0]


def stored_chain(tmp_path: Path) -> tuple[LadderStep, ...]:
    (tmp_path / "a.yaml").write_text(CHAIN)
    by_name = {p.name: p for p in load_policy_dir(tmp_path).policies}
    reset = by_name["xid-95-reset"]
    ladder = ladder_from_policy(reset.actions, reset.on_failure, fallback_chain(reset, by_name))
    # As stored on the remediation and read back.
    return parse_ladder([step.to_json() for step in ladder])


def test_a_failed_reset_goes_on_with_the_named_ladder(tmp_path: Path) -> None:
    ladder = stored_chain(tmp_path)
    assert [s.action for s in ladder if not s.fallback] == [
        "cordon",
        "drain",
        "reset_gpu",
        "diagnose",
        "uncordon",
    ]
    failed = plan(
        Situation(State.RESETTING_GPU, ladder, outcome=Failed("nvidia-smi: GPU reset failed"))
    )
    assert isinstance(failed, Move) and failed.target is State.REBOOTING
    check_transition(State.RESETTING_GPU, failed.target)
    assert failed.action == "reset_gpu_failed"
    assert failed.detail["escalated_to"] == "xid-79-reboot"
    assert failed.detail["ladder"] == ["reboot", "diagnose", "uncordon"]
    now = parse_ladder(failed.fields["ladder"])
    assert work_states(now) == (
        State.QUARANTINED,
        State.REBOOTING,
        State.DIAGNOSING,
        State.UNCORDONING,
    )
    # The named ladder's own settings apply from now on.
    reboot, diagnose = step_of(now, "reboot"), step_of(now, "diagnose")
    assert reboot is not None and reboot.timeout_seconds == 180
    assert diagnose is not None and diagnose.level == 3
    # Its own fallback is next: a failed diagnostic now replaces.
    again = plan(Situation(State.DIAGNOSING, now, outcome=Failed("diag failed")))
    assert isinstance(again, Move) and again.target is State.REPLACING
    assert again.detail["escalated_to"] == "replace"
    assert escalated(escalated(ladder)) == (LadderStep("replace"),)


def test_a_failed_diagnostic_may_go_back_to_an_earlier_repair(tmp_path: Path) -> None:
    ladder = stored_chain(tmp_path)
    failed = plan(Situation(State.DIAGNOSING, ladder, outcome=Failed("diag failed")))
    assert isinstance(failed, Move) and failed.target is State.REBOOTING
    check_transition(State.DIAGNOSING, State.REBOOTING)
