"""Evaluation with a fake clock: every test drives `now` and the signals by hand."""

from __future__ import annotations

from collections.abc import Sequence

from remediator.policy.evaluate import (
    EvalState,
    Evaluation,
    History,
    PastRemediation,
    evaluate,
)
from remediator.policy.schema import GlobalSettings, Policy
from remediator.signals.model import Signal
from tests.unit.policy.builders import SETTINGS, at, policy, signal

HOT = policy(
    "gpu-hot",
    {"kind": "thermal", "threshold": {"above": 78, "clear": 75, "for": "2m"}},
    priority=60,
)
XID79 = policy("xid-79", {"kind": "xid", "codes": [79]}, priority=100)
APP = policy("app", {"kind": "xid", "codes": [13, 79]}, actions=[{"action": "notify"}])


def run(
    readings: Sequence[tuple[float, float]],
    policies: Sequence[Policy] = (HOT,),
    gpu: int = 0,
) -> list[tuple[float, list[str]]]:
    """Feed one reading per cycle, carrying the state; return the decided policies per cycle."""
    state = EvalState()
    out = []
    for when, value in readings:
        history = History.build(state=state)
        result = evaluate(
            [signal("n1", "thermal", when, gpu=gpu, value=value)],
            history,
            policies,
            at(when),
            SETTINGS,
        )
        state = result.state
        out.append((when, [d.policy for d in result.decisions]))
    return out


def fired(trace: list[tuple[float, list[str]]]) -> list[float]:
    return [when for when, names in trace if names]


def test_threshold_needs_the_for_duration() -> None:
    trace = run([(t, 79.0) for t in range(0, 151, 30)])
    assert fired(trace) == [120, 150]


def test_below_the_threshold_never_fires() -> None:
    assert fired(run([(t, 77.9) for t in range(0, 3600, 30)])) == []


def test_hysteresis_band_keeps_a_running_breach_but_cannot_complete_it() -> None:
    """Problem 5: one 79 °C reading then two minutes at 76 °C replaced a node "≥ 78 for 2m"."""
    readings = [(0, 80.0), (30, 76.0), (60, 76.0), (90, 77.0), (120, 76.0), (150, 76.0)]
    assert fired(run(readings)) == []
    assert fired(run([*readings, (180, 78.0)])) == [180]


def test_the_reason_names_how_long_readings_at_the_trigger_held() -> None:
    state = EvalState()
    decided = []
    for when, value in [(0, 79.0), (60, 77.0), (90, 79.0), (120, 80.0)]:
        result = evaluate(
            [signal("n1", "thermal", when, gpu=0, value=value)],
            History.build(state=state),
            (HOT,),
            at(when),
            SETTINGS,
        )
        state = result.state
        decided.extend(result.decisions)
    (decision,) = decided
    assert decision.reason == "gpu-hot: thermal value 80 on GPU 0 (≥ 78 for 2m)"


def test_hysteresis_band_does_not_start_a_breach() -> None:
    assert fired(run([(t, 77.0) for t in range(0, 300, 30)])) == []


def test_clear_level_resets_the_clock() -> None:
    readings = [(0, 80.0), (60, 80.0), (90, 75.0), (120, 80.0), (210, 80.0), (240, 80.0)]
    assert fired(run(readings)) == [240]


def test_a_gap_in_readings_restarts_the_streak() -> None:
    # Default gap is 2m: readings that stop coming cannot prove the GPU stayed hot.
    readings = [(0, 80.0), (30, 80.0), (200, 80.0), (230, 80.0), (320, 80.0)]
    assert fired(run(readings)) == [320]


def test_streak_is_per_gpu() -> None:
    state = EvalState()
    for t in range(0, 121, 30):
        gpu = 0 if t < 60 else 1
        result = evaluate(
            [signal("n1", "thermal", t, gpu=gpu, value=80.0)],
            History.build(state=state),
            [HOT],
            at(t),
            SETTINGS,
        )
        state = result.state
        assert result.decisions == ()


def test_decision_carries_what_the_executor_needs() -> None:
    sig = signal("n1", "xid", 5, gpu=3, code=79)
    history = History.build(pools={"n1": "train"})
    policy_ = policy("xid-79", {"kind": "xid", "codes": [79]}, priority=7, approval="required")
    (decision,) = evaluate([sig], history, [policy_], at(5), SETTINGS).decisions
    assert decision.node == "n1"
    assert decision.pool == "train"
    assert decision.policy == "xid-79"
    assert decision.priority == 7
    assert decision.signals == (sig,)
    assert [s.action for s in decision.actions] == ["cordon", "drain", "replace"]
    assert decision.approval == "required"
    assert decision.dry_run is False
    assert decision.disruptive is True
    assert decision.decided_at == at(5)
    assert decision.reason == "xid-79: xid 79 on GPU 3"


