"""KubeClient against the real simulator, cross-checked with stock kubectl."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediator.errors import ConflictError, NotFoundError, PermanentError, TransientError
from remediator.kube.client import KubeClient
from remediator.kube.objects import EvictionResult, Lease, ObjectRef, Taint
from tests.fixtures.sim import SimHandle

pytestmark = pytest.mark.integration

POOL_LABEL = "simcloud.io/nodepool"


@pytest.fixture
def kube(sim: SimHandle) -> Iterator[KubeClient]:
    with KubeClient.from_kubeconfig(sim.kubeconfig, timeout=10.0) as client:
        yield client


def node_json(sim: SimHandle, name: str) -> Any:
    return json.loads(sim.kubectl("get", "node", name, "-o", "json"))


def test_nodes_and_cordon(sim: SimHandle, kube: KubeClient) -> None:
    nodes = kube.list_nodes()
    assert len(nodes) == 4 and all(n.ready for n in nodes)
    pool = nodes[0].labels[POOL_LABEL]
    in_pool = kube.list_nodes(f"{POOL_LABEL}={pool}")
    assert {n.name for n in in_pool} == {n.name for n in nodes if n.labels[POOL_LABEL] == pool}

    name = nodes[0].name
    assert kube.cordon(name).unschedulable
    assert kube.cordon(name).unschedulable  # twice is fine
    assert node_json(sim, name)["spec"]["unschedulable"] is True
    assert not kube.uncordon(name).unschedulable
    assert "unschedulable" not in node_json(sim, name)["spec"]
    with pytest.raises(NotFoundError, match="nope"):
        kube.get_node("nope")


def test_the_versioned_node_list_is_paged_into_one_snapshot(kube: KubeClient) -> None:
    whole = sorted(n.name for n in kube.list_nodes())
    paged, version = kube.list_nodes_versioned(page_size=3)  # a page of 3, then the last one
    assert [n.name for n in paged] == whole and len(whole) == 4
    assert version.isdigit()
    assert [n.name for n in kube.list_nodes_versioned(page_size=500)[0]] == whole


def test_the_node_list_is_paged_with_or_without_a_selector(kube: KubeClient) -> None:
    """`list_nodes` pages too (10,000 nodes in one answer set the controller's RSS for good)."""
    whole = kube.list_nodes()
    assert [n.name for n in kube.list_nodes(page_size=1)] == [n.name for n in whole]
    pool = whole[0].labels[POOL_LABEL]
    in_pool = [n.name for n in whole if n.labels[POOL_LABEL] == pool]
    assert [n.name for n in kube.list_nodes(f"{POOL_LABEL}={pool}", page_size=1)] == in_pool


def test_taints_and_annotations(sim: SimHandle, kube: KubeClient) -> None:
    name = kube.list_nodes()[0].name
    before = kube.get_node(name).taints
    taint = Taint("remediator.io/test", "a", "NoSchedule")
    assert taint in kube.add_taint(name, taint).taints
    rv = kube.get_node(name).resource_version
    assert kube.add_taint(name, taint).resource_version == rv  # idempotent: no write at all
    updated = kube.add_taint(name, Taint("remediator.io/test", "b", "NoSchedule")).taints
    assert [t.value for t in updated if t.key == "remediator.io/test"] == ["b"]
    shown = sim.kubectl("get", "node", name, "-o", "jsonpath={.spec.taints[*].key}").split()
    assert "remediator.io/test" in shown
    assert kube.remove_taint(name, "remediator.io/test").taints == before

    kube.set_node_annotations(name, {"remediator.io/a": "1", "remediator.io/b": "2"})
    node = kube.set_node_annotations(name, {"remediator.io/a": None})
    assert "remediator.io/a" not in node.annotations and node.annotations["remediator.io/b"] == "2"


def test_taint_writes_keep_the_time_the_server_gave_other_taints(
    sim: SimHandle, kube: KubeClient
) -> None:
    """Taints others stamped with timeAdded (the node lifecycle controller does on its own) must
    survive our read-modify-write of spec.taints, and our own taint, once it carries one, is not
    rewritten."""
    name = kube.list_nodes()[0].name
    theirs = {
        "key": "example.com/maintenance",
        "effect": "NoExecute",
        "timeAdded": "2026-01-01T12:00:00Z",
    }
    ours = {
        **Taint("remediator.io/test", "a", "NoSchedule").to_json(),
        "timeAdded": "2026-01-01T12:00:05Z",
    }
    sim.kubectl(
        "patch",
        "node",
        name,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"taints": [theirs, ours]}}),
    )
    rv = kube.get_node(name).resource_version
    assert (
        kube.add_taint(name, Taint("remediator.io/test", "a", "NoSchedule")).resource_version == rv
    )

    kube.add_taint(name, Taint("remediator.io/other", "x", "NoSchedule"))
    kube.remove_taint(name, "remediator.io/other")
    taints = json.loads(sim.kubectl("get", "node", name, "-o", "jsonpath={.spec.taints}"))
    assert theirs in taints and ours in taints


