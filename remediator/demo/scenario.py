"""The demo's fault scenario: what breaks, where, and what the console should show for it.

The first round is chosen so that within about two minutes the console holds a remediation in
every interesting state: one that succeeds end to end (XID 79), one held because a pod opted out
of automatic replacement, one awaiting a human's approval (node-problem-detector's GpuXidError),
one whose drain a PodDisruptionBudget blocks until it is held, an overheating GPU, one drained
and then held at its replacement because its node pool has no spare nodes left, NVLink error
bursts and an InfiniBand link down. Later rounds keep a trickle of faults that heal themselves
(the node is replaced), on training nodes nobody has touched yet: the inference pool stays
without spares from then on.

Deciding is pure (`plan_episode` from a `Fleet` snapshot); `ScenarioRunner` carries an episode
out through the simulator's inject API, its node-pool fault API and its Kubernetes API, the same
wire protocols a test or an operator would use.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from remediator.sim.fleet import INFER_POOL, TRAIN_POOL
from remediator.sim.kube.access import kube_http
from remediator.sim.kube.api.kobj import OPT_OUT_LABEL, POOL_LABEL

log = logging.getLogger(__name__)

# How long the first fault waits for a demo Slurm job to be running.
SLURM_START_SECONDS = 60.0
FIRST_ROUND = (
    "xid-79",
    "opt-out",
    "approval",
    "pdb",
    "overheat",
    "no-capacity",
    "nvlink",
    "ib-link-down",
)
LATER_ROUNDS = ("xid-79", "overheat", "nvlink", "ib-link-down", "xid-48")
GUARDED_NAMESPACE = "payments"
GPUS_PER_NODE = 8  # the simulator's default, which the demo keeps
SPARE_NODES = 100  # per pool: the demo runs for as long as one likes without the cloud running dry
POD_WAIT_SECONDS = 30.0
NVLINK_BURST_SPACING = 3.0


class ScenarioError(Exception):
    """One episode could not be carried out; the scenario goes on with the next."""


# -- the fleet, as the scenario sees it ---------------------------------------------------------


def is_ready(obj: Mapping[str, Any]) -> bool:
    """A Node's or a Pod's Ready condition is True."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


@dataclass(frozen=True)
class FleetNode:
    name: str
    pool: str
    ready: bool
    schedulable: bool

    @property
    def healthy(self) -> bool:
        return self.ready and self.schedulable


@dataclass(frozen=True)
class Fleet:
    nodes: tuple[FleetNode, ...]
    opt_out: frozenset[str] = frozenset()  # nodes running a pod that disables auto-replacement

    @classmethod
    def from_json(
        cls, nodes: Sequence[Mapping[str, Any]], opt_out_pods: Sequence[Mapping[str, Any]]
    ) -> Fleet:
        found: list[FleetNode] = []
        for node in nodes:
            meta, spec = node.get("metadata") or {}, node.get("spec") or {}
            found.append(
                FleetNode(
                    name=str(meta.get("name", "")),
                    pool=str((meta.get("labels") or {}).get(POOL_LABEL, "")),
                    ready=is_ready(node),
                    schedulable=not spec.get("unschedulable", False),
                )
            )
        hosts = frozenset(
            str(pod["spec"]["nodeName"])
            for pod in opt_out_pods
            if (pod.get("spec") or {}).get("nodeName")
        )
        return cls(tuple(sorted(found, key=lambda n: n.name)), hosts)

    def pools(self) -> list[str]:
        return sorted({n.pool for n in self.nodes})

    def pool_of(self, name: str) -> str:
        return next(n.pool for n in self.nodes if n.name == name)

    def candidates(
        self, pools: Sequence[str], used: frozenset[str], *, fallback: bool = True
    ) -> list[str]:
        """Healthy, untouched nodes without opt-out pods, from the first of `pools` that has
        any (then, with `fallback`, from any pool)."""
        free = [
            n for n in self.nodes if n.healthy and n.name not in used and n.name not in self.opt_out
        ]
        for pool in pools:
            in_pool = [n.name for n in free if n.pool == pool]
            if in_pool:
                return in_pool
        return [n.name for n in free] if fallback else []


# -- episodes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """POST /v1/faults on the inject API."""

    body: Mapping[str, Any]


@dataclass(frozen=True)
class NodePoolRule:
    """POST /v1/nodepool-faults on the inject API."""

    body: Mapping[str, Any]


@dataclass(frozen=True)
class Create:
    """POST a Kubernetes object to the API server."""

    path: str
    body: Mapping[str, Any]