def test_threshold_reason_names_level_and_duration() -> None:
    trace_state = EvalState()
    result: Evaluation | None = None
    for t in range(0, 121, 30):
        result = evaluate(
            [signal("n1", "thermal", t, gpu=2, value=81.0)],
            History.build(state=trace_state),
            [HOT],
            at(t),
            SETTINGS,
        )
        trace_state = result.state
    assert result is not None
    assert result.decisions[0].reason == "gpu-hot: thermal value 81 on GPU 2 (≥ 78 for 2m)"


def test_dry_run_from_policy_or_global_settings() -> None:
    sig = signal("n1", "xid", code=79)
    dry_policy = policy("xid-79", {"kind": "xid", "codes": [79]}, dry_run=True)
    (d1,) = evaluate([sig], History(), [dry_policy], at(0), SETTINGS).decisions
    (d2,) = evaluate([sig], History(), [XID79], at(0), GlobalSettings(dry_run=True)).decisions
    (d3,) = evaluate([sig], History(), [XID79], at(0), SETTINGS).decisions
    assert (d1.dry_run, d2.dry_run, d3.dry_run) == (True, True, False)


def test_highest_priority_wins_per_node() -> None:
    sigs = [signal("n1", "xid", code=79), signal("n2", "xid", code=13)]
    decisions = evaluate(sigs, History(), [APP, XID79], at(0), SETTINGS).decisions
    assert [(d.node, d.policy) for d in decisions] == [("n1", "xid-79"), ("n2", "app")]
    assert decisions[1].disruptive is False


def test_equal_priority_breaks_ties_by_name() -> None:
    a = policy("b-policy", {"kind": "xid"})
    b = policy("a-policy", {"kind": "xid"})
    (decision,) = evaluate(
        [signal("n1", "xid", code=1)], History(), [a, b], at(0), SETTINGS
    ).decisions
    assert decision.policy == "a-policy"


def test_node_under_remediation_is_not_decided_again() -> None:
    history = History.build(open={"n1": "gpu-hot"})
    sigs = [signal("n1", "xid", code=79), signal("n2", "xid", code=79)]
    decisions = evaluate(sigs, history, [XID79], at(0), SETTINGS).decisions
    assert [d.node for d in decisions] == ["n2"]


def test_cooldown_per_node_and_policy() -> None:
    past = [PastRemediation("n1", "xid-79", at(0), "succeeded")]
    sigs = [signal("n1", "xid", 1800, code=79)]
    inside = evaluate(sigs, History.build(remediations=past), [XID79], at(1800), SETTINGS)
    assert inside.decisions == ()
    after = evaluate(sigs, History.build(remediations=past), [XID79], at(3601), SETTINGS)
    assert [d.policy for d in after.decisions] == ["xid-79"]
    other = [PastRemediation("n1", "something-else", at(0), "succeeded")]
    unrelated = evaluate(sigs, History.build(remediations=other), [XID79], at(1800), SETTINGS)
    assert [d.policy for d in unrelated.decisions] == ["xid-79"]


def test_policy_cooldown_overrides_the_default() -> None:
    short = policy("xid-79", {"kind": "xid", "codes": [79]}, cooldown="5m")
    past = [PastRemediation("n1", "xid-79", at(0), "succeeded")]
    result = evaluate(
        [signal("n1", "xid", 400, code=79)],
        History.build(remediations=past),
        [short],
        at(400),
        SETTINGS,
    )
    assert len(result.decisions) == 1


def test_cooldown_lets_a_lower_priority_policy_act() -> None:
    past = [PastRemediation("n1", "xid-79", at(0), "succeeded")]
    result = evaluate(
        [signal("n1", "xid", 60, code=79)],
        History.build(remediations=past),
        [XID79, APP],
        at(60),
        SETTINGS,
    )
    assert [d.policy for d in result.decisions] == ["app"]


def test_burst_counts_within_the_window() -> None:
    burst = policy("nvl", {"kind": "xid", "codes": [74], "burst": {"count": 3, "within": "10m"}})
    state = EvalState()
    decided = []
    for gpu, t in enumerate((0, 300, 660, 700, 1200)):
        result = evaluate(
            [signal("n1", "xid", t, gpu=gpu, code=74)],
            History.build(state=state),
            [burst],
            at(t),
            SETTINGS,
        )
        state = result.state
        if result.decisions:
            decided.append(t)
            assert "3 events within 10m" in result.decisions[0].reason
    # 0, 300, 660 span 11 minutes; 300, 660, 700 fit in 10; 660, 700, 1200 do too.
    assert decided == [700, 1200]


