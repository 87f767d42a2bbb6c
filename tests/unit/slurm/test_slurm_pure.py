"""The Slurm package's pure parts: host lists, error classes, opt-out, outcome combination."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

import pytest

from remediator.actions.outcome import Done, Held, Waiting
from remediator.errors import NotFoundError, PermanentError, TransientError
from remediator.slurm.client import SlurmClient, SlurmJob, classify, parse_job
from remediator.slurm.engine import both, together
from remediator.slurm.hostlist import expand
from remediator.slurm.settings import NotRequeueable, SlurmSettings
from remediator.slurm.steps import (
    JobsSoFar,
    decide,
    drain_reason,
    fate_of,
    opt_out_match,
    opted_out,
    spare_left_running,
    still_left_running,
)
from remediator.store.records import EventRecord
from remediator.web import views


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("", []),
        ("gpu-node-0", ["gpu-node-0"]),
        ("gpu-node-[0-2]", ["gpu-node-0", "gpu-node-1", "gpu-node-2"]),
        ("n[08-10],x", ["n08", "n09", "n10", "x"]),
        ("a[1,3]-b", ["a1-b", "a3-b"]),
    ],
)
def test_hostlists_expand(text: str, names: list[str]) -> None:
    assert expand(text) == names


def test_errors_are_classified() -> None:
    down = classify("drain", "slurm_update error: Unable to contact slurm controller")
    assert isinstance(down, TransientError) and "slurmctld unreachable" in str(down)
    assert isinstance(classify("drain", "Invalid node name specified"), NotFoundError)
    denied = classify("drain", "slurm_update error: Access/permission denied")
    assert isinstance(denied, PermanentError) and "permission denied" in str(denied)


def job(comment: str = "", features: str = "") -> SlurmJob:
    return parse_job(
        {
            "job_id": 5,
            "job_state": "RUNNING",
            "nodes": "n[1-2]",
            "comment": comment,
            "features": features,
            "requeue": True,
        }
    )


def test_opt_out_by_comment_or_feature() -> None:
    settings = SlurmSettings(opt_out_feature="keep")
    assert job().nodes == ("n1", "n2")
    assert opted_out(job(comment="please remediator:opt-out"), settings)
    assert opted_out(job(features="ib&keep"), settings)
    assert not opted_out(job(features="keeper"), settings)
    assert not opted_out(job(), SlurmSettings())


@pytest.mark.parametrize(
    ("raw", "address", "whole"),
    [
        ({"job_id": 5}, "5", "5"),
        ({"job_id": 8, "array_job_id": 8, "array_task_id": 3}, "8_3", "8_3"),
        ({"job_id": 11, "array_job_id": 8, "array_task_id": 0}, "8_0", "8_0"),
        ({"job_id": 8, "array_job_id": 8, "array_task_id": None}, "8", "8"),  # pending rest
        ({"job_id": 21, "het_job_id": 20, "het_job_offset": 1}, "20+1", "20"),
        ({"job_id": 20, "het_job_id": 20, "het_job_offset": 0}, "20+0", "20"),
    ],
)
def test_jobs_are_addressed_as_slurm_does(raw: dict[str, object], address: str, whole: str) -> None:
    parsed = parse_job({"job_state": "RUNNING", "array_job_id": 0, "het_job_id": 0, **raw})
    assert (parsed.id, parsed.whole) == (address, whole)


def test_one_line_without_the_banner() -> None:
    down = classify(
        "ping",
        "Slurmctld(primary) at vm is DOWN\n*****\n"
        "** RESTORE SLURMCTLD DAEMON TO SERVICE **\n*****\n",
    )
    assert str(down) == "ping: Slurm refused: Slurmctld(primary) at vm is DOWN"


def test_reason_names_the_remediation_and_policy() -> None:
    assert drain_reason("12", "xid-79-fallen-off-bus") == "remediator #12: xid-79-fallen-off-bus"


def test_both_and_together() -> None:
    wait = Waiting("slurm", 2.0, {"slurm_node": "n1"})
    assert both(Held("pods"), lambda: pytest.fail("not asked")) == Held("pods")
    assert both(Done("k"), lambda: wait) == wait
    assert isinstance(together(Done("k"), Done("s")), Done)
    combined = together(Waiting("pods", 1.0), wait)
    assert isinstance(combined, Waiting) and combined.retry_after == 1.0
    assert isinstance(together(wait, Held("opt-out")), Held)


def test_the_detail_page_lists_each_job_with_what_was_sent() -> None:
    def line(n: int, detail: dict[str, object], action: str = "slurm") -> EventRecord:
        return EventRecord(n, 1, datetime(2026, 1, 1, tzinfo=UTC), None, None, action, detail, "c")

    events = (
        line(1, {"slurm_node": "n1", "command": "scontrol update nodename=n1 state=drain"}),
        line(2, {"slurm_node": "n1", "command": "scontrol requeue 7", "answer": "ok", "job": 7}),
        line(3, {"slurm_node": "n1", "command": "scancel 9", "answer": "ok", "job": 9}),
        line(4, {"job": 8}, action="progress"),
        line(5, {"slurm_node": "n1", "note": "job 8_3 is requeueable", "job": "8_3"}),
        line(6, {"slurm_node": "n1", "command": "scontrol requeue 8_3", "job": "8_3"}),
        line(
            7, {"slurm_node": "n1", "note": "job 8_3: requeued", "job": "8_3", "fate": "requeued"}
        ),
    )
    rows = views.slurm_jobs(events)
    assert [(r.job, r.slurm_node, r.commands, r.fate) for r in rows] == [
        ("7", "n1", ["scontrol requeue 7 → ok"], None),
        ("8_3", "n1", ["job 8_3 is requeueable", "scontrol requeue 8_3 → None"], "requeued"),
        ("9", "n1", ["scancel 9 → ok"], None),
    ]


def finished(state: str, exit_code: int, **extra: object) -> SlurmJob:
    return parse_job({"job_id": 5, "job_state": state, "exit_code": exit_code, **extra})


def test_each_jobs_fate_in_words() -> None:
    assert fate_of(finished("PENDING", 0), "requeue") == "requeued (PENDING)"
    running = finished("RUNNING", 0, nodes="gpu-c")
    assert fate_of(running, "requeue") == "requeued (RUNNING, running on gpu-c)"
    assert fate_of(finished("COMPLETED", 0), "requeue") == "ended COMPLETED (exit 0)"
    assert fate_of(finished("FAILED", 3 << 8), "cancel") == "ended FAILED (exit 3)"
    assert fate_of(finished("CANCELLED", 15), "cancel") == "cancelled"
    assert fate_of(finished("CANCELLED", 15), "requeue") == "ended CANCELLED (signal 15)"
    assert fate_of(None, "hold").startswith("left running")
    assert fate_of(None, "requeue") == "gone from Slurm's list"


def test_what_was_done_so_far_is_read_back_from_the_timeline() -> None:
    so_far = JobsSoFar.read(
        [
            {"note": "…", "job": "8_3", "decision": "requeue"},
            {"command": "scancel --full --signal=USR1 8_3", "job": "8_3", "signalled": True},
            {"command": "scontrol requeue 8_3", "job": "8_3", "settled": True},
            {"note": "job 8_3: requeued", "job": "8_3", "fate": "requeued"},
            {"command": "scontrol update nodename=n1 state=drain"},
            {"command": "scontrol requeue 7", "job": 7, "signal": "TERM"},  # an older line
        ]
    )
    assert so_far.decided == {"8_3": "requeue"}
    assert so_far.signalled == so_far.settled == so_far.reported == frozenset({"8_3"})


def test_a_non_requeueable_jobs_fate_is_the_setting() -> None:
    job = parse_job({"job_id": 5, "job_state": "RUNNING", "requeue": False})
    assert decide(job, SlurmSettings()) == "requeue"
    assert decide(job, SlurmSettings(not_requeueable=NotRequeueable.HOLD)) == "hold"
    requeueable = parse_job({"job_id": 6, "job_state": "RUNNING", "requeue": True})
    assert decide(requeueable, SlurmSettings(not_requeueable=NotRequeueable.CANCEL)) == "requeue"


def test_an_opt_out_names_what_matched() -> None:
    settings = SlurmSettings(opt_out_feature="keep")
    assert opt_out_match(job(features="ib&keep"), settings) == "feature 'keep'"
    assert opt_out_match(job(comment="x remediator:opt-out"), settings) == (
        "comment 'remediator:opt-out'"
    )


def test_the_jobs_left_running_are_read_back_from_their_fates() -> None:
    so_far = JobsSoFar.read(
        [
            {
                "note": "job 7: left running (opt-out: comment 'x')",
                "job": 7,
                "fate": "left running (opt-out: comment 'x')",
            },
            {
                "note": "job 8: left running (not requeueable; slurm.not_requeueable: hold)",
                "job": "8",
                "fate": "left running (not requeueable; slurm.not_requeueable: hold)",
            },
            {"note": "job 9: requeued (PENDING)", "job": "9", "fate": "requeued (PENDING)"},
            {"note": "job 10 is requeueable: it will be requeued", "job": "10"},
        ]
    )
    assert so_far.left_running == frozenset({"7", "8"})
    assert so_far.reported == frozenset({"7", "8", "9"})


def listed(job_id: int, state: str, nodes: str) -> SlurmJob:
    return parse_job({"job_id": job_id, "job_state": state, "nodes": nodes})


def test_a_job_left_running_that_still_runs_on_the_node_is_in_the_way() -> None:
    jobs = [
        listed(7, "RUNNING", "n1"),  # left running, still there
        listed(8, "COMPLETING", "n[1-2]"),  # left running, still on the node
        listed(9, "RUNNING", "n1"),  # not left running (requeued and back, say)
        listed(10, "RUNNING", "n3"),  # left running elsewhere
        listed(11, "COMPLETED", "n1"),  # left running, ended
    ]
    left = {"7", "8", "10", "11"}
    assert still_left_running(jobs, "n1", left) == ["7", "8"]
    assert still_left_running(jobs, ["n2", "n3"], left) == ["8", "10"]
    assert still_left_running(jobs, "n1", set()) == []


class Listing:
    """Slurm's job list and nothing else (a step that sends anything fails the test)."""

    def __init__(self, jobs: list[SlurmJob] | None) -> None:
        self._jobs = jobs

    def jobs(self) -> list[SlurmJob]:
        if self._jobs is None:
            pytest.fail("Slurm asked although no job was left running")
        return self._jobs


def test_nothing_takes_the_node_down_under_a_job_left_running() -> None:
    def spare(jobs: list[SlurmJob] | None, left: set[str]) -> Waiting | None:
        client = cast(SlurmClient, Listing(jobs))
        return spare_left_running(client, "n1", left, "setting Slurm node n1 DOWN")

    assert spare(None, set()) is None  # the common case costs no squeue
    assert spare([listed(7, "COMPLETED", "n1")], {"7"}) is None
    refused = spare([listed(7, "RUNNING", "n1")], {"7"})
    assert isinstance(refused, Waiting) and refused.facts["holding"] is True
    assert refused.facts["left_running"] == ["7"] and refused.facts["slurm_node"] == "n1"
    assert refused.reason.startswith("not setting Slurm node n1 DOWN: Slurm job(s) 7 on n1")