@dataclass(frozen=True)
class AwaitPod:
    """Until a pod matching `selector` in `namespace` runs Ready on `node`."""

    namespace: str
    selector: str
    node: str


@dataclass(frozen=True)
class Pause:
    seconds: float


Step = Fault | NodePoolRule | Create | AwaitPod | Pause


@dataclass(frozen=True)
class Episode:
    kind: str
    node: str
    title: str
    expect: str
    steps: tuple[Step, ...] = field(default_factory=tuple)


def xid(node: str, gpu: int, code: int, persistent: bool = False) -> Fault:
    """`persistent`: broken hardware, which a GPU reset or a reboot does not clear."""
    body = {"type": "xid", "node": node, "gpu": gpu, "code": code}
    return Fault({**body, "persistent": True} if persistent else body)


def guarded_service(name: str, node: str) -> tuple[Create, Create]:
    """A one-replica service pinned to `node` whose budget allows no disruption at all: the
    eviction API answers 429 for its pod for as long as the budget stands."""
    labels = {"app": name}
    replicaset = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": GUARDED_NAMESPACE, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
                    "terminationGracePeriodSeconds": 30,
                    "containers": [
                        {
                            "name": "api",
                            "image": "registry.example.com/payments/checkout:1.42",
                            "resources": {"requests": {"cpu": "2", "memory": "4Gi"}},
                        }
                    ],
                },
            },
        },
    }
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": f"{name}-pdb", "namespace": GUARDED_NAMESPACE},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
    }
    return (
        Create(f"/apis/apps/v1/namespaces/{GUARDED_NAMESPACE}/replicasets", replicaset),
        Create(f"/apis/policy/v1/namespaces/{GUARDED_NAMESPACE}/poddisruptionbudgets", budget),
    )


def kind_for(index: int, rng: random.Random) -> str:
    """The first round in order, then a random self-healing fault."""
    if index < len(FIRST_ROUND):
        return FIRST_ROUND[index]
    return rng.choice(LATER_ROUNDS)