def test_burst_counts_a_lasting_state_once_but_every_counter_rise() -> None:
    """The XID gauge re-announced every fold window is one fault; NVLink counter rises are
    new errors each time they pass the fold."""
    xid = policy("x", {"kind": "xid", "codes": [74], "burst": {"count": 3, "within": "10m"}})
    nvl = policy("n", {"kind": "nvlink", "burst": {"count": 3, "within": "10m"}})
    state = EvalState()
    decided = []
    for t in (0, 120, 240, 360):
        sigs = [signal("n1", "xid", t, gpu=0, code=74), signal("n2", "nvlink", t, gpu=0, value=9)]
        result = evaluate(sigs, History.build(state=state), [xid, nvl], at(t), SETTINGS)
        state = result.state
        decided += [(t, d.node) for d in result.decisions]
    assert decided == [(240, "n2"), (360, "n2")]
    assert len(state.events[("x", "n1")]) == 1


def test_burst_with_threshold_counts_only_breaches() -> None:
    burst = policy(
        "nvl", {"kind": "nvlink", "threshold": {"above": 1}, "burst": {"count": 2, "within": "5m"}}
    )
    state = EvalState()
    decided = []
    for t, value in ((0, 5.0), (60, 0.0), (120, 0.0), (180, 3.0)):
        result = evaluate(
            [signal("n1", "nvlink", t, gpu=0, value=value)],
            History.build(state=state),
            [burst],
            at(t),
            SETTINGS,
        )
        state = result.state
        decided += [t for _ in result.decisions]
    assert decided == [180]


def test_events_of_other_nodes_do_not_add_up() -> None:
    burst = policy("nvl", {"kind": "xid", "codes": [74], "burst": {"count": 2, "within": "10m"}})
    sigs = [signal("n1", "xid", 0, code=74), signal("n2", "xid", 1, code=74)]
    assert evaluate(sigs, History(), [burst], at(1), SETTINGS).decisions == ()


DAY = 86400.0


def decide_repeat(
    repeat: dict[str, object], past: list[tuple[str, str | None, float]], *others: Policy
) -> list[str]:
    """The policy decided for an XID 79 on n1 at day 10, given (policy, kind, days ago) before."""
    repeated = policy("again", {"kind": "xid", "codes": [79], "repeat": repeat}, priority=200)
    now = 10 * DAY
    history = History.build(
        remediations=[
            PastRemediation("n1", name, at(now - d * DAY), "succeeded", kind)
            for name, kind, d in past
        ]
    )
    sig = [signal("n1", "xid", now, code=79)]
    result = evaluate(sig, history, [repeated, XID79, *others], at(now), SETTINGS)
    return [d.policy for d in result.decisions]


def test_repeat_counts_the_policy_itself_in_the_window_by_default() -> None:
    rule = {"count": 3, "within": "7d"}
    assert decide_repeat(rule, [("again", "xid", 1)]) == ["xid-79"]
    assert decide_repeat(rule, [("again", "xid", 1), ("again", "xid", 8)]) == ["xid-79"]
    assert decide_repeat(rule, [("again", "xid", 1), ("again", "xid", 6)]) == ["again"]


def test_repeat_never_counts_another_policy_by_default() -> None:
    """Issue 22 item 10: an application-fault notify made the first XID 79 a repeat."""
    rule = {"count": 2, "within": "7d"}
    assert decide_repeat(rule, [("xid-app-notify", "xid", 1)]) == ["xid-79"]


def test_repeat_counts_the_fallback_chain_by_default() -> None:
    reset = policy(
        "reset",
        {"kind": "xid", "codes": [95]},
        on_failure="reboot",
        actions=[
            {"action": "cordon"},
            {"action": "drain"},
            {"action": "reset_gpu"},
            {"action": "diagnose"},
            {"action": "uncordon"},
        ],
    )
    reboot = policy(
        "reboot",
        {"kind": "xid", "codes": [48]},
        actions=[{"action": "cordon"}, {"action": "drain"}, {"action": "reboot"}],
    )
    repeated = policy(
        "again",
        {"kind": "xid", "codes": [79], "repeat": {"count": 2, "within": "7d"}},
        priority=200,
        on_failure="reset",
        actions=[{"action": "cordon"}, {"action": "drain"}, {"action": "reboot"}],
    )
    now = 10 * DAY
    sig = [signal("n1", "xid", now, code=79)]
    for earlier, expected in (("reboot", ["again"]), ("reset", ["again"]), ("other", [])):
        past = [PastRemediation("n1", earlier, at(now - DAY), "succeeded", "xid")]
        history = History.build(remediations=past)
        found = evaluate(sig, history, [repeated, reset, reboot], at(now), SETTINGS)
        assert [d.policy for d in found.decisions] == expected, earlier


