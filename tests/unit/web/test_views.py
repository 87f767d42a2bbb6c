"""The console's arithmetic: durations, timeline stays, pods, runbooks, repeat offenders."""

from __future__ import annotations

from datetime import timedelta

import pytest

from remediator.model.states import State
from remediator.signals.model import Signal, SignalKind
from remediator.web import views
from tests.fixtures.web import shipped_policies
from tests.unit.web.builders import T0, event, path, record


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, ""),
        (0.2, "<1s"),
        (42, "42s"),
        (252, "4m 12s"),
        (7_500, "2h 5m"),
        (3 * 86_400 + 4 * 3_600 + 59, "3d 4h"),
        (7 * 86_400, "7d"),
        (3_600, "1h"),
        (300, "5m"),
    ],
)
def test_format_duration(seconds: float | None, text: str) -> None:
    assert views.format_duration(seconds) == text


def test_relative_and_absolute_times() -> None:
    assert views.relative(T0, T0 + timedelta(seconds=3)) == "just now"
    assert views.relative(T0, T0 + timedelta(minutes=5)) == "5m ago"
    assert views.relative(T0 + timedelta(hours=2), T0) == "in 2h"
    assert views.relative(None, T0) == ""
    assert views.absolute(T0) == "2026-03-01 12:00:00 UTC"


def test_timeline_measures_each_stay_and_the_current_one_so_far() -> None:
    events = (
        *path(State.QUARANTINED, State.DRAINING, step=60),
        event(10, 150, None, None, "drain", {"pods": []}),
    )
    rows = views.timeline(record(State.DRAINING, events), T0 + timedelta(seconds=400))
    assert [(r.event.action, r.seconds, r.ongoing) for r in rows] == [
        ("detected", 60.0, False),
        ("quarantined", 60.0, False),
        ("draining", 280.0, True),
        ("drain", None, False),
    ]


def test_timeline_of_a_finished_remediation_has_no_running_stay() -> None:
    done = T0 + timedelta(seconds=120)
    events = path(State.QUARANTINED, State.SUCCEEDED, step=60)
    rows = views.timeline(record(State.SUCCEEDED, events, finished_at=done), done)
    assert [r.seconds for r in rows] == [60.0, 60.0, None]
    assert views.elapsed(record(State.SUCCEEDED, finished_at=done), T0 + timedelta(days=1)) == 120


def test_pods_merge_checkpoint_and_drain_reports_newest_last() -> None:
    events = (
        event(1, 0, None, None, "checkpoint", {"facts": {"asked": ["a/x", "a/y"]}}),
        event(2, 10, None, None, "checkpoint", {"answered": ["a/x"], "pending": ["a/y"]}),
        event(
            3,
            20,
            None,
            None,
            "drain",
            {
                "pods": [
                    {
                        "pod": "a/x",
                        "state": "terminating",
                        "sigterm_at": "t1",
                        "grace_seconds": 120,
                    },
                    {"pod": "a/z", "state": "blocked", "reason": "pdb", "message": "PDB a/z"},
                    {"state": "no pod key"},
                    "garbage",
                ]
            },
        ),
        event(4, 30, None, None, "drain", {"pods": [{"pod": "a/x", "state": "gone"}]}),
    )
    rows = {p.pod: p for p in views.pods(events)}
    assert sorted(rows) == ["a/x", "a/y", "a/z"]
    assert (rows["a/x"].checkpoint, rows["a/x"].drain, rows["a/x"].sigterm_at) == (
        "checkpointed",
        "gone",
        "t1",
    )
    assert rows["a/y"].checkpoint == "did not answer"
    assert (rows["a/z"].checkpoint, rows["a/z"].note) == ("not asked", "PDB a/z")


@pytest.mark.parametrize(
    ("kind", "code", "slug"),
    [
        (SignalKind.XID, 79, "xid-79"),
        (SignalKind.XID, 95, "xid-48-94-95-row-remap"),
        (SignalKind.XID, 31, "xid-13-31-43"),
        (SignalKind.XID, 147, "nvlink"),
        (SignalKind.XID, 9999, None),
        (SignalKind.THERMAL, None, "thermal"),
        (SignalKind.INFINIBAND, None, "infiniband"),
        (SignalKind.ROW_REMAP, 1, "xid-48-94-95-row-remap"),
    ],
)
def test_signal_runbooks(kind: SignalKind, code: int | None, slug: str | None) -> None:
    signal = Signal(node="n", kind=kind, source="s", observed_at=T0, code=code)
    assert views.signal_runbook(signal) == slug