def plan_episode(
    kind: str,
    fleet: Fleet,
    used: frozenset[str],
    rng: random.Random,
    serial: int,
    slurm_jobs: Mapping[str, str] | None = None,
) -> Episode | None:
    """The episode of `kind` on a fitting node, or None when no node fits any more.

    `slurm_jobs` (with `demo --slurm`: node → the Slurm job running there): the XID 79 goes to a
    node running one, so that the user sees a job checkpointed, requeued and resumed."""
    if kind == "opt-out":
        hosts = sorted(fleet.opt_out - used)
        if not hosts:
            return None
        node = hosts[0]
        gpu = rng.randrange(GPUS_PER_NODE)
        return Episode(
            kind,
            node,
            f"XID 79 on {node} GPU {gpu}, which runs a pod labelled {OPT_OUT_LABEL}=true",
            "held_by_opt_out: nothing is drained until the pod finishes or a human overrides",
            (xid(node, gpu, 79),),
        )
    if kind == "pdb":
        choices = fleet.candidates((INFER_POOL, TRAIN_POOL), used)
    elif kind == "no-capacity":
        # Never the training pool: without spares there, every later fault would be held too.
        choices = fleet.candidates((INFER_POOL,), used, fallback=False)
    elif kind == "approval":
        choices = fleet.candidates((TRAIN_POOL, INFER_POOL), used)
    elif kind == "xid-79" and slurm_jobs:
        # A node with a Slurm job, the training pool's first (every pool has spares).
        with_job = [n for n in fleet.candidates((), used) if n in slurm_jobs]
        train = fleet.candidates((TRAIN_POOL,), used, fallback=False)
        choices = [n for n in with_job if n in train] or with_job or train
    else:
        # Faults that end in a replacement stay where the scenario keeps spare nodes.
        choices = fleet.candidates((TRAIN_POOL,), used, fallback=False)
    if not choices:
        return None
    node = rng.choice(choices)
    gpu = rng.randrange(GPUS_PER_NODE)
    if kind == "xid-79":
        expect = (
            "cordon, checkpoint, drain, reboot, diagnostics fail, replace, verify: "
            "succeeded (replaced)"
        )
        job = (slurm_jobs or {}).get(node)
        if job:
            expect += (
                f"\n      Slurm: {node} drained, job {job} gets SIGTERM, checkpoints, is requeued "
                f"and resumes elsewhere (squeue -j {job}; its log: log.{job})"
            )
        return Episode(
            kind,
            node,
            f"XID 79 (GPU fallen off the bus, for good) on {node} GPU {gpu}"
            + (f", which runs Slurm job {job}" if job else ""),
            expect,
            (xid(node, gpu, 79, persistent=True),),
        )
    if kind == "xid-48":
        return Episode(
            kind,
            node,
            f"XID 48 (double-bit ECC, for good) on {node} GPU {gpu}",
            "GPU reset, diagnostics fail, replaced: succeeded (replaced)",
            (xid(node, gpu, 48, persistent=True),),
        )
    if kind == "approval":
        message = (
            f"NVRM: Xid (PCI:0000:{0x18 + gpu:02x}:00): 62, pid=4242, name=python3, "
            "Internal micro-controller halt"
        )
        condition = {
            "type": "condition",
            "node": node,
            "condition": "GpuXidError",
            "status": "True",
            "reason": "XidError",
            "message": message,
        }
        return Episode(
            kind,
            node,
            f"node-problem-detector reports GpuXidError (XID 62) on {node}",
            "awaiting_approval: policy npd-gpu-xid-error wants a human to approve",
            (Fault(condition),),
        )
    if kind == "pdb":
        name = f"checkout-api-{serial}"
        replicaset, budget = guarded_service(name, node)
        return Episode(
            kind,
            node,
            f"XID 95 (uncontained memory error) on {node}, which runs {GUARDED_NAMESPACE}/{name} "
            "guarded by a PodDisruptionBudget with minAvailable 1",
            "draining, evictions refused (429) by the budget, then held at the drain timeout",
            (
                replicaset,
                budget,
                AwaitPod(GUARDED_NAMESPACE, f"app={name}", node),
                xid(node, 0, 95),
            ),
        )
    if kind == "overheat":
        heat = {"type": "temperature", "node": node, "gpu": gpu, "celsius": 92.0, "rate": 3.0}
        return Episode(
            kind,
            node,
            f"GPU {gpu} of {node} overheating toward 92 °C",
            "gpu-overheat once it stays above 78 °C for 20s, then replaced",
            (Fault(heat),),
        )
    if kind == "no-capacity":
        pool = fleet.pool_of(node)
        rule = {"type": "spare_capacity", "pool": pool, "spare": 0}
        return Episode(
            kind,
            node,
            f"node pool {pool} has no spare nodes left; XID 48 (double-bit ECC) on {node}",
            "drained, GPU reset, diagnostics fail, then held at the replace step: nothing can "
            "replace it; release it in the console once the pool has capacity again",
            (NodePoolRule(rule), xid(node, gpu, 48, persistent=True)),
        )
    if kind == "nvlink":
        # Three GPUs, not one GPU three times: a GPU's counter errors are one occurrence for the
        # fold window, while a switch fault shows as errors on several GPUs of the node at once.
        gpus = sorted(rng.sample(range(GPUS_PER_NODE), 3))
        bursts: list[Step] = []
        for i, burst_gpu in enumerate(gpus):
            if i:
                bursts.append(Pause(NVLINK_BURST_SPACING))
            count = rng.randrange(50, 500)
            bursts.append(
                Fault({"type": "nvlink_errors", "node": node, "gpu": burst_gpu, "count": count})
            )
        return Episode(
            kind,
            node,
            f"NVLink error bursts on {node} GPUs {', '.join(map(str, gpus))}",
            "nvlink-error-bursts after the third burst, then replaced",
            tuple(bursts),
        )
    if kind == "ib-link-down":
        return Episode(
            kind,
            node,
            f"InfiniBand link mlx5_0 of {node} goes down",
            "ib-link-down: replaced",
            (Fault({"type": "ib_link_down", "node": node, "device": "mlx5_0"}),),
        )
    raise ValueError(f"unknown episode kind {kind!r}")


# -- carrying it out --------------------------------------------------------------------------


def _check(response: httpx.Response, what: str) -> dict[str, Any]:
    if response.status_code >= 400:
        raise ScenarioError(f"{what}: {response.status_code} {response.text[:300]}")
    body: dict[str, Any] = response.json()
    return body