def test_repeat_of_names_policies_or_signal_kinds() -> None:
    by_policy = {"count": 2, "within": "7d", "of": ["xid-79"]}
    assert decide_repeat(by_policy, [("xid-79", "xid", 2)]) == ["again"]
    assert decide_repeat(by_policy, [("again", "xid", 2)]) == ["xid-79"]
    by_kind = {"count": 2, "within": "7d", "of": ["gpu_missing"]}
    assert decide_repeat(by_kind, [("lost", "gpu_missing", 2)]) == ["again"]
    assert decide_repeat(by_kind, [("lost", "xid", 2)]) == ["xid-79"]


def test_nth_is_the_older_name_of_count() -> None:
    older = policy("a", {"kind": "xid", "repeat": {"nth": 3, "within": "7d"}})
    assert older.match.repeat is not None and older.match.repeat.count == 3


def test_node_selector_by_pool_and_labels() -> None:
    only_train = policy("train-only", {"kind": "xid"}, nodes={"pools": ["train"]})
    only_h100 = policy("h100", {"kind": "xid"}, nodes={"labels": {"gpu": "h100"}})
    history = History.build(
        pools={"a": "train", "b": "infer", "c": "train"},
        labels={"a": {"gpu": "a100"}, "b": {"gpu": "h100"}},
    )
    sigs = [signal(n, "xid", code=1) for n in ("a", "b", "c", "unknown")]
    decisions = evaluate(sigs, history, [only_train, only_h100], at(0), SETTINGS).decisions
    assert sorted((d.node, d.policy) for d in decisions) == [
        ("a", "train-only"),
        ("b", "h100"),
        ("c", "train-only"),
    ]


def test_signal_labels_must_match() -> None:
    down = policy("ib-down", {"kind": "infiniband", "labels": {"problem": "link_down"}})
    sigs = [
        signal("a", "infiniband", labels={"problem": "link_down", "port": "1"}),
        signal("b", "infiniband", labels={"problem": "symbol_errors"}),
    ]
    decisions = evaluate(sigs, History(), [down], at(0), SETTINGS).decisions
    assert [d.node for d in decisions] == ["a"]


def test_presence_threshold_for_conditions() -> None:
    not_ready = policy(
        "not-ready",
        {"kind": "node_condition", "labels": {"type": "Ready"}, "threshold": {"for": "1m"}},
    )
    state = EvalState()
    decided = []
    for t in range(0, 91, 15):
        result = evaluate(
            [signal("n1", "node_condition", t, code=1, labels={"type": "Ready"})],
            History.build(state=state),
            [not_ready],
            at(t),
            SETTINGS,
        )
        state = result.state
        decided += [t for _ in result.decisions]
    assert decided == [60, 75, 90]


def test_state_is_pruned_for_removed_policies_and_stale_streaks() -> None:
    state = EvalState()
    result = evaluate(
        [signal("n1", "thermal", 0, gpu=0, value=90.0)], History(), [HOT], at(0), SETTINGS
    )
    assert len(result.state.streaks) == 1
    state = result.state
    later = evaluate([], History.build(state=state), [HOT], at(600), SETTINGS)
    assert later.state.streaks == {}
    gone = evaluate([], History.build(state=state), [], at(1), SETTINGS)
    assert gone.state.streaks == {}


def test_input_history_is_not_mutated() -> None:
    history = History.build(state=EvalState())
    evaluate([signal("n1", "thermal", 0, gpu=0, value=90.0)], history, [HOT], at(0), SETTINGS)
    assert history.state.streaks == {}


def test_signals_are_taken_in_time_order() -> None:
    late_first: list[Signal] = [
        signal("n1", "thermal", 120, gpu=0, value=80.0),
        signal("n1", "thermal", 0, gpu=0, value=80.0),
    ]
    result = evaluate(late_first, History(), [HOT], at(120), SETTINGS)
    assert [d.policy for d in result.decisions] == ["gpu-hot"]


def alert(when: float, since: float, value: float | None = None) -> Signal:
    """A firing alert as the webhook and FiringAlerts announce it: a state since `since`."""
    return signal("n1", "thermal", when, gpu=0, value=value).model_copy(update={"since": at(since)})


