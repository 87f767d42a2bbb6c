"""A validation Job whose pod the kubelet refused is no verdict, even when the Job already
reads Failed (backoffLimit 0) by the time the step looks: judging it would fail a machine that
never ran a check, and replace it (docs/safety.md I4)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from remediator.actions.jobs import JobRun, JobState
from remediator.kube.objects import Pod
from remediator.remediation.steps.validate import _follow

JOB = "remediator-validate-1-0-checks"


def pod(phase: str, reason: str = "", message: str = "", code: int | None = None) -> Pod:
    status: dict[str, Any] = {"phase": phase}
    if reason:
        status |= {"reason": reason, "message": message}
    if code is not None:
        status["containerStatuses"] = [{"state": {"terminated": {"exitCode": code}}}]
    return Pod.from_json(
        {"metadata": {"namespace": "remediator", "name": f"{JOB}-x"}, "status": status}
    )


@dataclass
class Kube:
    """The two reads `_follow` makes, answered from a fixed list of the Job's pods."""

    pods: list[Pod]
    logs: dict[str, str] = field(default_factory=dict)

    def list_pods(self, namespace: str, selector: str) -> list[Pod]:
        assert (namespace, selector) == ("remediator", f"job-name={JOB}")
        return self.pods

    def read_pod_log(self, namespace: str, name: str) -> str:
        return self.logs.get(name, "")


@dataclass
class Jobs:
    namespace: str = "remediator"


@dataclass
class Ctx:
    kube: Kube
    jobs: Jobs = field(default_factory=Jobs)


REFUSED = pod(
    "Failed",
    "OutOfnvidia.com/gpu",
    "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 8, used: 8, "
    "capacity: 8",
)


def test_a_job_failed_because_the_kubelet_refused_its_pod_is_held_not_judged() -> None:
    _, blocked = _follow(Ctx(Kube([REFUSED])), JobRun(JOB, JobState.FAILED))  # type: ignore[arg-type]
    assert blocked.startswith(f"{JOB}: OutOfnvidia.com/gpu: Pod was rejected")


def test_a_running_job_whose_pod_was_refused_is_held() -> None:
    _, blocked = _follow(Ctx(Kube([REFUSED])), JobRun(JOB, JobState.RUNNING))  # type: ignore[arg-type]
    assert "OutOfnvidia.com/gpu" in blocked


def test_a_job_whose_check_failed_is_a_verdict() -> None:
    ran = pod("Failed", code=1)
    run, blocked = _follow(Ctx(Kube([ran])), JobRun(JOB, JobState.FAILED, 1, "dcgm: fail"))  # type: ignore[arg-type]
    assert blocked == "" and run.state is JobState.FAILED and run.log == "dcgm: fail"