class ScenarioRunner:
    """Runs one episode every `interval` seconds until stopped, announcing each through `say`."""

    def __init__(
        self,
        kubeconfig: Path,
        inject_url: str,
        *,
        interval: float,
        seed: int | None,
        say: Callable[[str], None],
        slurm_jobs: Callable[[], Mapping[str, str]] | None = None,
    ) -> None:
        self._slurm_jobs = slurm_jobs
        # The admin's: its server, token and (with the simulator's RBAC, so TLS) CA.
        self._kubeconfig = kubeconfig
        self._inject = inject_url.rstrip("/")
        self._interval = interval
        self._rng = random.Random(seed)
        self._say = say
        self._used: set[str] = set()
        self._starved: set[str] = set()  # kinds already reported as finding no node
        self.episodes: list[Episode] = []

    def fleet(self, client: httpx.Client) -> Fleet:
        nodes = _check(client.get("/api/v1/nodes"), "list nodes")
        pods = _check(
            client.get("/api/v1/pods", params={"labelSelector": OPT_OUT_LABEL}),
            "list opt-out pods",
        )
        return Fleet.from_json(nodes.get("items") or [], pods.get("items") or [])

    def prepare(self, client: httpx.Client) -> None:
        """Give every pool spare nodes to replace from, so the cloud never runs dry mid-demo."""
        for pool in self.fleet(client).pools():
            rule = {"type": "spare_capacity", "pool": pool, "spare": SPARE_NODES}
            _check(client.post(f"{self._inject}/v1/nodepool-faults", json=rule), "spare capacity")

    def run(self, stop: threading.Event) -> None:
        with kube_http(self._kubeconfig, timeout=10.0) as client:
            try:
                self.prepare(client)
            except (httpx.HTTPError, ScenarioError) as exc:
                self._say(f"scenario: cannot set the pools' spare capacity: {exc}")
            index = 0
            while not stop.is_set():
                started = time.monotonic()
                self.step(client, index, stop)
                index += 1
                stop.wait(max(0.0, self._interval - (time.monotonic() - started)))

    def step(self, client: httpx.Client, index: int, stop: threading.Event) -> Episode | None:
        kind = kind_for(index, self._rng)
        try:
            jobs = self.running_slurm_jobs(stop) if kind == "xid-79" else None
            episode = plan_episode(
                kind, self.fleet(client), frozenset(self._used), self._rng, index + 1, jobs
            )
        except (httpx.HTTPError, ScenarioError) as exc:
            self._say(f"fault {index + 1}: cannot read the fleet: {exc}")
            return None
        if episode is None:
            if kind not in self._starved:
                self._say(f"fault {index + 1} ({kind}): no healthy node left for it, skipped")
            self._starved.add(kind)
            return None
        self._starved.clear()
        self._used.add(episode.node)
        self.episodes.append(episode)
        self._say(f"fault {index + 1}: {episode.title}\n      expect: {episode.expect}")
        try:
            for step in episode.steps:
                if stop.is_set():
                    break
                self.execute(client, step, stop)
        except (httpx.HTTPError, ScenarioError) as exc:
            self._say(f"fault {index + 1} ({kind}) could not be injected: {exc}")
        return episode

    def running_slurm_jobs(self, stop: threading.Event) -> Mapping[str, str] | None:
        """node → running Slurm job; the demo's jobs were just submitted, so wait (up to
        SLURM_START_SECONDS) for the first to start."""
        if self._slurm_jobs is None:
            return None
        deadline = time.monotonic() + SLURM_START_SECONDS
        while not (jobs := self._slurm_jobs()) and time.monotonic() < deadline:
            if stop.wait(1.0):
                break
        return jobs

    def execute(self, client: httpx.Client, step: Step, stop: threading.Event) -> None:
        if isinstance(step, Fault):
            answer = _check(client.post(f"{self._inject}/v1/faults", json=dict(step.body)), "fault")
            log.info("injected: %s", answer.get("message"))
        elif isinstance(step, NodePoolRule):
            answer = _check(
                client.post(f"{self._inject}/v1/nodepool-faults", json=dict(step.body)),
                "node-pool fault",
            )
            log.info("node pool: %s", answer.get("message"))
        elif isinstance(step, Create):
            _check(client.post(step.path, json=dict(step.body)), "create")
        elif isinstance(step, AwaitPod):
            self._await_pod(client, step, stop)
        else:
            stop.wait(step.seconds)

    def _await_pod(self, client: httpx.Client, step: AwaitPod, stop: threading.Event) -> None:
        deadline = time.monotonic() + POD_WAIT_SECONDS
        url = f"/api/v1/namespaces/{step.namespace}/pods"
        while not stop.is_set():
            pods = _check(client.get(url, params={"labelSelector": step.selector}), "list pods")
            for pod in pods.get("items") or []:
                conditions = (pod.get("status") or {}).get("conditions") or []
                ready = any(
                    c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
                )
                if (pod.get("spec") or {}).get("nodeName") == step.node and ready:
                    return
            if time.monotonic() > deadline:
                raise ScenarioError(f"no Ready pod {step.selector} on {step.node} in time")
            stop.wait(0.5)
