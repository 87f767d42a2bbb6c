"""The pure halves of the actions: what each would do, given what the cluster looks like."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from remediator.actions.checkpoint import (
    ANN_DONE,
    ANN_HANDSHAKE,
    ANN_REQUESTED,
    plan_grace,
    rest_of_clock,
)
from remediator.actions.drain import backoff_seconds, overdue, plan_drain
from remediator.actions.pods import opted_out, skip_reason, workloads
from remediator.actions.quarantine import (
    ANN_POLICY,
    ANN_PRIOR_CORDON,
    ANN_REMEDIATION_ID,
    ANN_SIGNAL,
    QUARANTINE_TAINT,
    QuarantinePlan,
    Why,
    plan_quarantine,
)
from remediator.actions.release import plan_release
from remediator.actions.verify import node_problems
from remediator.kube.objects import Node, Pod, Taint
from tests.unit.actions.builders import node, pod

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
WHY = Why("rem-1", "xid-fatal", "xid 79 on gpu 3")


def applied(before: Node, plan: QuarantinePlan) -> Node:
    """The node as it would look once the plan has been carried out."""
    taints = before.taints + ((QUARANTINE_TAINT,) if plan.taint else ())
    return replace(
        before,
        annotations={**before.annotations, **plan.annotations},
        unschedulable=before.unschedulable or plan.cordon,
        taints=taints,
    )


class TestQuarantinePlan:
    def test_fresh_node_gets_everything(self) -> None:
        plan = plan_quarantine(node(), WHY)
        assert plan.cordon and plan.taint
        assert plan.annotations == {
            ANN_REMEDIATION_ID: "rem-1",
            ANN_POLICY: "xid-fatal",
            ANN_SIGNAL: "xid 79 on gpu 3",
        }
        assert plan.describe()[1:] == ["cordon", "taint remediator.io/quarantine=true:NoSchedule"]

    def test_second_run_plans_nothing(self) -> None:
        first = node()
        plan = plan_quarantine(first, WHY)
        assert plan_quarantine(applied(first, plan), WHY).empty

    def test_records_a_cordon_that_was_there_before(self) -> None:
        plan = plan_quarantine(node(unschedulable=True), WHY)
        assert plan.annotations[ANN_PRIOR_CORDON] == "true"
        assert not plan.cordon

    def test_own_cordon_after_a_crash_is_not_taken_for_a_humans(self) -> None:
        # Crashed after annotating and cordoning, before tainting.
        half = node(unschedulable=True, annotations={ANN_REMEDIATION_ID: "rem-1"})
        plan = plan_quarantine(half, WHY)
        assert ANN_PRIOR_CORDON not in plan.annotations
        assert plan.taint and not plan.cordon

    def test_another_remediations_node_is_not_taken_over(self) -> None:
        plan = plan_quarantine(node(annotations={ANN_REMEDIATION_ID: "rem-0"}), WHY)
        assert plan.owner_conflict == "rem-0"
        assert plan.empty

    def test_existing_taint_with_another_value_is_updated(self) -> None:
        other = Taint(QUARANTINE_TAINT.key, "old", "NoSchedule")
        assert not plan_quarantine(node(taints=(other,)), WHY).taint  # same (key, effect) slot


class TestReleasePlan:
    def test_undoes_our_quarantine(self) -> None:
        ours = node(
            unschedulable=True,
            taints=(QUARANTINE_TAINT,),
            annotations={ANN_REMEDIATION_ID: "rem-1", ANN_POLICY: "p", ANN_SIGNAL: "s"},
        )
        plan = plan_release(ours, "rem-1")
        assert plan.uncordon and plan.untaint
        assert set(plan.drop_annotations) == {ANN_REMEDIATION_ID, ANN_POLICY, ANN_SIGNAL}

    def test_keeps_a_humans_cordon(self) -> None:
        ours = node(
            unschedulable=True,
            taints=(QUARANTINE_TAINT,),
            annotations={ANN_REMEDIATION_ID: "rem-1", ANN_PRIOR_CORDON: "true"},
        )
        plan = plan_release(ours, "rem-1")
        assert not plan.uncordon and plan.untaint
        assert ANN_PRIOR_CORDON in plan.drop_annotations

    def test_never_uncordons_a_node_we_did_not_quarantine(self) -> None:
        assert plan_release(node(unschedulable=True), "rem-1").empty

    def test_leaves_another_remediations_quarantine(self) -> None:
        plan = plan_release(node(annotations={ANN_REMEDIATION_ID: "rem-0"}), "rem-1")
        assert plan.owner_conflict == "rem-0" and plan.empty


class TestPodSelection:
    def test_skips_daemonset_and_mirror_pods(self) -> None:
        assert skip_reason(pod("ds", owner="DaemonSet")) == "DaemonSet-managed"
        assert skip_reason(pod("static", owner="Node", mirror=True)) == "mirror pod"
        assert skip_reason(pod("bare", owner=None)) is None
        assert skip_reason(pod("job", owner="Job")) is None

    def test_workloads_exclude_terminating_and_finished(self) -> None:
        pods = [pod("a"), pod("b", deleting_at=T0), pod("c", phase="Succeeded"), pod("d")]
        assert [p.name for p in workloads(pods)] == ["a", "d"]

    def test_opt_out_label(self) -> None:
        label = {"remediator.io/disable-auto-replace": "true"}
        pods = [
            pod("keep", labels=label),
            pod("going", labels=label, deleting_at=T0),
            pod("other", labels={"remediator.io/disable-auto-replace": "false"}),
            pod("custom", labels={"team/no-replace": "TRUE"}),
        ]
        assert [p.name for p in opted_out(pods)] == ["keep"]
        assert [p.name for p in opted_out(pods, "team/no-replace")] == ["custom"]


class TestDrainPlan:
    def test_sorts_pods(self) -> None:
        pods = [
            pod("web"),
            pod("dying", deleting_at=T0, grace=30),
            pod("pdb"),
            pod("agent", owner="DaemonSet"),
            pod("static", mirror=True),
        ]
        plan = plan_drain(pods, {"uid-pdb": 12.0}, monotonic=10.0)
        assert [p.name for p in plan.evict] == ["web"]
        assert [p.name for p in plan.terminating] == ["dying"]
        assert [p.name for p in plan.backing_off] == ["pdb"]
        assert plan.skipped == (("ml/agent", "DaemonSet-managed"), ("ml/static", "mirror pod"))
        assert plan.remaining == 3

    def test_backoff_elapsed_means_evict_again(self) -> None:
        plan = plan_drain([pod("pdb")], {"uid-pdb": 12.0}, monotonic=12.5)
        assert [p.name for p in plan.evict] == ["pdb"]

    def test_only_unmovable_pods_left_means_nothing_remains(self) -> None:
        plan = plan_drain([pod("agent", owner="DaemonSet")], {}, monotonic=0.0)
        assert plan.remaining == 0

    def test_backoff_grows_to_kubectls_interval(self) -> None:
        assert [backoff_seconds(n) for n in (1, 2, 3, 4, 9)] == [1.0, 2.0, 4.0, 5.0, 5.0]

    def test_overdue_means_terminating_past_the_grace_deadline(self) -> None:
        due = pod("due", deleting_at=T0, grace=30)
        later = pod("later", deleting_at=T0 + timedelta(seconds=5), grace=30)
        assert overdue([due, later], T0) == ()
        assert overdue([due, later], T0 + timedelta(seconds=1)) == (due,)
        assert overdue([due, later], T0 + timedelta(seconds=6)) == (due, later)

    def test_sigterm_time_is_deletion_timestamp_minus_grace(self) -> None:
        dying = pod("dying", deleting_at=T0 + timedelta(seconds=120), grace=120)
        assert dying.sigterm_at == T0


HANDSHAKE = {ANN_HANDSHAKE: "true"}


def own_grace(p: Pod, seconds: int | None) -> Pod:
    return replace(p, termination_grace_seconds=seconds)


class TestGracePlan:
    """One clock per pod from the step's start: its own grace within [min_grace, max_grace]."""

    def test_pods_without_the_handshake_get_sigterm_at_the_start_with_their_own_grace(
        self,
    ) -> None:
        pods = [own_grace(pod("web"), 45), own_grace(pod("batch"), 600), pod("unset")]
        plan = plan_grace(pods, T0, T0, 30, 120)
        assert {p.name: g for p, g in plan.evict} == {"web": 45, "batch": 120, "unset": 30}
        assert plan.ask == () and plan.finished

    def test_the_floor_raises_a_short_grace(self) -> None:
        plan = plan_grace([own_grace(pod("quick"), 2)], T0, T0, 10, 120)
        assert [g for _, g in plan.evict] == [10]

    def test_handshake_pods_are_asked_once_and_not_evicted_while_saving(self) -> None:
        pods = [
            own_grace(pod("new", annotations=HANDSHAKE), 120),
            own_grace(pod("asked", annotations={**HANDSHAKE, ANN_REQUESTED: "x"}), 120),
            pod("agent", owner="DaemonSet", annotations=HANDSHAKE),
        ]
        plan = plan_grace(pods, T0, T0 + timedelta(seconds=5), 30, 120)
        assert [p.name for p in plan.ask] == ["new"]
        assert plan.saving == ("ml/asked", "ml/new") and plan.evict == ()
        assert not plan.finished and plan.next_deadline_seconds == 115

    def test_an_answer_is_evicted_with_the_rest_of_the_same_clock(self) -> None:
        done = own_grace(
            pod("a", annotations={**HANDSHAKE, ANN_REQUESTED: "x", ANN_DONE: "y"}), 120
        )
        plan = plan_grace([done], T0, T0 + timedelta(seconds=40), 30, 120)
        assert plan.finished and plan.answered == ("ml/a",)
        assert [g for _, g in plan.evict] == [80]

    def test_a_clock_that_ran_out_evicts_with_the_api_minimum_never_a_second_grace(self) -> None:
        slow = own_grace(pod("slow", annotations={**HANDSHAKE, ANN_REQUESTED: "x"}), 120)
        plan = plan_grace([slow], T0, T0 + timedelta(seconds=121), 30, 120)
        assert plan.finished and plan.expired == ("ml/slow",)
        assert [g for _, g in plan.evict] == [1]

    def test_sigterm_plus_grace_never_passes_the_end_of_the_clock(self) -> None:
        for second in range(0, 130, 7):
            now = T0 + timedelta(seconds=second)
            for p in (own_grace(pod("x"), 90), own_grace(pod("y", annotations=HANDSHAKE), 90)):
                assert second + rest_of_clock(p, T0, now, 30, 120) <= max(90, second + 1)

    def test_no_workloads_is_finished_at_once(self) -> None:
        assert plan_grace([pod("agent", owner="DaemonSet")], T0, T0, 30, 120).finished


class TestNodeProblems:
    def test_healthy(self) -> None:
        dedicated = Taint("nvidia.com/gpu", "present", "NoSchedule")
        assert node_problems(node(taints=(dedicated,)), "gpu-9") == []

    def test_missing_not_ready_cordoned_and_fenced(self) -> None:
        assert node_problems(None, "gpu-9") == ["gpu-9 has not joined the cluster"]
        sick = node(
            ready=False,
            unschedulable=True,
            taints=(Taint("node.kubernetes.io/not-ready", "", "NoSchedule"),),
        )
        problems = node_problems(sick, "gpu-9")
        assert problems == [
            "gpu-9 is not Ready (KubeletReady)",
            "gpu-9 is cordoned",
            "gpu-9 has taints node.kubernetes.io/not-ready",
        ]
