"""RBAC in the simulator, through the official `kubernetes` client: the controller's own
ServiceAccount token is held to the shipped deploy/ roles (403 with the apiserver's Status body
otherwise), SelfSubjectAccessReview answers as the real authorizer does, and the admin kubeconfig
stays unrestricted. Stock kubectl with an issued ServiceAccount kubeconfig is held to the same
roles (the simulator serves TLS with its CA in every kubeconfig, so kubectl sends the token), and
a request without a token is system:anonymous."""

from __future__ import annotations

import json
import re
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from remediator.kube import rbac
from remediator.sim.launch import CONTROLLER_ACCOUNT, DEPLOY, KubectlError
from tests.fixtures.sim import SimHandle, start_sim

pytestmark = pytest.mark.integration

USER = "system:serviceaccount:remediator:remediator"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimHandle]:
    handle = start_sim(tmp_path_factory.mktemp("sim-rbac"), nodes=2)
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def account(cluster: SimHandle) -> client.ApiClient:
    assert CONTROLLER_ACCOUNT in cluster.service_accounts
    return config.new_client_from_config(config_file=str(cluster.controller_kubeconfig))


def review(api: client.ApiClient, **attributes: str) -> Any:
    body = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(**attributes)
        )
    )
    return client.AuthorizationV1Api(api).create_self_subject_access_review(body)


def test_granted_verbs_are_served(account: client.ApiClient) -> None:
    core = client.CoreV1Api(account)
    assert len(core.list_node().items) == 2
    assert core.list_pod_for_all_namespaces().items is not None
    assert client.BatchV1Api(account).list_namespaced_job("remediator").items == []


def test_a_verb_not_granted_is_forbidden_with_the_apiservers_status(
    account: client.ApiClient, cluster: SimHandle
) -> None:
    core = client.CoreV1Api(account)
    name = core.list_node().items[0].metadata.name
    with pytest.raises(ApiException) as refused:
        core.delete_node(name)
    assert refused.value.status == 403
    assert json.loads(refused.value.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'nodes "{name}" is forbidden: User "{USER}" cannot delete resource "nodes" '
        'in API group "" at the cluster scope',
        "reason": "Forbidden",
        "details": {"name": name, "kind": "nodes"},
        "code": 403,
    }
    with pytest.raises(ApiException) as namespaced:
        client.CoordinationV1Api(account).read_namespaced_lease("someone-else", "remediator")
    assert namespaced.value.status == 403
    assert json.loads(namespaced.value.body)["message"] == (
        f'leases.coordination.k8s.io "someone-else" is forbidden: User "{USER}" cannot get '
        'resource "leases" in API group "coordination.k8s.io" in the namespace "remediator"'
    )
    assert len(cluster.kubectl("get", "nodes", "-o", "name").split()) == 2  # admin: unrestricted


def test_self_subject_access_review_answers_for_every_shipped_verb(
    account: client.ApiClient,
) -> None:
    for permission in rbac.required("http"):
        answer = review(
            account,
            group=permission.group,
            resource=permission.resource.partition("/")[0],
            subresource=permission.resource.partition("/")[2],
            verb=permission.verb,
            namespace="remediator" if permission.scope == "own-namespace" else "",
            name=permission.name,
        )
        assert answer.status.allowed, permission.describe()
        assert answer.status.reason.startswith("RBAC: allowed by "), answer.status.reason
        assert answer.kind == "SelfSubjectAccessReview"
        assert answer.spec.resource_attributes.verb == permission.verb
    refused = review(account, group="", resource="secrets", verb="list")
    assert refused.status.allowed is False
    other_lease = review(
        account,
        group="coordination.k8s.io",
        resource="leases",
        verb="update",
        namespace="remediator",
        name="someone-else",
    )
    assert other_lease.status.allowed is False
    elsewhere = review(
        account, group="coordination.k8s.io", resource="leases", verb="create", namespace="default"
    )
    assert elsewhere.status.allowed is False


