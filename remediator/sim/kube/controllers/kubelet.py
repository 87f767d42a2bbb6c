"""The simulated kubelets: admit bound pods (GPUs within the node's, for a pod bound by
`nodeName` that no scheduler weighed) and start them, run graceful termination (SIGTERM, exit
after the workload's own shutdown time, SIGKILL at the grace deadline), answer checkpoint requests,
and play an injected container fault as the real one reports it (a crash loop with its back-off,
restartCount and CrashLoopBackOff; a failing readiness probe).

Level-triggered like the real one: `sync(pod)` looks at the pod as stored and at what this
kubelet already did for it (its `Runtime`), and takes the next step that is due; timers only
bring the pod back into the queue. A node whose Ready condition is Unknown has no kubelet:
nothing happens on it until it comes back, so its terminating pods stay terminating."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from remediator.sim.kube.api.kobj import (
    CHECKPOINT_DONE,
    CHECKPOINT_REQUESTED,
    CHECKPOINT_SECONDS,
    SHUTDOWN_SECONDS,
    STARTUP_SECONDS,
    annotation,
    condition,
    float_annotation,
    gpu_request,
    is_ready,
    is_terminal,
    is_terminating,
    key_of,
    parse_time,
    rfc3339,
)
from remediator.sim.kube.api.store import NotFound, Obj
from remediator.sim.kube.controllers import admit, builders
from remediator.sim.kube.controllers.context import POD, ProgramRun, SimContext

DEFAULT_STARTUP_SECONDS = 0.5
DEFAULT_SHUTDOWN_SECONDS = 1.0
SANDBOX_RETRY = timedelta(seconds=10)  # the kubelet retries a failed pod sandbox on its sync loop
CRASH_RUN = timedelta(seconds=1)  # how long a crashing container runs before it exits
BACKOFF_START, BACKOFF_MAX = 10.0, 300.0  # the kubelet's crash back-off, doubling (seconds)


@dataclass
class Runtime:
    """What the kubelet has done for one pod UID."""

    start_at: datetime | None = None
    exit_at: datetime | None = None
    kill_at: datetime | None = None
    checkpoint: tuple[str, datetime] | None = None  # (request seen, when to answer)
    program: tuple[datetime, ProgramRun] | None = None  # a host program: when it exits
    crash_at: datetime | None = None  # a crashing container's next exit
    restart_at: datetime | None = None  # when the kubelet starts a crashed container again
    crashes: int = 0


class Kubelets:
    def __init__(self, ctx: SimContext) -> None:
        self._ctx = ctx
        self._runtime: dict[str, Runtime] = {}

    def forget(self, uid: str) -> None:
        self._runtime.pop(uid, None)

    def sync(self, pod: Obj, now: datetime) -> None:
        node_name = pod.get("spec", {}).get("nodeName")
        node = self._ctx.index.nodes.get(node_name) if node_name else None
        if node is None:
            return
        ready = condition(node, "Ready")
        node_status = ready.get("status") if ready else "Unknown"
        if node_status not in ("True", "False"):
            return  # the kubelet is not running there
        rt = self._runtime.setdefault(pod["metadata"]["uid"], Runtime())
        if is_terminating(pod):
            self._terminate(pod, node, rt, now)
            return
        if is_terminal(pod):
            return
        if pod.get("status", {}).get("phase") != "Running":
            if node_status == "True":
                self._start(pod, node, rt, now)
            return
        fault = self._ctx.container_fault(pod)
        if node_status == "True" and self._crash_loop(pod, rt, fault, now):
            return
        if fault == "unready" and node_status == "True":
            if is_ready(pod):
                ns, name = key_of(pod)
                self._write(ns, name, pod, lambda p: builders.unready(p, now))
            return
        if not is_ready(pod) and node_status == "True":
            ns, name = key_of(pod)
            self._write(ns, name, pod, lambda p: builders.ready_again(p, now))
        if rt.program is not None and now >= rt.program[0] and node_status == "True":
            self._exit(pod, rt.program[1], now)
            return
        self._checkpoint(pod, rt, now)

    # -- start -----------------------------------------------------------------------------

    def _start(self, pod: Obj, node: Obj, rt: Runtime, now: datetime) -> None:
        ns, name = key_of(pod)
        if rt.start_at is None:
            if self._reject(pod, node, now):
                return
            startup = float_annotation(pod, STARTUP_SECONDS, DEFAULT_STARTUP_SECONDS) or 0.0
            rt.start_at = now + timedelta(seconds=startup)
            host_ip = builders.node_ip(node)
            self._write(ns, name, pod, lambda p: builders.creating(p, host_ip, now))
            self._ctx.after(rt.start_at, POD, (ns, name))
        elif now >= rt.start_at:
            try:
                ip = self._ctx.addresses.assign(pod, node)
            except builders.PodCIDRExhausted as exc:
                self._ctx.record(
                    pod,
                    "FailedCreatePodSandBox",
                    f"Failed to create pod sandbox: {exc}",
                    type_="Warning",
                    host=node["metadata"]["name"],
                )
                self._ctx.after(now + SANDBOX_RETRY, POD, (ns, name))
                return
            self._write(ns, name, pod, lambda p: builders.running(p, ip, now))
            self._ctx.record(
                pod,
                "Started",
                f"Started container {builders.container_names(pod)}",
                host=node["metadata"]["name"],
            )
            run = self._ctx.programs(pod, node["metadata"]["name"]) if self._ctx.programs else None
            if run is not None:
                rt.program = (now + timedelta(seconds=run.seconds), run)
                self._ctx.after(rt.program[0], POD, (ns, name))

    def _reject(self, pod: Obj, node: Obj, now: datetime) -> bool:
        """Whether the pod does not fit beside the pods this kubelet already admitted there."""
        node_name = node["metadata"]["name"]
        uid = pod["metadata"]["uid"]
        admitted = [
            other
            for other in self._ctx.index.pods_on_node(node_name)
            if other["metadata"]["uid"] != uid and self._admitted(other)
        ]
        view = self._ctx.index.views.get(node_name)
        capacity = view.gpus if view is not None else 0
        refusal = admit.gpu_refusal(gpu_request(pod), admit.gpus_used(admitted), capacity)
        if refusal is None:
            return False
        reason, message = refusal
        ns, name = key_of(pod)
        self._write(ns, name, pod, lambda p: admit.rejected(p, reason, message, now))
        self._ctx.record(pod, reason, message, type_="Warning", host=node_name)
        self.forget(uid)
        return True

    def _admitted(self, pod: Obj) -> bool:
        if is_terminal(pod):
            return False
        rt = self._runtime.get(pod["metadata"]["uid"])
        return pod.get("status", {}).get("phase") == "Running" or (
            rt is not None and rt.start_at is not None
        )

    def _exit(self, pod: Obj, run: ProgramRun, now: datetime) -> None:
        """A host program returned: the pod completes with its exit code and keeps its log
        (restartPolicy Never, as remediation Jobs run); then the program's after-effect."""
        ns, name = key_of(pod)
        self._ctx.logs[(ns, name)] = run.output
        self._write(ns, name, pod, lambda p: builders.exited(p, run.exit_code, now))
        self.forget(pod["metadata"]["uid"])
        if run.then is not None:
            run.then()

    # -- crash loops -------------------------------------------------------------------------

    def _crash_loop(self, pod: Obj, rt: Runtime, fault: str | None, now: datetime) -> bool:
        """Containers that exit with an error CRASH_RUN after each start, restarted with the
        kubelet's back-off: at once the first time, then 10 s doubling to 5 min, waiting in
        CrashLoopBackOff meanwhile. Once the fault is gone the next start stays up. True while
        this pod is in the loop (nothing else to do for it)."""
        if fault != "crash":
            rt.crash_at = None
        if rt.restart_at is None and rt.crash_at is None and fault != "crash":
            return False
        ns, name = key_of(pod)
        host = pod["spec"]["nodeName"]
        if rt.restart_at is not None:
            if now >= rt.restart_at:
                rt.restart_at = None
                self._write(ns, name, pod, lambda p: builders.restarted(p, now))
                names = builders.container_names(pod)
                self._ctx.record(pod, "Started", f"Started container {names}", host=host)
                if fault == "crash":
                    rt.crash_at = now + CRASH_RUN
                    self._ctx.after(rt.crash_at, POD, (ns, name))
            return True
        if rt.crash_at is None:
            rt.crash_at = now + CRASH_RUN
            self._ctx.after(rt.crash_at, POD, (ns, name))
            return True
        if now < rt.crash_at:
            return True
        rt.crash_at = None
        rt.crashes += 1
        backoff = (
            0.0 if rt.crashes == 1 else min(BACKOFF_MAX, BACKOFF_START * 2 ** (rt.crashes - 2))
        )
        self._write(ns, name, pod, lambda p: builders.crashed(p, now, backoff))
        if backoff:
            self._ctx.record(
                pod,
                "BackOff",
                f"Back-off restarting failed container {builders.container_names(pod)} in pod "
                f"{name}_{ns}({pod['metadata'].get('uid', '')})",
                type_="Warning",
                host=host,
            )
        rt.restart_at = now + timedelta(seconds=backoff)
        self._ctx.after(rt.restart_at, POD, (ns, name))
        return True

    # -- checkpoints -------------------------------------------------------------------------

    def _checkpoint(self, pod: Obj, rt: Runtime, now: datetime) -> None:
        requested = annotation(pod, CHECKPOINT_REQUESTED)
        seconds = float_annotation(pod, CHECKPOINT_SECONDS, None)
        if requested is None or seconds is None or annotation(pod, CHECKPOINT_DONE) is not None:
            return
        ns, name = key_of(pod)
        if rt.checkpoint is None or rt.checkpoint[0] != requested:
            rt.checkpoint = (requested, now + timedelta(seconds=seconds))
            self._ctx.after(rt.checkpoint[1], POD, (ns, name))
        if now >= rt.checkpoint[1]:
            done = rfc3339(now)

            def answer(p: Obj) -> None:
                p["metadata"].setdefault("annotations", {})[CHECKPOINT_DONE] = done

            self._write(ns, name, pod, answer)

    # -- termination -------------------------------------------------------------------------

    def _terminate(self, pod: Obj, node: Obj, rt: Runtime, now: datetime) -> None:
        ns, name = key_of(pod)
        deadline = parse_time(pod["metadata"]["deletionTimestamp"])
        grace = int(pod["metadata"].get("deletionGracePeriodSeconds", 0))
        host = node["metadata"]["name"]
        if rt.kill_at is None:
            started = pod.get("status", {}).get("phase") == "Running"
            shutdown = float_annotation(pod, SHUTDOWN_SECONDS, DEFAULT_SHUTDOWN_SECONDS) or 0.0
            rt.exit_at = now + timedelta(seconds=shutdown) if started else now
            rt.kill_at = deadline
            self._ctx.record(
                pod,
                "Killing",
                f"Stopping container {builders.container_names(pod)}: sending SIGTERM at "
                f"{rfc3339(now)}, grace period {grace}s",
                host=host,
            )
            self._ctx.after(rt.exit_at, POD, (ns, name))
            self._ctx.after(rt.kill_at, POD, (ns, name))
        elif deadline < rt.kill_at:
            rt.kill_at = deadline
            self._ctx.after(deadline, POD, (ns, name))
        assert rt.exit_at is not None
        if now >= rt.exit_at and rt.exit_at <= rt.kill_at:
            self._finish(pod, killed=False, now=now)
        elif now >= rt.kill_at:
            self._ctx.record(
                pod,
                "Killing",
                f"Container {builders.container_names(pod)} did not exit within the {grace}s "
                f"grace period: sending SIGKILL at {rfc3339(now)}",
                type_="Warning",
                host=host,
            )
            self._finish(pod, killed=True, now=now)

    def _finish(self, pod: Obj, killed: bool, now: datetime) -> None:
        """Containers are gone: report the final status, then remove the pod (grace 0)."""
        ns, name = key_of(pod)
        self._write(ns, name, pod, lambda p: builders.terminated(p, killed, now))
        try:
            self._ctx.store.delete("pods", ns, name)
        except NotFound:
            return

    def _write(self, ns: str, name: str, pod: Obj, change: Callable[[Obj], Obj | None]) -> None:
        """Apply a status change to the pod this decision was made on (same UID), if it is
        still there."""
        uid = pod["metadata"]["uid"]

        def guarded(current: Obj) -> Obj | None:
            if current["metadata"].get("uid") != uid:
                return current
            return change(current)

        try:
            self._ctx.store.mutate("pods", ns, name, guarded)
        except NotFound:
            return