def test_concurrent_taints_are_not_lost(kube: KubeClient) -> None:
    """Read-modify-write under resourceVersion: racing writers retry instead of overwriting."""
    name = kube.list_nodes()[0].name
    keys = [f"remediator.io/race-{i}" for i in range(8)]
    errors: list[Exception] = []

    def add(key: str) -> None:
        try:
            kube.add_taint(name, Taint(key, "x", "NoSchedule"))
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    present = {t.key for t in kube.get_node(name).taints}
    assert set(keys) <= present


def test_pods_events_and_eviction(sim: SimHandle, kube: KubeClient) -> None:
    node = next(n for n in kube.list_nodes() if kube.list_pods_on_node(n.name))
    pods = kube.list_pods_on_node(node.name)
    shown = sim.kubectl(
        "get",
        "pods",
        "-A",
        "--field-selector",
        f"spec.nodeName={node.name}",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ).split()
    assert sorted(p.name for p in pods) == sorted(shown)
    assert all(p.node_name == node.name for p in pods)
    assert any(p.daemonset_owned for p in pods)

    victim = next(p for p in pods if not p.daemonset_owned)
    with pytest.raises(ConflictError):
        kube.delete_pod(victim.namespace, victim.name, 5, uid="not-its-uid")
    outcome = kube.evict_pod(victim.namespace, victim.name, 7)
    assert outcome.result is EvictionResult.EVICTED
    (after,) = [p for p in kube.list_pods_on_node(node.name) if p.uid == victim.uid]
    assert after.terminating and after.deletion_grace_seconds == 7
    assert kube.evict_pod("default", "no-such-pod", 1).result is EvictionResult.NOT_FOUND

    kube.create_event(ObjectRef.of_node(node), "RemediatorTest", "hello from the test", "Warning")
    events = sim.kubectl(
        "get",
        "events",
        "-n",
        "default",
        "--field-selector",
        f"involvedObject.name={node.name},reason=RemediatorTest",
        "-o",
        "json",
    )
    (event,) = json.loads(events)["items"]
    assert event["message"] == "hello from the test"
    assert event["source"]["component"] == "remediator" and event["type"] == "Warning"


def test_leases(kube: KubeClient) -> None:
    with pytest.raises(NotFoundError):
        kube.get_lease("kube-system", "test-lease")
    created = kube.create_lease(Lease("kube-system", "test-lease", "a", 15, transitions=0))
    assert created.resource_version
    with pytest.raises(ConflictError):
        kube.create_lease(Lease("kube-system", "test-lease", "b", 15))
    renewed = kube.replace_lease(
        Lease(
            "kube-system",
            "test-lease",
            "a",
            15,
            transitions=1,
            resource_version=created.resource_version,
        )
    )
    assert renewed.transitions == 1 and kube.get_lease("kube-system", "test-lease").holder == "a"
    with pytest.raises(ConflictError):  # stale resourceVersion: someone else wrote first
        kube.replace_lease(
            Lease("kube-system", "test-lease", "b", 15, resource_version=created.resource_version)
        )


def write_kubeconfig(path: Path, server: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_connection_refused_is_transient(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}")
    with KubeClient.from_kubeconfig(config, timeout=2.0) as kube, pytest.raises(TransientError):
        kube.get_node("x")


def test_silent_server_times_out(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)  # accepts the TCP handshake, never answers
        config = write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{sock.getsockname()[1]}")
        with (
            KubeClient.from_kubeconfig(config, timeout=0.5) as kube,
            pytest.raises(TransientError, match=r"ReadTimeout|timed out"),
        ):
            kube.list_nodes()


def test_bad_kubeconfig_is_permanent(tmp_path: Path) -> None:
    (tmp_path / "kc").write_text("clusters: []\n")
    with pytest.raises(PermanentError, match="kubeconfig"):
        KubeClient.from_kubeconfig(tmp_path / "kc")


def test_the_kube_system_uid_names_the_cluster(sim: SimHandle, kube: KubeClient) -> None:
    uid = kube.namespace_uid("kube-system")
    shown = json.loads(sim.kubectl("get", "namespace", "kube-system", "-o", "json"))
    assert uid == shown["metadata"]["uid"] and len(uid) == 36
    assert kube.namespace_uid("kube-system") == uid  # stable for the cluster's life
    assert kube.namespace_uid("default") != uid
    with pytest.raises(NotFoundError):
        kube.namespace_uid("no-such-namespace")