def test_rbac_from_another_directory(tmp_path: Path) -> None:
    """A ClusterRole without `patch` on nodes: the controller's cordon is refused."""
    objects = [
        doc for doc in yaml.safe_load_all((DEPLOY / "base" / "clusterrole.yaml").read_text())
    ]
    (role,) = objects
    for rule in role["rules"]:
        if rule["resources"] == ["nodes"]:
            rule["verbs"].remove("patch")
    manifests = tmp_path / "rbac"
    manifests.mkdir()
    (manifests / "clusterrole.yaml").write_text(yaml.safe_dump(role))
    binding = yaml.safe_load((DEPLOY / "base" / "clusterrolebinding.yaml").read_text())
    (manifests / "clusterrolebinding.yaml").write_text(yaml.safe_dump(binding))
    handle = start_sim(tmp_path / "sim", nodes=1, rbac=manifests)
    try:
        api = config.new_client_from_config(config_file=str(handle.controller_kubeconfig))
        core = client.CoreV1Api(api)
        (node,) = core.list_node().items
        with pytest.raises(ApiException) as refused:
            core.patch_node(node.metadata.name, {"spec": {"unschedulable": True}})
        assert refused.value.status == 403
        assert review(api, group="", resource="nodes", verb="patch").status.allowed is False
    finally:
        handle.stop()


def test_stock_kubectl_with_the_controllers_kubeconfig_is_held_to_its_roles(
    cluster: SimHandle,
) -> None:
    kubeconfig = cluster.controller_kubeconfig
    assert yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"].startswith(
        "https://"
    )
    names = cluster.kubectl("get", "nodes", "-o", "name", kubeconfig=kubeconfig).split()
    assert len(names) == 2
    node = names[0].removeprefix("node/")
    with pytest.raises(KubectlError) as refused:
        cluster.kubectl("delete", "node", node, kubeconfig=kubeconfig)
    assert (
        f'Error from server (Forbidden): nodes "{node}" is forbidden: User "{USER}" cannot '
        'delete resource "nodes" in API group "" at the cluster scope'
    ) in str(refused.value)
    assert cluster.kubectl("get", "node", node, "-o", "name").strip() == f"node/{node}"
    can_i = {
        ("patch", "nodes"): "yes",
        ("create", "pods", "--subresource=eviction", "-A"): "yes",
        ("delete", "nodes"): "no",
        ("list", "secrets", "-A"): "no",
        ("get", "/version"): "yes",
    }
    for question, expected in can_i.items():
        answer = cluster.kubectl("auth", "can-i", *question, kubeconfig=kubeconfig, check=False)
        assert answer.splitlines()[0] == expected, (question, answer)


def test_kubectl_auth_can_i_list_shows_the_accounts_rules(cluster: SimHandle) -> None:
    table = cluster.kubectl("auth", "can-i", "--list", kubeconfig=cluster.controller_kubeconfig)
    rows = [re.split(r"\s{2,}", line.strip()) for line in table.splitlines()[1:]]
    resources = {(row[0], row[2], row[3]) for row in rows if len(row) == 4}
    assert {
        ("nodes", "[]", "[get list watch patch]"),
        ("pods/eviction", "[]", "[create]"),
        ("leases.coordination.k8s.io", "[]", "[create]"),
        ("leases.coordination.k8s.io", "[remediator-leader]", "[get update]"),
        ("namespaces", "[kube-system]", "[get]"),
        ("selfsubjectaccessreviews.authorization.k8s.io", "[]", "[create]"),
    } <= resources
    assert not any(name.startswith("secrets") for name, _, _ in resources)
    assert ["[/version]", "[]", "[get]"] in rows  # what every authenticated user may read
    # In another namespace the leader-election Role does not reach.
    elsewhere = cluster.kubectl(
        "auth", "can-i", "--list", "-n", "default", kubeconfig=cluster.controller_kubeconfig
    )
    assert "leases" not in elsewhere and "nodes" in elsewhere


def test_a_request_without_a_token_is_anonymous(cluster: SimHandle) -> None:
    assert cluster.kube_ca is not None
    verify = ssl.create_default_context(cafile=cluster.kube_ca)
    with httpx.Client(base_url=cluster.kube_url, verify=verify, timeout=10) as http:
        assert http.get("/version").json()["major"] == "1"
        listed = http.get("/api/v1/nodes")
        assert listed.status_code == 403
        assert listed.json()["message"] == (
            'nodes is forbidden: User "system:anonymous" cannot list resource "nodes" in API '
            'group "" at the cluster scope'
        )
        assert http.get("/api").status_code == 403
        unknown = http.get("/api/v1/nodes", headers={"Authorization": "Bearer not-issued"})
        assert (unknown.status_code, unknown.json()["reason"]) == (401, "Unauthorized")
    with cluster.kube_http() as admin:
        assert len(admin.get("/api/v1/nodes").json()["items"]) == 2
