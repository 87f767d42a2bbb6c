"""The simulated kube-controller-manager: node lifecycle (taints from conditions and cordon,
NoExecute taint eviction, pod GC), ReplicaSets, Deployments (status and scale), DaemonSets,
Jobs — training gangs among them — the disruption (PDB) controller and the garbage collector.

Each `sync_*` is level-triggered over the informer cache and writes only what differs."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from remediator.sim.kube.api.disruption import pdb_status, recheck_at
from remediator.sim.kube.api.kobj import (
    GANG_GENERATION,
    GANG_LABEL,
    UNSCHEDULABLE_TAINT,
    annotation,
    condition,
    controller_ref,
    grace_seconds,
    is_active,
    is_ready,
    is_terminal,
    is_terminating,
    key_of,
    labels_of,
    owner_reference,
    parse_time,
    rfc3339,
    selector_matches,
    tolerates,
)
from remediator.sim.kube.api.store import NotFound, Obj
from remediator.sim.kube.controllers import builders
from remediator.sim.kube.controllers.context import NODE, PDB, SimContext
from remediator.sim.kube.controllers.index import Key

OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"
# Added by the DaemonSet controller to every daemon pod, so daemons survive cordons and outages.
DAEMON_TOLERATIONS = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"},
)
KINDS = {
    "apps/replicasets": ("ReplicaSet", "apps/v1"),
    "apps/daemonsets": ("DaemonSet", "apps/v1"),
    "apps/deployments": ("Deployment", "apps/v1"),
    "batch/jobs": ("Job", "batch/v1"),
}


def _set_status(ctx: SimContext, resource: str, obj: Obj, status: Obj) -> None:
    if obj.get("status") == status:
        return
    ns, name = key_of(obj)
    uid = obj["metadata"]["uid"]

    def change(current: Obj) -> Obj:
        if current["metadata"].get("uid") != uid:
            return current
        return {**current, "status": status}

    try:
        ctx.store.mutate(resource, ns, name, change)
    except NotFound:
        return


def delete_gracefully(ctx: SimContext, pod: Obj, now: datetime, grace: int | None = None) -> None:
    """What a controller's DELETE does: mark the pod terminating with its grace period (or
    remove it at once when it never reached a node)."""
    ns, name = key_of(pod)
    uid = pod["metadata"]["uid"]
    if not pod.get("spec", {}).get("nodeName") or is_terminal(pod) or grace == 0:
        try:
            ctx.store.delete("pods", ns, name)
        except NotFound:
            return
        return
    period = grace_seconds(pod) if grace is None else grace

    def change(current: Obj) -> None:
        meta = current["metadata"]
        if meta.get("uid") != uid or meta.get("deletionTimestamp"):
            return
        meta["deletionTimestamp"] = rfc3339(now + timedelta(seconds=period))
        meta["deletionGracePeriodSeconds"] = period

    try:
        ctx.store.mutate("pods", ns, name, change)
    except NotFound:
        return


def job_finished(job: Obj, pods: list[Obj]) -> tuple[str, str] | None:
    """("Complete", reason) once enough pods succeeded, ("Failed", reason) once more failed
    than the backoff limit allows; None while the Job still runs."""
    spec = job.get("spec") or {}
    completions = int(spec.get("completions") or 1)
    succeeded = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")
    failed = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Failed")
    if succeeded >= completions:
        return "Complete", "CompletionsReached"
    if failed > int(spec.get("backoffLimit", 6)):
        return "Failed", "BackoffLimitExceeded"
    return None


class Controllers:
    def __init__(self, ctx: SimContext) -> None:
        self._ctx = ctx
        self._daemon_nodes: dict[str, set[str]] = {}  # DaemonSet uid -> nodes it should run on

    # -- node lifecycle, taint eviction, pod GC ---------------------------------------------

    def sync_node(self, name: str, now: datetime) -> None:
        ctx = self._ctx
        node = ctx.index.nodes.get(name)
        if node is None:
            for pod in ctx.index.pods_on_node(name):  # pod GC: orphans go at once
                try:
                    ctx.store.delete("pods", *key_of(pod))
                except NotFound:
                    continue
            for nodes in self._daemon_nodes.values():
                nodes.discard(name)
            return
        current = list(node.get("spec", {}).get("taints") or [])
        wanted = builders.managed_taints(node, current, now)
        if wanted != current:

            def retaint(n: Obj) -> None:
                n.setdefault("spec", {})["taints"] = builders.managed_taints(
                    n, list(n["spec"].get("taints") or []), now
                )
                if not n["spec"]["taints"]:
                    del n["spec"]["taints"]

            ctx.store.mutate("nodes", "", name, retaint)
            return  # the write comes back as an event and a second pass
        ready = condition(node, "Ready")
        if ready is None or ready.get("status") not in ("True", "False"):
            self._mark_pods_not_ready(node, now)
        self._evict_for_taints(node, now)
        for ds in list(ctx.index.owners.get("apps/daemonsets", {}).values()):
            self._sync_daemon_on(ds, node, now)

    def _mark_pods_not_ready(self, node: Obj, now: datetime) -> None:
        """The node stopped posting status: its pods are no longer counted ready (by budgets,
        ReplicaSets, endpoints) until its kubelet reports them again."""
        ctx = self._ctx
        for pod in ctx.index.pods_on_node(node["metadata"]["name"]):
            if is_terminating(pod) or not is_ready(pod):
                continue
            uid = pod["metadata"]["uid"]

            def lost(current: Obj, uid: str = uid) -> None:
                if current["metadata"].get("uid") == uid:
                    builders.node_lost(current, now)

            try:
                ctx.store.mutate("pods", *key_of(pod), lost)
            except NotFound:
                continue
            ctx.record(
                pod,
                "NodeNotReady",
                "Node is not ready",
                type_="Warning",
                component="node-controller",
            )

    def _evict_for_taints(self, node: Obj, now: datetime) -> None:
        """NoExecute taints evict the pods that do not tolerate them (after tolerationSeconds);
        on an out-of-service node that is not Ready, pod GC force-deletes terminating pods."""
        ctx = self._ctx
        name = node["metadata"]["name"]
        taints = [
            t for t in node.get("spec", {}).get("taints") or [] if t.get("effect") == "NoExecute"
        ]
        if not taints:
            return
        ready = condition(node, "Ready")
        out_of_service = any(t.get("key") == OUT_OF_SERVICE_TAINT for t in taints) and not (
            ready and ready.get("status") == "True"
        )
        for pod in ctx.index.pods_on_node(name):
            if is_terminating(pod):
                if out_of_service:
                    try:
                        ctx.store.delete("pods", *key_of(pod))
                    except NotFound:
                        continue
                continue
            tolerations = pod.get("spec", {}).get("tolerations") or []
            evict_at: datetime | None = None
            for taint in taints:
                tol = tolerates(tolerations, taint)
                if tol is None:
                    evict_at = now
                    break
                seconds = tol.get("tolerationSeconds")
                if seconds is not None:
                    added = parse_time(taint["timeAdded"]) if taint.get("timeAdded") else now
                    due = added + timedelta(seconds=max(0, int(seconds)))
                    evict_at = due if evict_at is None else min(evict_at, due)
            if evict_at is None:
                continue
            if evict_at > now:
                ctx.after(evict_at, NODE, name)
                continue
            ctx.record(
                pod,
                "TaintManagerEviction",
                "Marking for deletion Pod {}/{}".format(*key_of(pod)),
                component="taint-eviction-controller",
            )
            delete_gracefully(ctx, pod, now)

    # -- owners ------------------------------------------------------------------------------

    def sync_owner(self, uid: str, now: datetime, spec_changed: bool) -> None:
        found = self._ctx.index.owner(uid)
        if found is None:
            self._collect_garbage(uid, now)
            return
        resource, obj = found
        if is_terminating(obj):
            return
        if resource == "apps/replicasets":
            self._sync_replicaset(obj, now)
        elif resource == "apps/deployments":
            self._sync_deployment(obj, now)
        elif resource == "apps/daemonsets":
            self._sync_daemonset(obj, now, full=spec_changed)
        elif resource == "batch/jobs":
            self._sync_job(obj, now)

    def _collect_garbage(self, uid: str, now: datetime) -> None:
        """Background cascading deletion: dependents of a deleted owner are deleted too."""
        ctx = self._ctx
        self._daemon_nodes.pop(uid, None)
        for pod in ctx.index.pods_of_owner(uid):
            if not is_terminating(pod):
                delete_gracefully(ctx, pod, now)
        for key in sorted(ctx.index.children.get(uid, ())):
            resource, obj_key = key
            try:
                ctx.store.delete(resource, *obj_key)
            except NotFound:
                continue

    def _parent_ref(self, obj: Obj, resource: str) -> Obj:
        kind, api_version = KINDS[resource]
        return owner_reference(obj, kind, api_version)

    def _sync_replicaset(self, rs: Obj, now: datetime) -> None:
        ctx = self._ctx
        uid = rs["metadata"]["uid"]
        ns, name = key_of(rs)
        pods = ctx.index.pods_of_owner(uid)
        active = [p for p in pods if is_active(p)]
        want = int(rs.get("spec", {}).get("replicas", 1))
        template = rs.get("spec", {}).get("template") or {}
        for i in range(want - len(active)):
            pod = builders.pod_from_template(
                template, "", ns, self._parent_ref(rs, "apps/replicasets"), now
            )
            ctx.create_named("pods", pod, f"{name}-", f"{name}/{len(pods) + i}/{rfc3339(now)}")
        if len(active) > want:
            # Least valuable first: unscheduled, then not ready, then the youngest.
            ranked = sorted(
                active,
                key=lambda p: (
                    bool(p.get("spec", {}).get("nodeName")),
                    is_ready(p),
                    p["metadata"].get("creationTimestamp", ""),
                ),
            )
            for pod in ranked[: len(active) - want]:
                delete_gracefully(ctx, pod, now)
            active = ranked[len(active) - want :]
        labels = rs.get("spec", {}).get("selector")
        ready = sum(1 for p in active if is_ready(p))
        status = {
            "replicas": len(active),
            "fullyLabeledReplicas": sum(
                1 for p in active if selector_matches(labels, labels_of(p))
            ),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "observedGeneration": int(rs["metadata"].get("generation", 1)),
        }
        _set_status(ctx, "apps/replicasets", rs, status)
        parent = controller_ref(rs)
        if parent is not None:
            ctx.queues.owners[parent["uid"]] = None

    def _sync_deployment(self, deployment: Obj, now: datetime) -> None:
        """Deployments here own their ReplicaSets: scale follows spec.replicas, status sums up."""
        ctx = self._ctx
        uid = deployment["metadata"]["uid"]
        want = int(deployment.get("spec", {}).get("replicas", 1))
        children = [
            ctx.index.owners["apps/replicasets"][key]
            for resource, key in sorted(ctx.index.children.get(uid, ()))
            if resource == "apps/replicasets"
            and key in ctx.index.owners.get("apps/replicasets", {})
        ]
        if len(children) == 1 and int(children[0].get("spec", {}).get("replicas", 1)) != want:

            def scale(rs: Obj) -> None:
                rs["spec"]["replicas"] = want

            ctx.store.mutate("apps/replicasets", *key_of(children[0]), scale)
        replicas = sum(int((c.get("status") or {}).get("replicas", 0)) for c in children)
        ready = sum(int((c.get("status") or {}).get("readyReplicas", 0)) for c in children)
        available = sum(int((c.get("status") or {}).get("availableReplicas", 0)) for c in children)
        max_unavailable = math.floor(want * 0.25)
        ok = available >= want - max_unavailable
        previous = {c["type"]: c for c in (deployment.get("status") or {}).get("conditions") or []}

        def cond(type_: str, value: bool, reason: str, message: str) -> Obj:
            old = previous.get(type_)
            status = "True" if value else "False"
            changed = old is None or old.get("status") != status
            return {
                "type": type_,
                "status": status,
                "reason": reason,
                "message": message,
                "lastUpdateTime": rfc3339(now) if changed or old is None else old["lastUpdateTime"],
                "lastTransitionTime": rfc3339(now)
                if changed or old is None
                else old["lastTransitionTime"],
            }

        status: Obj = {
            "observedGeneration": int(deployment["metadata"].get("generation", 1)),
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": ready,
            "availableReplicas": available,
            "conditions": [
                cond(
                    "Available",
                    ok,
                    "MinimumReplicasAvailable" if ok else "MinimumReplicasUnavailable",
                    "Deployment has minimum availability."
                    if ok
                    else "Deployment does not have minimum availability.",
                ),
                cond(
                    "Progressing",
                    True,
                    "NewReplicaSetAvailable",
                    f'ReplicaSet "{children[0]["metadata"]["name"]}" has successfully progressed.'
                    if children
                    else "",
                ),
            ],
        }
        if want - available > 0:
            status["unavailableReplicas"] = want - available
        _set_status(ctx, "apps/deployments", deployment, status)

    # -- DaemonSets -----------------------------------------------------------------------------

    def daemon_template(self, ds: Obj) -> Obj:
        template = dict(ds.get("spec", {}).get("template") or {})
        spec = dict(template.get("spec") or {})
        tolerations = list(spec.get("tolerations") or [])
        for tol in DAEMON_TOLERATIONS:
            if tol not in tolerations:
                tolerations.append(dict(tol))
        spec["tolerations"] = tolerations
        template["spec"] = spec
        return template

    def should_run(self, template: Obj, node: Obj) -> tuple[bool, bool]:
        """(place a new daemon pod here, keep an existing one): as NodeShouldRunDaemonPod, a
        running daemon stays as long as it tolerates the node's NoExecute taints."""
        spec = template.get("spec") or {}
        labels = node["metadata"].get("labels") or {}
        for key, value in (spec.get("nodeSelector") or {}).items():
            if labels.get(key) != value:
                return False, False
        tolerations = spec.get("tolerations") or []
        untolerated = [
            t
            for t in node.get("spec", {}).get("taints") or []
            if t.get("effect") in ("NoSchedule", "NoExecute") and tolerates(tolerations, t) is None
        ]
        if not untolerated:
            return True, True
        return False, all(t.get("effect") != "NoExecute" for t in untolerated)

    def _sync_daemon_on(self, ds: Obj, node: Obj, now: datetime) -> None:
        ctx = self._ctx
        uid = ds["metadata"]["uid"]
        ns, ds_name = key_of(ds)
        node_name = node["metadata"]["name"]
        template = self.daemon_template(ds)
        wanted, keep = self.should_run(template, node)
        eligible = self._daemon_nodes.setdefault(uid, set())
        (eligible.add if wanted else eligible.discard)(node_name)
        mine = [
            p
            for p in ctx.index.pods_on_node(node_name)
            if (controller_ref(p) or {}).get("uid") == uid and is_active(p)
        ]
        if wanted and not mine:
            pod = builders.pod_from_template(
                template,
                "",
                ns,
                self._parent_ref(ds, "apps/daemonsets"),
                now,
                labels={"pod-template-generation": str(ds["metadata"].get("generation", 1))},
            )
            pod["spec"]["nodeName"] = node_name
            ctx.create_named("pods", pod, f"{ds_name}-", f"{ds_name}/{node_name}/{rfc3339(now)}")
        surplus = mine[1:] if keep else mine
        for pod in surplus:
            delete_gracefully(ctx, pod, now)

    def _sync_daemonset(self, ds: Obj, now: datetime, full: bool) -> None:
        ctx = self._ctx
        uid = ds["metadata"]["uid"]
        if full or uid not in self._daemon_nodes:
            for node in list(ctx.index.nodes.values()):
                self._sync_daemon_on(ds, node, now)
        eligible = self._daemon_nodes.get(uid, set())
        pods = [p for p in ctx.index.pods_of_owner(uid) if is_active(p)]
        on_eligible = [p for p in pods if p.get("spec", {}).get("nodeName") in eligible]
        ready = sum(1 for p in on_eligible if is_ready(p))
        status = {
            "currentNumberScheduled": len({p["spec"]["nodeName"] for p in on_eligible}),
            "desiredNumberScheduled": len(eligible),
            "numberMisscheduled": len(pods) - len(on_eligible),
            "numberReady": ready,
            "numberAvailable": ready,
            "updatedNumberScheduled": len(on_eligible),
            "observedGeneration": int(ds["metadata"].get("generation", 1)),
        }
        if len(eligible) - ready > 0:
            status["numberUnavailable"] = len(eligible) - ready
        _set_status(ctx, "apps/daemonsets", ds, status)

    # -- Jobs and training gangs --------------------------------------------------------------

    def job_pod(self, job: Obj, index: int, generation: int, now: datetime) -> Obj:
        """An Indexed Job's pod; gang members also carry the gang's generation."""
        ns, name = key_of(job)
        template = job.get("spec", {}).get("template") or {}
        annotations = {"batch.kubernetes.io/job-completion-index": str(index)}
        if generation:
            annotations[GANG_GENERATION] = str(generation)
        pod = builders.pod_from_template(
            template,
            "",
            ns,
            self._parent_ref(job, "batch/jobs"),
            now,
            labels={
                "job-name": name,
                "batch.kubernetes.io/job-name": name,
                "batch.kubernetes.io/controller-uid": job["metadata"]["uid"],
                "batch.kubernetes.io/job-completion-index": str(index),
            },
            annotations=annotations,
        )
        pod["spec"]["hostname"] = f"{name}-{index}"
        return pod

    def _sync_job(self, job: Obj, now: datetime) -> None:
        ctx = self._ctx
        uid = job["metadata"]["uid"]
        name = job["metadata"]["name"]
        parallelism = int(job.get("spec", {}).get("parallelism", 1))
        pods = ctx.index.pods_of_owner(uid)
        template_labels = (job.get("spec", {}).get("template") or {}).get("metadata", {}).get(
            "labels"
        ) or {}
        if GANG_LABEL in template_labels:
            self._sync_gang(job, pods, parallelism, now)
        else:
            active = [p for p in pods if is_active(p)]
            # A finished Job stays finished when its pods are deleted (a drain, pod GC): its
            # counts live in its status, as the real controller's finalizer-tracked ones do.
            finished = bool((job.get("status") or {}).get("conditions")) or (
                job_finished(job, pods) is not None
            )
            for i in range(0 if finished else parallelism - len(active)):
                pod = self.job_pod(job, i, 0, now)
                ctx.create_named("pods", pod, f"{name}-", f"{name}/{len(pods) + i}/{rfc3339(now)}")
        pods = ctx.index.pods_of_owner(uid)
        active = [p for p in pods if is_active(p)]
        previous = job.get("status") or {}
        status: Obj = {
            "active": len(active),
            "ready": sum(1 for p in active if is_ready(p)),
            "startTime": previous.get("startTime", rfc3339(now)),
        }
        succeeded = max(
            int(previous.get("succeeded", 0)),
            sum(1 for p in pods if p.get("status", {}).get("phase") == "Succeeded"),
        )
        failed = max(
            int(previous.get("failed", 0)),
            sum(1 for p in pods if p.get("status", {}).get("phase") == "Failed"),
        )
        if succeeded:
            status["succeeded"] = succeeded
        if failed:
            status["failed"] = failed
        verdict = job_finished(job, pods)
        if previous.get("conditions"):
            status["conditions"] = previous["conditions"]
            if previous.get("completionTime"):
                status["completionTime"] = previous["completionTime"]
        elif verdict is not None and not active:
            kind, reason = verdict
            status["conditions"] = [
                {
                    "type": kind,
                    "status": "True",
                    "reason": reason,
                    "lastProbeTime": rfc3339(now),
                    "lastTransitionTime": rfc3339(now),
                }
            ]
            if kind == "Complete":
                status["completionTime"] = rfc3339(now)
        _set_status(ctx, "batch/jobs", job, status)

    def _sync_gang(self, job: Obj, pods: list[Obj], size: int, now: datetime) -> None:
        """All members of a gang live and die together: when one dies, is deleted or vanishes,
        every other member is deleted and the whole gang is recreated, pending, at once."""
        ctx = self._ctx
        ns, name = key_of(job)
        generation = int(annotation(job, GANG_GENERATION) or 0)
        members = [p for p in pods if annotation(p, GANG_GENERATION) == str(generation)]
        broken = [p for p in members if not is_active(p)]
        if generation and not broken and len(members) >= size:
            return
        if generation:
            if broken:
                pod = broken[0]
                why = "is terminating" if is_terminating(pod) else f"has {pod['status']['phase']}"
                where = pod.get("spec", {}).get("nodeName") or "no node"
                reason = f"member {pod['metadata']['name']} on {where} {why}"
            else:
                reason = f"{size - len(members)} of {size} members are gone"
            ctx.record(
                job,
                "GangRequeued",
                f"Requeueing all {size} members of gang {name} "
                f"(attempt {generation + 1}): {reason}",
                type_="Warning",
                component="job-controller",
            )
        generation += 1

        def bump(j: Obj) -> None:
            j["metadata"].setdefault("annotations", {})[GANG_GENERATION] = str(generation)

        ctx.store.mutate("batch/jobs", ns, name, bump)
        for pod in pods:
            if is_active(pod):
                delete_gracefully(ctx, pod, now)
        for i in range(size):
            pod = self.job_pod(job, i, generation, now)
            ctx.create_named("pods", pod, f"{name}-{i}-", f"{name}/{generation}/{i}")

    # -- PodDisruptionBudgets -----------------------------------------------------------------

    def scale_of(self, namespace: str, ref: Obj) -> int | None:
        """The replicas of a pod's controller, where it has a scale (Jobs, DaemonSets do not)."""
        found = self._ctx.index.owner(ref["uid"])
        if found is None:
            return None
        resource, obj = found
        if resource == "apps/replicasets":
            parent = controller_ref(obj)
            if parent is not None and parent.get("kind") == "Deployment":
                deployment = self._ctx.index.owner(parent["uid"])
                if deployment is not None:
                    return int(deployment[1].get("spec", {}).get("replicas", 1))
            return int(obj.get("spec", {}).get("replicas", 1))
        if resource == "apps/deployments":
            return int(obj.get("spec", {}).get("replicas", 1))
        return None

    def sync_pdb(self, key: Key, now: datetime) -> None:
        ctx = self._ctx
        pdb = ctx.index.pdbs.get(key)
        if pdb is None:
            return
        pods = ctx.index.pods_selected(key[0], pdb.get("spec", {}).get("selector"))
        status = pdb_status(pdb, pods, self.scale_of, now)
        _set_status(ctx, "policy/poddisruptionbudgets", pdb, status)
        due = recheck_at({"status": status})
        if due is not None:
            ctx.after(due, PDB, key)