def test_record_runbook_follows_the_situation_first() -> None:
    assert views.record_runbook(record(State.HELD_BY_OPT_OUT)) == "held-by-opt-out"
    held = path(State.QUARANTINED, State.DRAINING, State.HELD)
    assert views.record_runbook(record(State.HELD, held)) == "drain-stuck-pdb"
    failed = path(State.QUARANTINED, State.REPLACING, State.FAILED)
    assert views.record_runbook(record(State.FAILED, failed)) == "replacement-failed"
    assert views.record_runbook(record(State.FAILED)) == "remediation-stuck"
    assert views.record_runbook(record(State.DRAINING)) == "xid-79"
    no_signals = record(State.DRAINING, kind=SignalKind.THERMAL, code=None, signals=())
    assert views.record_runbook(no_signals) == "thermal"


def test_xid_explanation_names_the_fault_and_nvidias_action() -> None:
    text = views.xid_explanation(79)
    assert text is not None
    assert text.startswith("XID 79 — GPU has fallen off the bus.")
    assert "RESTART_BM now" in text and "(fatal)" in text
    assert views.xid_explanation(None) is None
    assert views.xid_explanation(123456) is None


def test_available_commands() -> None:
    def commands(state: State) -> list[str]:
        return [a.command for a in views.next_actions(record(state))]

    assert commands(State.AWAITING_APPROVAL) == ["approve", "cancel"]
    assert commands(State.HELD) == ["release", "cancel"]
    assert commands(State.FAILED) == ["retry", "cancel"]
    assert commands(State.SUCCEEDED) == []
    # Its node left the cluster: a retry has nothing to act on (it would fail on a 404).
    gone = views.next_actions(record(State.FAILED), gone=True)
    assert [a.command for a in gone] == ["cancel"]


def test_repeat_rule_takes_the_tightest_policy_and_falls_back() -> None:
    assert views.repeat_rule(None) == views.DEFAULT_REPEAT
    nth, within = views.repeat_rule(shipped_policies())
    assert (nth, within) == (2, timedelta(days=7))  # memory.yaml: a 2nd XID 64/95 in 7d


def test_policy_source_cuts_one_policy_from_the_stored_files() -> None:
    files = {
        "a.yaml": "policies:\n  - name: one\n    why: x\n\n  - name: two\n    why: y\n",
        "broken.yaml": "policies: [",
        "list.yaml": "- not a mapping\n",
        "z.yaml": "policies:\n- name: last\n  actions:\n  - action: cordon\n",
    }
    assert views.policy_source(files, "two") == ("a.yaml", "  - name: two\n    why: y\n")
    assert views.policy_source(files, "one") == ("a.yaml", "  - name: one\n    why: x\n")
    assert views.policy_source(files, "last") == (
        "z.yaml",
        "- name: last\n  actions:\n  - action: cordon\n",
    )
    assert views.policy_source(files, "three") is None


def test_detail_items_are_short() -> None:
    items = views.detail_items({"facts": {"pods": [1, 2, 3], "note": "x" * 500, "n": [1, 2]}})
    assert items[0] == ("pods", "3")
    assert len(items[1][1]) == 240 and items[1][1].endswith("…")
    assert items[2] == ("n", "1, 2")


LADDER = (
    {"action": "notify"},
    {"action": "cordon"},
    {"action": "checkpoint"},
    {"action": "drain"},
    {"action": "replace"},
)


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ((State.AWAITING_APPROVAL,), None),
        ((State.QUARANTINED,), 1),
        ((State.QUARANTINED, State.CHECKPOINTING, State.DRAINING), 3),
        ((State.QUARANTINED, State.DRAINING, State.REPLACING, State.VERIFYING), 4),
        ((State.QUARANTINED, State.DRAINING, State.HELD), 3),
        ((State.QUARANTINED, State.DRAINING, State.REPLACING, State.FAILED), 4),
        ((State.QUARANTINED, State.HELD_BY_OPT_OUT), 2),
        ((State.QUARANTINED, State.DRAINING, State.SUCCEEDED), None),
    ],
)
def test_current_step_is_the_rung_the_state_belongs_to(
    states: tuple[State, ...], expected: int | None
) -> None:
    # The first rung is `notify`: the old page always showed it as current.
    assert views.current_step(record(states[-1], path(*states), ladder=LADDER)) == expected


