"""An agent's liveness from what the kubelet reports of its pod and from its last heartbeat: a
dead or crash-looping agent is known from its pod within the not-Ready bound, whatever the
heartbeat period a large fleet is asked for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from remediator.model.agent_liveness import AgentPod, Liveness, PodGone, Verdict, judge

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
# 10,000 agents at a budget of 10 heartbeats a second: asked every 1,000 s, silent after 50 min.
SILENT_AFTER = timedelta(minutes=50)
NOT_READY_AFTER = timedelta(seconds=30)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def pod(**kwargs: object) -> AgentPod:
    values: dict[str, object] = {
        "name": "remediator/remediator-agent-x7k2p",
        "ready": True,
        "since": ago(3600),
        "restarts": 0,
    }
    values.update(kwargs)
    return AgentPod(**values)  # type: ignore[arg-type]


def verdict(
    sight: AgentPod | PodGone | None, seen_at: datetime | None, watching: bool = True
) -> Verdict:
    return judge(
        sight,
        seen_at,
        NOW,
        silent_after=SILENT_AFTER,
        not_ready_after=NOT_READY_AFTER,
        watching=watching,
    )


def test_a_crash_looping_pod_is_known_at_once_though_its_last_heartbeat_is_recent() -> None:
    crashing = pod(
        ready=False,
        since=ago(12),
        restarts=4,
        waiting="CrashLoopBackOff",
        last_exit="Error, exit 1",
    )
    found = verdict(crashing, ago(60))
    assert found.liveness is Liveness.CRASH_LOOPING
    assert found.reason == (
        "agent pod remediator/remediator-agent-x7k2p: CrashLoopBackOff after 4 restarts "
        "(last exit: Error, exit 1)"
    )


def test_a_pod_not_ready_past_the_bound_is_silent_with_what_the_kubelet_said() -> None:
    found = verdict(pod(ready=False, since=ago(31), waiting="ImagePullBackOff"), ago(100))
    assert found.liveness is Liveness.SILENT
    assert found.reason == (
        "agent pod remediator/remediator-agent-x7k2p not Ready for 31 s (ImagePullBackOff)"
    )
    running_unready = verdict(pod(ready=False, since=ago(45)), ago(100))
    assert running_unready.liveness is Liveness.SILENT
    assert running_unready.reason.endswith("not Ready for 45 s (running, not ready)")
    stopping = verdict(pod(ready=False, since=ago(40), terminating=True), ago(100))
    assert stopping.reason.endswith("not Ready for 40 s (terminating)")


def test_a_pod_briefly_not_ready_is_judged_by_its_heartbeat() -> None:
    restarting = verdict(pod(ready=False, since=ago(5), restarts=1), ago(100))
    assert restarting.liveness is Liveness.REPORTING
    assert "not Ready for 5 s" in restarting.reason


def test_a_ready_pod_whose_heartbeats_stopped_cannot_reach_the_controller() -> None:
    found = verdict(pod(), ago(3001))
    assert found.liveness is Liveness.SILENT
    assert found.reason == (
        "agent pod remediator/remediator-agent-x7k2p Ready, but no heartbeat for 3001 s "
        "(bound 3000 s): it cannot reach the controller"
    )
    fresh = verdict(pod(restarts=2), ago(400))
    assert fresh.liveness is Liveness.REPORTING
    assert fresh.reason == (
        "agent pod remediator/remediator-agent-x7k2p Ready (2 restarts); heartbeat 400 s ago"
    )


def test_a_ready_pod_that_never_sent_a_heartbeat() -> None:
    starting = verdict(pod(since=ago(20)), None)
    assert starting.liveness is Liveness.REPORTING
    assert starting.reason.endswith("Ready; no heartbeat yet")
    mute = verdict(pod(since=ago(3001)), None)
    assert mute.liveness is Liveness.SILENT
    assert mute.reason.endswith("Ready for 3001 s, but never sent a heartbeat")


def test_a_deleted_pod_with_no_replacement_is_not_deployed_after_the_bound() -> None:
    gone = PodGone("remediator/remediator-agent-x7k2p", ago(31))
    found = verdict(gone, ago(40))
    assert found.liveness is Liveness.NOT_DEPLOYED
    assert found.reason == (
        "agent pod remediator/remediator-agent-x7k2p deleted 31 s ago and not replaced: "
        "the DaemonSet no longer runs on this node"
    )
    replacing = verdict(PodGone("remediator/remediator-agent-x7k2p", ago(3)), ago(40))
    assert replacing.liveness is Liveness.REPORTING
    assert "deleted 3 s ago" in replacing.reason


def test_no_pod_ever_on_the_node_leaves_the_heartbeat_to_judge() -> None:
    outside = verdict(None, ago(100))
    assert outside.liveness is Liveness.REPORTING
    assert outside.reason == "heartbeat 100 s ago; no agent pod on this node"
    stale = verdict(None, ago(3001))
    assert stale.liveness is Liveness.NOT_DEPLOYED
    assert stale.reason == "no agent pod on this node, and no heartbeat for 3001 s (bound 3000 s)"


@pytest.mark.parametrize(
    "sight",
    [
        pod(ready=False, since=ago(600), waiting="CrashLoopBackOff", restarts=9),
        PodGone("remediator/remediator-agent-x7k2p", ago(600)),
        None,
    ],
)
def test_without_a_pod_view_only_the_heartbeat_counts(sight: AgentPod | PodGone | None) -> None:
    """A console with no cluster access, a selector turned off, a watch that cannot see."""
    assert verdict(sight, ago(100), watching=False).liveness is Liveness.REPORTING
    blind = verdict(sight, ago(3001), watching=False)
    assert blind.liveness is Liveness.SILENT
    assert blind.reason == "no heartbeat for 3001 s (bound 3000 s)"