# -- node heartbeats -------------------------------------------------------------------------

LEASES = "coordination.k8s.io/leases"
LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40  # the kubelet's nodeLeaseDurationSeconds
# The kubelet's nodeStatusReportFrequency: with leases on, it posts an unchanged status this
# rarely, so a node watch sees a healthy fleet stand still.
STATUS_REPORT_EVERY = timedelta(minutes=5)


def renew_lease(ctx: SimContext, node: Obj, now: datetime) -> None:
    """The kubelet's heartbeat: renew its Lease in kube-node-lease, creating it the first time
    (owned by the Node, as the real kubelet does)."""
    name = node["metadata"]["name"]
    renewed = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def renew(lease: Obj) -> None:
        lease.setdefault("spec", {})["renewTime"] = renewed

    try:
        ctx.store.mutate(LEASES, LEASE_NAMESPACE, name, renew)
    except NotFound:
        ctx.store.create(
            LEASES,
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": name,
                    "namespace": LEASE_NAMESPACE,
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Node",
                            "name": name,
                            "uid": node["metadata"].get("uid", ""),
                        }
                    ],
                },
                "spec": {
                    "holderIdentity": name,
                    "leaseDurationSeconds": LEASE_SECONDS,
                    "renewTime": renewed,
                },
            },
        )


def status_report_due(node: Obj, now: datetime) -> bool:
    """An unchanged node status is posted again only STATUS_REPORT_EVERY after the last."""
    ready = condition(node, "Ready") or {}
    last = ready.get("lastHeartbeatTime")
    return not last or now - parse_time(str(last)) >= STATUS_REPORT_EVERY