def decide(*batches: Sequence[Signal]) -> list[list[str]]:
    state = EvalState()
    out = []
    for batch in batches:
        now = max(s.observed_at for s in batch)
        result = evaluate(batch, History.build(state=state), (HOT,), now, SETTINGS)
        state = result.state
        out.append([d.policy for d in result.decisions])
    return out


def test_an_alert_firing_for_the_policys_for_acts_on_its_first_notification() -> None:
    """Problem 3: one notification (Alertmanager re-sends only every 4 h) must be enough."""
    assert decide([alert(150, since=0, value=83)]) == [["gpu-hot"]]


def test_an_alert_acts_once_it_has_held_for_the_policys_for() -> None:
    held = decide([alert(30, since=0, value=83)], [alert(90, 0, 83)], [alert(120, 0, 83)])
    assert held == [[], [], ["gpu-hot"]]


def test_an_alert_without_a_value_is_a_breach_at_the_trigger() -> None:
    assert decide([alert(30, since=0)], [alert(120, since=0)]) == [[], ["gpu-hot"]]


def test_an_alert_with_a_value_in_the_band_does_not_act() -> None:
    assert decide([alert(150, since=0, value=76)]) == [[]]


def test_a_value_less_reading_is_still_no_breach() -> None:
    """Only a state (an alert) speaks for its rule; a bare reading without a value does not."""
    bare = [signal("n1", "thermal", t, gpu=0) for t in (0, 60, 120, 180)]
    assert decide(*([s] for s in bare)) == [[], [], [], []]


GPU_A = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
GPU_B = "GPU-bbbbbbbb-0000-0000-0000-000000000002"


def decide_by_hardware(
    by: str,
    past: list[PastRemediation],
    *,
    node: str = "n1",
    uuid: str | None = GPU_A,
    machines: dict[str, str] | None = None,
) -> list[str]:
    """The policy decided for an XID 79 on `node` at day 10 under `repeat: {by: ...}`."""
    repeated = policy(
        "again",
        {
            "kind": "xid",
            "codes": [79],
            "repeat": {"count": 2, "within": "7d", "by": by, "of": ["xid-79"]},
        },
        priority=200,
    )
    now = 10 * DAY
    history = History.build(remediations=past, machines=machines)
    sig = signal("n1", "xid", now, code=79).model_copy(update={"node": node, "gpu_uuid": uuid})
    result = evaluate([sig], history, [repeated, XID79], at(now), SETTINGS)
    return [d.policy for d in result.decisions]


def past_on(
    node: str, days_ago: float, *, gpus: set[str], machine: str | None = None
) -> PastRemediation:
    return PastRemediation(
        node,
        "xid-79",
        at(10 * DAY - days_ago * DAY),
        "succeeded",
        "xid",
        gpus=frozenset(gpus),
        machine=machine,
    )


def test_repeat_by_gpu_follows_the_gpu_to_another_node_name() -> None:
    """Issue 28: the GPU failed on n0, was repaired and came back as n1: the same GPU again."""
    assert decide_by_hardware("gpu", [past_on("n0", 2, gpus={GPU_A})]) == ["again"]
    # The node name's earlier remediation was about another GPU (new hardware under the name).
    assert decide_by_hardware("gpu", [past_on("n1", 2, gpus={GPU_B})]) == ["xid-79"]
    assert decide_by_hardware("gpu", [past_on("n0", 8, gpus={GPU_A})]) == ["xid-79"]
    # By node, the move hides the repeat and the other GPU makes one: what #28 fixes.
    assert decide_by_hardware("node", [past_on("n0", 2, gpus={GPU_A})]) == ["xid-79"]
    assert decide_by_hardware("node", [past_on("n1", 2, gpus={GPU_B})]) == ["again"]


def test_repeat_by_gpu_without_a_uuid_counts_the_machine_then_the_node() -> None:
    past = [past_on("n0", 2, gpus=set(), machine="dmi:SN1")]
    found = decide_by_hardware("gpu", past, uuid=None, machines={"n1": "dmi:SN1"})
    assert found == ["again"]
    assert decide_by_hardware("gpu", [past_on("n1", 2, gpus=set())], uuid=None) == ["again"]


def test_repeat_by_machine_counts_the_machine_whatever_its_name() -> None:
    past = [past_on("n0", 2, gpus={GPU_B}, machine="aws:i-1")]
    assert decide_by_hardware("machine", past, machines={"n1": "aws:i-1"}) == ["again"]
    # A recreated instance under the old name is another machine.
    recreated = [past_on("n1", 2, gpus={GPU_B}, machine="gce:111")]
    assert decide_by_hardware("machine", recreated, machines={"n1": "gce:222"}) == ["xid-79"]