def test_waiting_list_says_what_each_action_does() -> None:
    opt_out = (
        *path(State.QUARANTINED),
        event(
            3,
            90,
            State.QUARANTINED,
            State.HELD_BY_OPT_OUT,
            "held_by_opt_out",
            {"pods": ["eval/eval-longrun-0"], "label": "remediator.io/disable-auto-replace"},
        ),
    )
    held = record(State.HELD_BY_OPT_OUT, opt_out, ladder=LADDER, hold_reason="1 pod opts out")
    item = views.waiting_item(held)
    assert item.reason == "1 pod opts out"
    assert str(item.actions[0]).startswith("release: evicts eval/eval-longrun-0")
    assert item.actions[-1].command == "cancel"
    assert item.runbook == "held-by-opt-out"

    failed = record(
        State.FAILED,
        path(State.QUARANTINED, State.DRAINING, State.REPLACING, State.FAILED),
        ladder=LADDER,
        error="node pool API: no spare capacity",
    )
    item = views.waiting_item(failed)
    assert item.reason == "node pool API: no spare capacity"
    assert [str(a) for a in item.actions] == [
        "retry: asks the node pool for a new replacement of gpu-node-1",
        "cancel: stops here; the engine uncordons gpu-node-1 if it is still in the cluster",
    ]

    approval = views.waiting_item(
        record(State.AWAITING_APPROVAL, path(State.AWAITING_APPROVAL), ladder=LADDER)
    )
    assert str(approval.actions[0]) == (
        "approve: starts the ladder on gpu-node-1: notify → cordon → checkpoint → drain → replace"
    )
    assert str(approval.actions[1]) == "cancel: stops here; the node was not touched"


def test_a_capacity_hold_links_its_own_runbook_and_says_release_waits() -> None:
    events = (
        *path(State.QUARANTINED, State.DRAINING),
        event(
            4,
            200,
            State.DRAINING,
            State.HELD,
            "drain_held",
            {"reason": "no spare", "pool": "pool-a", "spare_capacity": 0},
        ),
    )
    held = record(State.HELD, events, ladder=LADDER, hold_reason="no spare")
    assert views.capacity_hold(held)
    assert views.record_runbook(held) == "no-spare-capacity"
    assert str(views.next_actions(held)[0]) == (
        "release: waits for a spare node in pool pool-a, then drains gpu-node-1"
    )
    pdb = (*path(State.QUARANTINED, State.DRAINING, State.HELD),)
    assert views.record_runbook(record(State.HELD, pdb)) == "drain-stuck-pdb"
    assert str(views.next_actions(record(State.HELD, pdb))[0]) == (
        "release: runs drain on gpu-node-1 again"
    )


@pytest.mark.parametrize(
    ("kind", "value", "labels", "shown"),
    [
        # increase() extrapolates over the window: a count of one reads 1.00131.
        (SignalKind.ECC, 1.00131, {}, "1 double-bit ECC errors"),
        (SignalKind.ECC, 0.62, {}, "1 double-bit ECC errors"),
        (SignalKind.NVLINK, 11.97, {}, "12 NVLink errors in the window"),
        (SignalKind.NVLINK, 1.0, {"problem": "link_down", "link": "9"}, "NVLink 9 down"),
        (SignalKind.NVLINK, 1.0, {"problem": "link_down"}, "NVLink down"),
        (SignalKind.INFINIBAND, 2.4, {"problem": "link_errors"}, "2 link errors"),
        # A rate says it is one, and keeps its fraction.
        (SignalKind.INFINIBAND, 2.5, {"problem": "symbol_errors"}, "2.5 symbol errors per hour"),
    ],
)
def test_counts_show_as_integers(
    kind: SignalKind, value: float, labels: dict[str, str], shown: str
) -> None:
    signal = Signal(node="n", kind=kind, source="dcgm", observed_at=T0, value=value, labels=labels)
    assert views.signal_value(signal) == shown
