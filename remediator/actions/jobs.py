"""Host-tool Jobs: a privileged pod pinned to one node that runs one command and exits (a GPU
reset, DCGM diagnostics, a reboot). The Job is rendered from a template the operator can replace
(settings `repair.job_template`), named after the remediation, step and attempt, so creating it
again after a crash finds the same Job instead of running the tool twice.
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from remediator.errors import PermanentError
from remediator.kube.client import KubeClient

MANAGED_BY = "app.kubernetes.io/managed-by"
STEP_LABEL = "remediator.io/step"
REMEDIATION_LABEL = "remediator.io/remediation-id"
LOG_TAIL = 2000

# $name, $namespace, $node, $image, $service_account, $step, $remediation and $command (a JSON
# list, which is YAML too) are filled in; tolerating every taint lets it run on the quarantined
# node, and nodeName skips the scheduler (a cordon does not stop it).
DEFAULT_TEMPLATE = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: $name
  namespace: $namespace
  labels:
    app.kubernetes.io/managed-by: remediator
    remediator.io/step: $step
    remediator.io/remediation-id: "$remediation"
spec:
  backoffLimit: 0
  ttlSecondsAfterFinished: 86400
  template:
    metadata:
      labels:
        app.kubernetes.io/managed-by: remediator
        remediator.io/step: $step
    spec:
      nodeName: $node
      restartPolicy: Never
      serviceAccountName: $service_account
      hostPID: true
      tolerations:
        - operator: Exists
      containers:
        - name: tool
          image: $image
          command: $command
          securityContext:
            privileged: true
          env:
            - name: NVIDIA_VISIBLE_DEVICES
              value: all
            - name: NVIDIA_DRIVER_CAPABILITIES
              value: all
"""


@dataclass(frozen=True)
class JobSettings:
    namespace: str
    service_account: str
    image: str
    template: str = DEFAULT_TEMPLATE

    @classmethod
    def load(
        cls, namespace: str, service_account: str, image: str, template: Path | None
    ) -> JobSettings:
        text = template.read_text() if template is not None else DEFAULT_TEMPLATE
        return cls(namespace, service_account, image, text)


def render_job(
    settings: JobSettings, *, name: str, node: str, step: str, remediation: str, command: list[str]
) -> dict[str, Any]:
    """The Job for one tool run; a template that does not render to a Job is a PermanentError."""
    values = {
        "name": name,
        "namespace": settings.namespace,
        "node": node,
        "image": settings.image,
        "service_account": settings.service_account,
        "step": step,
        "remediation": remediation,
        "command": json.dumps(command),
    }
    try:
        job = yaml.safe_load(string.Template(settings.template).substitute(values))
    except (KeyError, ValueError, yaml.YAMLError) as exc:
        raise PermanentError(f"the repair Job template does not render: {exc}") from exc
    if not isinstance(job, dict) or job.get("kind") != "Job":
        raise PermanentError("the repair Job template must render to one batch/v1 Job")
    return job


class JobState(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True)
class JobRun:
    name: str
    state: JobState
    exit_code: int | None = None
    log: str = ""


def job_name(step: str, remediation: str, attempt: int, suffix: str = "") -> str:
    extra = f"-{suffix}" if suffix else ""
    return f"remediator-{step.replace('_', '-')}-{remediation}-{attempt}{extra}"


def run_job(client: KubeClient, settings: JobSettings, job: dict[str, Any]) -> JobRun:
    """Create the Job if it is not there yet, and say where it stands (with its log once done)."""
    name = str(job["metadata"]["name"])
    current = client.create_job(settings.namespace, job)
    conditions = (current.get("status") or {}).get("conditions") or []
    finished = {c.get("type") for c in conditions if c.get("status") == "True"}
    if not finished & {"Complete", "Failed"}:
        return JobRun(name, JobState.RUNNING)
    pods = client.list_pods(settings.namespace, f"job-name={name}")
    done = [p for p in pods if p.phase in ("Succeeded", "Failed")]
    log, code = "", None
    if done:
        code = done[-1].exit_code
        log = client.read_pod_log(settings.namespace, done[-1].name)
    state = JobState.SUCCEEDED if "Complete" in finished else JobState.FAILED
    return JobRun(name, state, code, log)


def tail(text: str, limit: int = LOG_TAIL) -> str:
    return text if len(text) <= limit else "…" + text[-limit:]
