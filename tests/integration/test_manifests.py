"""The deployment as a platform team meets it: Kustomize base and overlays rendered by the stock
kubectl, the Helm chart rendered by the real helm, every object read back through the official
client's models and checked against the Kubernetes JSON schemas, RBAC held to the exact list,
alerts run through promtool, the dashboard held to the controller's own metrics."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes.client import ApiClient
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from remediator.controller.metrics import ControllerMetrics
from remediator.kube import rbac
from remediator.policy.loader import load_policy_dir
from remediator.settings import load_settings

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "remediator"
RUNBOOKS = ROOT / "runbooks"
KUBERNETES_VERSION = "1.32.0"  # the stock kubectl's; also the oldest release we document

Obj = dict[str, Any]

RUNBOOK_SLUGS = {
    "xid-79",
    "xid-48-94-95-row-remap",
    "xid-13-31-43",
    "nvlink",
    "infiniband",
    "thermal",
    "ecc",
    "gpu-missing",
    "node-condition",
    "held-by-opt-out",
    "drain-stuck-pdb",
    "replacement-failed",
    "breaker-tripped",
    "source-down",
    "agent-silent",
    "signals-dropped",
    "leader-missing",
    "policy-load-refused",
    "remediation-stuck",
    "no-spare-capacity",
    "diagnostics-failed",
    "reboot-loop",
    "slurm-node",
    "planned-maintenance",
    "replacement-failed-validation",
    "nvswitch-sxid",
    "rma",
}

CONTROLLER_METRICS = {
    "remediator_remediations",
    "remediator_remediations_finished_total",
    "remediator_remediations_started_total",
    "remediator_step_duration_seconds_bucket",
    "remediator_step_duration_seconds_sum",
    "remediator_step_duration_seconds_count",
    "remediator_oldest_open_remediation_seconds",
    "remediator_breaker_tripped",
    "remediator_remediations_queued",
    "remediator_paused",
    "remediator_source_up",
    "remediator_is_leader",
    "remediator_policy_load_errors_total",
    "remediator_policy_set_info",
    "remediator_illegal_transitions_total",
    "remediator_agent_up",
    "remediator_agent_heartbeat_age_seconds",
    "remediator_agents_silent",
    "remediator_signals_dropped_total",
}

# (apiGroup, resource, verb): the whole cluster-wide grant, and nothing else: the controller's own
# list of what its code uses (remediator/kube/rbac.py).
CLUSTER_GRANTS = rbac.grants(rbac.CLUSTER)
LEASE_VERBS = {p.verb for p in rbac.LEADER}


# --- rendering ----------------------------------------------------------------------------------


def _run(args: list[str]) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stderr}"
    return done.stdout


def _objects(text: str) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def kustomize(target: str | Path) -> list[Obj]:
    """`target` is under deploy/, unless absolute."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl not found: run scripts/setup.sh --system"
    return _objects(_run([kubectl, "kustomize", str(DEPLOY / target)]))


def helm_binary() -> str:
    beside_python = Path(sys.executable).parent / "helm"
    found = str(beside_python) if beside_python.exists() else shutil.which("helm")
    assert found, "helm not found: run scripts/install-helm.sh (scripts/setup.sh --system does)"
    return found


def helm_template(*extra: str) -> list[Obj]:
    args = [helm_binary(), "template", "remediator", str(CHART), "--namespace", "remediator"]
    return _objects(_run([*args, *extra]))


RENDERERS: dict[str, Callable[[], list[Obj]]] = {
    "kustomize-base": lambda: kustomize("base"),
    "kustomize-dev": lambda: kustomize("overlays/dev"),
    "kustomize-prod": lambda: kustomize("overlays/prod"),
    "helm-prod": lambda: helm_template(),
    "helm-prod-namespace": lambda: helm_template("--set", "namespace.create=true"),
    "helm-dev": lambda: helm_template("--values", str(CHART / "values-dev.yaml")),
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Obj]]:
    return {name: render() for name, render in RENDERERS.items()}


def only(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def by_kind(objects: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objects if o["kind"] == kind]


def is_agent(obj: Obj) -> bool:
    return (obj["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "agent"


def is_repair(obj: Obj) -> bool:
    return (obj["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "repair"


def controller_part(objects: list[Obj]) -> list[Obj]:
    """Everything but the node agent's objects (its own account, role and DaemonSet) and the
    repair Jobs' account."""
    return [o for o in objects if not is_agent(o) and not is_repair(o)]


def containers(deployment: Obj) -> list[Obj]:
    spec = deployment["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def controller(deployment: Obj) -> Obj:
    (found,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "controller"
    ]
    return found


# --- every object is valid Kubernetes -------------------------------------------------------------


@pytest.mark.parametrize("render", sorted(RENDERERS))
def test_objects_read_back_through_the_official_models(
    rendered: dict[str, list[Obj]], render: str
) -> None:
    """The client's models drop fields they do not know, so a lossless round trip proves that every
    field is spelled right and sits where Kubernetes expects it."""
    api = ApiClient()
    builtin = [o for o in rendered[render] if o["apiVersion"] != "monitoring.coreos.com/v1"]
    assert builtin
    for obj in builtin:
        model = api.deserialize(json.dumps(obj), "V1" + obj["kind"], "application/json")
        assert type(model).__name__ == "V1" + obj["kind"]
        assert api.sanitize_for_serialization(model) == obj, obj["metadata"]["name"]


@pytest.mark.parametrize("render", sorted(RENDERERS))
def test_objects_match_the_kubernetes_schemas(rendered: dict[str, list[Obj]], render: str) -> None:
    for obj in rendered[render]:
        if obj["apiVersion"] == "monitoring.coreos.com/v1":
            continue  # a CRD: checked by promtool and the ServiceMonitor test below
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_schema_check_rejects_a_misplaced_field(rendered: dict[str, list[Obj]]) -> None:
    deployment = json.loads(json.dumps(only(rendered["kustomize-prod"], "Deployment")))
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def test_service_monitor_scrapes_every_replica(rendered: dict[str, list[Obj]]) -> None:
    for render in ("kustomize-prod", "helm-prod"):
        objects = rendered[render]
        monitor = only(objects, "ServiceMonitor")
        service = only(objects, "Service")
        assert monitor["spec"]["selector"]["matchLabels"].items() <= (
            service["metadata"]["labels"].items()
        )
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["path"] == "/metrics"
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}


# --- RBAC ---------------------------------------------------------------------------------------


def grants(role: Obj) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


@pytest.mark.parametrize("render", sorted(RENDERERS))
def test_cluster_role_is_exactly_the_least_privilege_list(
    rendered: dict[str, list[Obj]], render: str
) -> None:
    objects = controller_part(rendered[render])
    (cluster_role,) = by_kind(objects, "ClusterRole")
    assert grants(cluster_role) == CLUSTER_GRANTS
    for rule in cluster_role["rules"]:
        if rule["resources"] == ["namespaces"]:
            assert rule["resourceNames"] == ["kube-system"], "one namespace is read, no other"
            rule = {k: v for k, v in rule.items() if k != "resourceNames"}
        assert set(rule) == {"apiGroups", "resources", "verbs"}, "no resourceNames, no URLs"
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
    (binding,) = by_kind(objects, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": cluster_role["metadata"]["name"],
    }
    account = only(objects, "ServiceAccount")
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": account["metadata"]["namespace"],
        }
    ]


@pytest.mark.parametrize("render", sorted(RENDERERS))
def test_repair_jobs_get_their_own_account_with_no_grants_and_no_token(
    rendered: dict[str, list[Obj]], render: str
) -> None:
    """The privileged repair Jobs run under `remediator-repair` in the controller's namespace,
    the account the config names; nothing binds it to any role."""
    objects = rendered[render]
    account = only(objects, "ServiceAccount", "remediator-repair")
    assert is_repair(account) and account["automountServiceAccountToken"] is False
    config = yaml.safe_load(only(objects, "ConfigMap", "remediator-config")["data"]["config.yaml"])
    assert config["repair"]["service_account"] == "remediator-repair"
    assert config["repair"]["namespace"] == (account["metadata"].get("namespace") or "remediator")
    bindings = by_kind(objects, "ClusterRoleBinding") + by_kind(objects, "RoleBinding")
    bound = {s["name"] for b in bindings for s in b["subjects"]}
    assert "remediator-repair" not in bound
    for namespace in by_kind(objects, "Namespace"):  # rendered by kustomize, and helm on request
        labels = namespace["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
        assert labels["pod-security.kubernetes.io/warn"] == "restricted"


def test_helm_repair_account_follows_the_release() -> None:
    objects = helm_template("--namespace", "gpu-ops", "--set", "fullnameOverride=gpu-remediator")
    account = only(objects, "ServiceAccount", "gpu-remediator-repair")
    assert account["metadata"]["namespace"] == "gpu-ops"
    config_map = only(objects, "ConfigMap", "gpu-remediator-config")
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    assert config["repair"] == {"namespace": "gpu-ops", "service_account": "gpu-remediator-repair"}
    with_image = helm_template("--set", "config.repair.image=registry.example.org/dcgm:4")
    config = yaml.safe_load(
        only(with_image, "ConfigMap", "remediator-config")["data"]["config.yaml"]
    )
    assert config["repair"]["image"] == "registry.example.org/dcgm:4"
    assert config["repair"]["service_account"] == "remediator-repair"


@pytest.mark.parametrize("render", sorted(RENDERERS))
def test_leases_only_in_own_namespace(rendered: dict[str, list[Obj]], render: str) -> None:
    objects = controller_part(rendered[render])
    account = only(objects, "ServiceAccount")
    namespace = account["metadata"]["namespace"]
    (role,) = by_kind(objects, "Role")
    assert role["metadata"]["namespace"] == namespace
    assert {g for g, _, _ in grants(role)} == {"coordination.k8s.io"}
    assert {r for _, r, _ in grants(role)} == {"leases"}
    assert {v for _, _, v in grants(role)} == LEASE_VERBS
    config = yaml.safe_load(only(objects, "ConfigMap", "remediator-config")["data"]["config.yaml"])
    named = [rule for rule in role["rules"] if "resourceNames" in rule]
    assert named and all(
        rule["resourceNames"] == [config["leader_election"]["lease_name"]] for rule in named
    )
    assert {v for rule in named for v in rule["verbs"]} == {p.verb for p in rbac.LEADER if p.name}
    (binding,) = by_kind(objects, "RoleBinding")
    assert binding["metadata"]["namespace"] == namespace
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": namespace}
    ]


# --- the Deployment -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("render", "replicas"),
    [
        ("kustomize-base", 2),
        ("kustomize-dev", 1),
        ("kustomize-prod", 2),
        ("helm-prod", 2),
        ("helm-dev", 1),
    ],
)
def test_deployment_is_hardened_and_probed(
    rendered: dict[str, list[Obj]], render: str, replicas: int
) -> None:
    objects = controller_part(rendered[render])
    deployment = only(objects, "Deployment")
    assert deployment["spec"]["replicas"] == replicas
    pod = deployment["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True
    assert pod["serviceAccountName"] == only(objects, "ServiceAccount")["metadata"]["name"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for container in containers(deployment):
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True, container["name"]
        assert context["allowPrivilegeEscalation"] is False, container["name"]
        assert context["capabilities"] == {"drop": ["ALL"]}, container["name"]
        assert context.get("runAsUser", pod["securityContext"]["runAsUser"]) != 0
        assert "memory" in container["resources"]["limits"], container["name"]
        tmp = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
        assert len(tmp) == 1 and "emptyDir" in volumes[tmp[0]["name"]], container["name"]
    main = controller(deployment)
    assert main["args"] == ["run", "--config", "/etc/remediator/config.yaml"]
    assert main["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert main["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert main["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    service = only(objects, "Service")
    assert service["spec"]["ports"][0]["port"] == 8080
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert service["spec"]["selector"].items() <= pod_labels(deployment).items()


def pod_labels(deployment: Obj) -> dict[str, str]:
    labels: dict[str, str] = deployment["spec"]["template"]["metadata"]["labels"]
    return labels


@pytest.mark.parametrize("render", ["kustomize-base", "kustomize-prod", "helm-prod"])
def test_policies_arrive_through_git_sync(rendered: dict[str, list[Obj]], render: str) -> None:
    deployment = only(rendered[render], "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    sync = pod["initContainers"][0]
    assert sync["name"] == "git-sync", "first: its first sync lands before anything else starts"
    assert sync["restartPolicy"] == "Always", "a native sidecar that keeps pulling"
    env = {e["name"]: e["value"] for e in sync["env"]}
    root, link = env["GITSYNC_ROOT"], env["GITSYNC_LINK"]
    assert sync["startupProbe"]["httpGet"]["port"] == int(env["GITSYNC_HTTP_BIND"].split(":")[1])
    controller_env = {e["name"]: e.get("value") for e in controller(deployment)["env"]}
    assert controller_env["REMEDIATOR_POLICIES_DIR"].startswith(f"{root}/{link}/")
    sync_mount = {m["mountPath"]: m["name"] for m in sync["volumeMounts"]}[root]
    reader = {m["mountPath"]: m for m in controller(deployment)["volumeMounts"]}[root]
    assert reader["name"] == sync_mount and reader["readOnly"] is True
    assert "emptyDir" in {v["name"]: v for v in pod["volumes"]}[sync_mount]


@pytest.mark.parametrize("render", ["kustomize-dev", "helm-dev"])
def test_dev_runs_one_sqlite_pod_on_dry_run_configmap_policies(
    rendered: dict[str, list[Obj]], render: str, tmp_path: Path
) -> None:
    objects = rendered[render]
    deployment = only(objects, "Deployment")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert all(c["name"] != "git-sync" for c in containers(deployment))
    env = {e["name"]: e.get("value") for e in controller(deployment)["env"]}
    assert env["REMEDIATOR_DATABASE_URL"].startswith("sqlite:////var/lib/remediator/data/")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in controller(deployment)["volumeMounts"]}
    assert "emptyDir" in volumes[mounts["/var/lib/remediator/data"]]
    policies_volume = volumes[mounts[env["REMEDIATOR_POLICIES_DIR"]]]
    config_map = only(objects, "ConfigMap", policies_volume["configMap"]["name"])
    for name, text in config_map["data"].items():
        (tmp_path / name).write_text(text)
    policy_set = load_policy_dir(tmp_path)
    assert policy_set.policies
    assert policy_set.settings.dry_run is True
    assert all(policy.dry_run for policy in policy_set.policies)


@pytest.mark.parametrize("render", ["kustomize-prod", "helm-prod"])
def test_prod_requires_its_secret_and_survives_drains(
    rendered: dict[str, list[Obj]], render: str
) -> None:
    objects = rendered[render]
    deployment = only(objects, "Deployment")
    for container in containers(deployment):
        if container["name"] == "git-sync":
            continue
        assert container["envFrom"] == [
            {"secretRef": {"name": "remediator-secrets", "optional": False}}
        ]
    pod = deployment["spec"]["template"]["spec"]
    assert {c["topologyKey"] for c in pod["topologySpreadConstraints"]} == {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    }
    budget = only(objects, "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels(deployment).items()
    assert not by_kind(objects, "Secret"), "no secret is ever rendered from git"


@pytest.mark.parametrize("render", sorted(RENDERERS))
def test_config_and_environment_load_into_settings(
    rendered: dict[str, list[Obj]], render: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rendered config.yaml plus the Deployment's and the Secret's environment make a valid
    Settings: a misspelt key or variable would be refused here, not in the cluster."""
    objects = rendered[render]
    config_map = only(objects, "ConfigMap", "remediator-config")
    path = tmp_path / "config.yaml"
    path.write_text(config_map["data"]["config.yaml"])
    example = yaml.safe_load((DEPLOY / "base" / "secret.example.yaml").read_text())
    for key, value in example["stringData"].items():
        monkeypatch.setenv(key, value)
    env = controller(only(objects, "Deployment"))["env"]
    for var in env:
        if var["name"].startswith("REMEDIATOR_"):
            monkeypatch.setenv(var["name"], var.get("value", "from-the-downward-api"))
    settings = load_settings(path)
    values = {var["name"]: var.get("value") for var in env}
    assert str(settings.policies_dir) == values["REMEDIATOR_POLICIES_DIR"]
    assert settings.leader_election.namespace == "from-the-downward-api"
    assert settings.web.listen.endswith(":8080")
    if "REMEDIATOR_DATABASE_URL" in values:
        assert settings.database_url == values["REMEDIATOR_DATABASE_URL"]
    else:
        assert settings.database_url == example["stringData"]["REMEDIATOR_DATABASE_URL"]


def test_the_documented_cluster_overlay_renders(tmp_path: Path) -> None:
    """docs/deploy.md's example overlay, pointed at this checkout, does what it says."""
    docs = (ROOT / "docs" / "deploy.md").read_text()
    (example,) = re.findall(r"```yaml\n# my-cluster/kustomization.yaml\n(.*?)```", docs, re.S)
    overlay = yaml.safe_load(example)
    overlay["resources"] = [os.path.relpath(DEPLOY / "overlays" / "prod", tmp_path)]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    config = yaml.safe_load((DEPLOY / "base" / "config.yaml").read_text())
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({**config, "cluster_name": "prod-east"}))
    objects = kustomize(tmp_path)
    assert identities(objects) == identities(kustomize("overlays/prod"))
    deployment = only(objects, "Deployment")
    sync = deployment["spec"]["template"]["spec"]["initContainers"][0]
    assert sync["name"] == "git-sync"
    assert sync["env"][0] == {
        "name": "GITSYNC_REPO",
        "value": "https://git.example.com/platform/gpu-policies.git",
    }
    assert {c["image"] for c in containers(deployment) if c["name"] != "git-sync"} == {
        "REGISTRY/remediator:0.1.0"
    }
    config_map = only(objects, "ConfigMap", "remediator-config")
    assert yaml.safe_load(config_map["data"]["config.yaml"])["cluster_name"] == "prod-east"


# --- Kustomize and Helm agree ---------------------------------------------------------------------


UNORDERED = {"env", "volumeMounts", "volumes"}


def normalise(value: Any, key: str = "") -> Any:
    """Environment, mounts and volumes are sets in Kubernetes' eyes (patches reorder them);
    containers are not: init containers run in order."""
    if isinstance(value, dict):
        return {k: normalise(v, k) for k, v in value.items()}
    if isinstance(value, list):
        items = [normalise(v) for v in value]
        if key in UNORDERED:
            return sorted(items, key=lambda i: (i["name"], i.get("mountPath", "")))
        return items
    return value


def identities(objects: list[Obj]) -> set[tuple[str, str, str | None]]:
    return {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in objects}


@pytest.mark.parametrize(
    ("kustomized", "helmed"),
    [("kustomize-prod", "helm-prod-namespace"), ("kustomize-dev", "helm-dev")],
)
def test_kustomize_and_helm_render_the_same_objects(
    rendered: dict[str, list[Obj]], kustomized: str, helmed: str
) -> None:
    left, right = rendered[kustomized], rendered[helmed]
    assert identities(left) == identities(right)
    for kind, field in [
        ("ClusterRole", "rules"),
        ("Role", "rules"),
        ("Service", "spec"),
        ("PodDisruptionBudget", "spec"),
        ("PrometheusRule", "spec"),
        ("ServiceMonitor", "spec"),
    ]:
        for ours in by_kind(left, kind):
            theirs = only(right, kind, ours["metadata"]["name"])
            assert ours[field] == theirs[field], f"{kind} {field}"
    for ours in by_kind(left, "ConfigMap"):
        theirs = only(right, "ConfigMap", ours["metadata"]["name"])
        assert ours["data"].keys() == theirs["data"].keys()
        for key, text in ours["data"].items():
            if key.endswith(".json"):
                assert json.loads(text) == json.loads(theirs["data"][key])
            else:
                assert yaml.safe_load(text) == yaml.safe_load(theirs["data"][key]), key
    ours_d, theirs_d = only(left, "Deployment"), only(right, "Deployment")
    assert normalise(ours_d["spec"]["template"]["spec"]) == normalise(
        theirs_d["spec"]["template"]["spec"]
    )
    for field in ("replicas", "strategy", "selector"):
        assert ours_d["spec"][field] == theirs_d["spec"][field], field


def test_helm_default_omits_only_the_namespace(rendered: dict[str, list[Obj]]) -> None:
    """Helm owns the release namespace (--create-namespace); the chart renders it on request."""
    difference = identities(rendered["helm-prod-namespace"]) - identities(rendered["helm-prod"])
    assert difference == {("Namespace", "remediator", None)}


def test_helm_runbook_base_url_is_a_value() -> None:
    objects = helm_template("--set", "monitoring.runbookBaseUrl=https://wiki.example.org/rb/")
    for rule in alert_rules(only(objects, "PrometheusRule")):
        assert rule["annotations"]["runbook_url"].startswith("https://wiki.example.org/rb/")
        assert "//" not in rule["annotations"]["runbook_url"].removeprefix("https://")


def test_helm_cloud_identity_annotates_the_service_account() -> None:
    """IRSA / Workload Identity: the SDKs find the cloud role through the pod's account."""
    role = "arn:aws:iam::123456789012:role/remediator"
    account = only(
        helm_template(
            "--set-string", f"serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn={role}"
        ),
        "ServiceAccount",
        "remediator",
    )
    assert account["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": role}


CAPI_GRANTS = rbac.grants(rbac.CLUSTER_API)


def test_cluster_api_rules_only_when_asked_and_the_same_both_ways(tmp_path: Path) -> None:
    helm_role = only(helm_template("--set", "clusterApi.rbac=true"), "ClusterRole", "remediator")
    assert grants(helm_role) == CLUSTER_GRANTS | CAPI_GRANTS
    overlay = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(DEPLOY / "overlays" / "prod", tmp_path)],
        "components": [os.path.relpath(DEPLOY / "components" / "clusterapi", tmp_path)],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    role = only(kustomize(tmp_path), "ClusterRole", "remediator")
    assert grants(role) == CLUSTER_GRANTS | CAPI_GRANTS


def test_helm_private_policy_repo_credentials_reach_git_sync_only() -> None:
    deployment = only(
        helm_template("--set", "policies.git.credentialsSecret=policy-repo"), "Deployment"
    )
    by_name = {c["name"]: c for c in containers(deployment)}
    assert by_name["git-sync"]["envFrom"] == [{"secretRef": {"name": "policy-repo"}}]
    for name in ("migrate", "controller"):
        assert "policy-repo" not in json.dumps(by_name[name])


def test_helm_refuses_inconsistent_values() -> None:
    base = [helm_binary(), "template", "remediator", str(CHART)]
    for extra in (
        ["--set", "sqliteEmptyDir.enabled=true"],  # two replicas, two databases
        ["--set", "policies.source=svn"],
        ["--set", "policies.source=configMap"],  # and no files
    ):
        done = subprocess.run(
            [*base, *extra], capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode != 0, extra
        assert "Error" in done.stderr


def test_versions_agree() -> None:
    """The image tag both installers default to is the release in pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    base = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())
    assert chart["appVersion"] == project
    assert base["images"] == [{"name": "remediator", "newTag": project}]


def test_helm_lint_passes() -> None:
    _run([helm_binary(), "lint", "--strict", str(CHART)])
    _run(
        [helm_binary(), "lint", "--strict", str(CHART), "--values", str(CHART / "values-dev.yaml")]
    )


# --- alerts ---------------------------------------------------------------------------------------


def alert_rules(prometheus_rule: Obj) -> list[Obj]:
    return [rule for group in prometheus_rule["spec"]["groups"] for rule in group["rules"]]


_PROMQL_KEYWORDS = {"and", "or", "unless", "bool", "offset", "group_left", "group_right"}


def metric_names(expr: str) -> set[str]:
    """The series names an expression reads: what remains after strings, label matchers, ranges
    and grouping clauses are removed, less function names (followed by a parenthesis)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.])[A-Za-z_:][\w:]*", text):
        if text[match.end() :].lstrip().startswith("(") or match.group() in _PROMQL_KEYWORDS:
            continue
        names.add(match.group())
    return names


def test_metric_name_scanner() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (step, le) (rate(a_bucket{x="y(z)"}[5m])))'
        " / on (instance) group_left b_total > bool 3 unless c"
    )
    assert metric_names(expr) == {"a_bucket", "b_total", "c"}


@pytest.fixture(scope="module")
def prometheus_rule() -> Obj:
    return only(kustomize("overlays/prod"), "PrometheusRule")


def test_every_alert_names_an_existing_runbook(prometheus_rule: Obj) -> None:
    rules = alert_rules(prometheus_rule)
    assert rules and all("alert" in rule for rule in rules)
    for rule in rules:
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"], rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        url = annotations["runbook_url"]
        assert url.startswith("https://") and url.endswith(".md"), url
        slug = url.rsplit("/", 1)[1].removesuffix(".md")
        assert slug in RUNBOOK_SLUGS, rule["alert"]
        assert (RUNBOOKS / f"{slug}.md").is_file(), url
        assert metric_names(rule["expr"]) <= CONTROLLER_METRICS, rule["alert"]


def test_every_runbook_exists_and_is_indexed() -> None:
    present = {p.stem for p in RUNBOOKS.glob("*.md")} - {"README"}
    assert present == RUNBOOK_SLUGS
    index = (RUNBOOKS / "README.md").read_text()
    for slug in RUNBOOK_SLUGS:
        assert f"({slug}.md)" in index, slug
        text = (RUNBOOKS / f"{slug}.md").read_text()
        for section in ("## What it means", "## What remediator already did", "## Undo"):
            assert section in text, f"{slug}: {section}"
        assert "## Escalate" in text, slug
        assert "kubectl" in text, slug


def promtool(*args: str, cwd: Path) -> None:
    tool = shutil.which("promtool")
    assert tool, "promtool not found: run scripts/setup.sh --system (Debian's prometheus)"
    done = subprocess.run(
        [tool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_alert_rules_pass_promtool(prometheus_rule: Obj, tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(prometheus_rule["spec"]))
    promtool("check", "rules", "rules.yaml", cwd=tmp_path)


def _series(metric: str, values: str, **labels: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{metric}{{{inner}}}", "values": values}


def _alert(name: str, at: str, *fired: dict[str, str]) -> dict[str, Any]:
    return {"alertname": name, "eval_time": at, "exp_alerts": [{"exp_labels": f} for f in fired]}


# Each case: input series (1m apart) and what each alert must (or must not) be doing then.
ALERT_CASES: list[tuple[list[dict[str, str]], list[dict[str, Any]]]] = [
    (
        [_series("remediator_breaker_tripped", "0 0 1x10", instance="a")],
        [
            _alert("RemediatorBreakerTripped", "2m"),
            _alert("RemediatorBreakerTripped", "6m", {"severity": "critical"}),
        ],
    ),
    (
        [_series("remediator_paused", "1x40", instance="a")],
        [
            _alert("RemediatorPaused", "10m"),
            _alert("RemediatorPaused", "35m", {"severity": "warning"}),
        ],
    ),
    (
        [
            _series("remediator_is_leader", "1x10", instance="a"),
            _series("remediator_is_leader", "0x10", instance="b"),
        ],
        [_alert("RemediatorLeaderMissing", "5m"), _alert("RemediatorMultipleLeaders", "5m")],
    ),
    (
        [
            _series("remediator_is_leader", "0x10", instance="a"),
            _series("remediator_is_leader", "0x10", instance="b"),
        ],
        [_alert("RemediatorLeaderMissing", "5m", {"severity": "critical"})],
    ),
    (
        [_series("remediator_paused", "0x10", instance="a")],  # no replica reports at all
        [_alert("RemediatorLeaderMissing", "5m", {"severity": "critical"})],
    ),
    (
        [
            _series("remediator_is_leader", "1x10", instance="a"),
            _series("remediator_is_leader", "1x10", instance="b"),
        ],
        [_alert("RemediatorMultipleLeaders", "5m", {"severity": "critical"})],
    ),
    (
        [
            _series("remediator_is_leader", "1x10", instance="a"),
            _series("remediator_is_leader", "0x10", instance="b"),
            _series("remediator_source_up", "0x10", instance="a", source="prometheus"),
            _series("remediator_source_up", "1x10", instance="a", source="alertmanager"),
            # A standby replica's view does not count.
            _series("remediator_source_up", "1x10", instance="b", source="prometheus"),
            _series("remediator_source_up", "0x10", instance="b", source="alertmanager"),
        ],
        [
            _alert("RemediatorSourceDown", "3m"),
            _alert("RemediatorSourceDown", "8m", {"severity": "warning", "source": "prometheus"}),
        ],
    ),
    (
        [
            _series(
                # New drops every minute from 5m to 20m (a lasting bad source), none after.
                "remediator_signals_dropped_total",
                "0x5 50+10x15 200x25",
                instance="a",
                source="alertmanager",
                reason="unknown_node",
            ),
            _series(
                "remediator_signals_dropped_total",
                "0x45",
                instance="a",
                source="prometheus",
                reason="gpu_out_of_range",
            ),
        ],
        [
            _alert("RemediatorSignalsDropped", "10m"),
            _alert(
                "RemediatorSignalsDropped",
                "25m",
                {"severity": "info", "source": "alertmanager", "reason": "unknown_node"},
            ),
            _alert("RemediatorSignalsDropped", "44m"),  # no new drop for 15 minutes
        ],
    ),
    (
        [_series("remediator_policy_load_errors_total", "0 0 0 1x40", instance="a")],
        [
            _alert("RemediatorPolicyLoadRefused", "2m"),
            _alert("RemediatorPolicyLoadRefused", "5m", {"severity": "warning"}),
            _alert("RemediatorPolicyLoadRefused", "30m"),
        ],
    ),
    (
        [
            _series(
                "remediator_remediations_finished_total",
                "0+1x60",
                instance="a",
                outcome="failed",
                policy="xid-79",
            ),
            _series(
                "remediator_remediations_finished_total",
                "0+1x60",
                instance="a",
                outcome="succeeded",
                policy="xid-79",
            ),
        ],
        [_alert("RemediatorHighFailureRate", "30m", {"severity": "warning"})],
    ),
    (
        [
            _series(
                "remediator_remediations_finished_total",
                "0+1x60",
                instance="a",
                outcome="failed",
                policy="xid-79",
            ),
            _series(
                "remediator_remediations_finished_total",
                "0+10x60",
                instance="a",
                outcome="succeeded",
                policy="xid-79",
            ),
        ],
        [_alert("RemediatorHighFailureRate", "30m")],
    ),
    (
        # Issue 39 item 13: failed remediations are not closed (a retry or their pool may still
        # fix them), so they count while failed, once across replicas; nothing closed yet.
        [
            _series("remediator_remediations", "0 0 2x10 3x20", instance="a", state="failed"),
            _series("remediator_remediations", "0 0 2x10 3x20", instance="b", state="failed"),
        ],
        [
            _alert("RemediatorHighFailureRate", "10m"),  # two failed, not four
            _alert("RemediatorHighFailureRate", "25m", {"severity": "warning"}),
        ],
    ),
    (
        # Three failed launches that their Auto Scaling groups healed by themselves: failed for
        # three minutes, then closed as succeeded (counted once, when they closed).
        [
            _series("remediator_remediations", "0 3 3 3 0x30", instance="a", state="failed"),
            _series(
                "remediator_remediations_finished_total",
                "0 0 0 0 3x30",
                instance="a",
                outcome="succeeded",
                policy="xid-79",
            ),
        ],
        [_alert("RemediatorHighFailureRate", "8m"), _alert("RemediatorHighFailureRate", "30m")],
    ),
    (
        [
            _series("remediator_oldest_open_remediation_seconds", "0+60x60", state="draining"),
            _series("remediator_oldest_open_remediation_seconds", "0+60x60", state="replacing"),
            _series(
                "remediator_oldest_open_remediation_seconds", "0+600x60", state="held_by_opt_out"
            ),
            _series("remediator_oldest_open_remediation_seconds", "0+120x60", state="verifying"),
        ],
        [
            _alert("RemediatorDrainStuck", "20m"),
            _alert("RemediatorDrainStuck", "40m", {"severity": "warning"}),
            _alert("RemediatorReplacementStuck", "20m"),
            _alert("RemediatorReplacementStuck", "40m", {"severity": "warning"}),
            _alert("RemediatorHeldByOptOut", "20m"),
            _alert("RemediatorHeldByOptOut", "35m", {"severity": "info"}),
            # Draining and replacing have alerts of their own; only verifying counts here.
            _alert("RemediatorRemediationStuck", "20m"),
            _alert(
                "RemediatorRemediationStuck", "40m", {"severity": "warning", "state": "verifying"}
            ),
        ],
    ),
    (
        [
            # Both replicas say node-1's agent is silent; one replica lags on node-2.
            _series("remediator_agent_up", "1 1 0x20", instance="a", node="node-1"),
            _series("remediator_agent_up", "1 1 0x20", instance="b", node="node-1"),
            _series("remediator_agent_up", "0x20", instance="a", node="node-2"),
            _series("remediator_agent_up", "1x20", instance="b", node="node-2"),
        ],
        [
            _alert("RemediatorAgentSilent", "4m"),
            _alert("RemediatorAgentSilent", "8m", {"severity": "warning", "node": "node-1"}),
        ],
    ),
    (
        [_series("remediator_illegal_transitions_total", "0 0 1x20", instance="a")],
        [
            _alert("RemediatorIllegalTransition", "1m"),
            _alert("RemediatorIllegalTransition", "5m", {"severity": "warning"}),
        ],
    ),
]


def test_alerts_fire_when_they_should_and_only_then(prometheus_rule: Obj, tmp_path: Path) -> None:
    """promtool's rule unit tests, against the rules with annotations set aside (they are checked
    above); every alert has a case in which it fires."""
    spec = json.loads(json.dumps(prometheus_rule["spec"]))
    for rule in alert_rules({"spec": spec}):
        rule.pop("annotations")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec))
    tests = [
        {"interval": "1m", "input_series": series, "alert_rule_test": checks}
        for series, checks in ALERT_CASES
    ]
    (tmp_path / "tests.yaml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests})
    )
    promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    fired = {
        check["alertname"] for _, checks in ALERT_CASES for check in checks if check["exp_alerts"]
    }
    assert fired == {rule["alert"] for rule in alert_rules(prometheus_rule)}


# --- dashboard ------------------------------------------------------------------------------------


def dashboard_panels() -> Iterator[Obj]:
    dashboard = json.loads((DEPLOY / "grafana" / "remediator-dashboard.json").read_text())
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def family(metric: str) -> str:
    return re.sub(r"_(bucket|sum|count)$", "", metric) if "_seconds_" in metric else metric


def test_the_metric_contract_is_what_the_controller_exports() -> None:
    """The alerts and the dashboard are checked against CONTROLLER_METRICS; this checks that
    list against the controller itself, so a renamed metric cannot leave an alert silent."""
    registry = CollectorRegistry()
    controller = ControllerMetrics(registry)
    exported: set[str] = set()
    # The registry's families and the agents' (exposition text /metrics appends), as parsed.
    text = generate_latest(registry) + controller.agents_exposition()
    for metric in text_string_to_metric_families(text.decode()):
        if metric.type == "counter":
            exported.add(metric.name + "_total")
        elif metric.type == "histogram":
            exported |= {metric.name + suffix for suffix in ("_bucket", "_sum", "_count")}
        else:
            exported.add(metric.name)
    assert not CONTROLLER_METRICS - exported, "alerts or panels query metrics nobody exports"
    # Signals received by source and kind, dropped by source and reason (what the alert and the
    # dashboard group by).
    metrics = ControllerMetrics(CollectorRegistry())
    assert metrics.signals_received._labelnames == ("source", "kind")
    assert metrics.signals_dropped._labelnames == ("source", "reason")


def test_dashboard_queries_only_the_controller_metrics(tmp_path: Path) -> None:
    panels = list(dashboard_panels())
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    exprs = [t["expr"] for p in panels for t in p.get("targets", [])]
    assert len(exprs) >= 10
    used: set[str] = set()
    for expr in exprs:
        names = metric_names(expr)
        assert names and names <= CONTROLLER_METRICS, expr
        used |= names
    # Every family the controller exports is on the dashboard.
    assert {family(n) for n in used} == {family(n) for n in CONTROLLER_METRICS}
    # Grafana's interval variables become durations so that promtool's parser can judge them.
    records = [
        {"record": f"dashboard:panel_{i}", "expr": e.replace("$__rate_interval", "5m")}
        for i, e in enumerate(exprs)
    ]
    (tmp_path / "dashboard.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]})
    )
    promtool("check", "rules", "dashboard.yaml", cwd=tmp_path)


def test_dashboard_panels_use_the_datasource_variable_and_do_not_overlap() -> None:
    cells: set[tuple[int, int]] = set()
    for panel in dashboard_panels():
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        mine = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not mine & cells, panel["title"]
        cells |= mine


# --- the image ------------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def dockerignored() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_image_runs_the_controller_as_the_deployment_expects(
    rendered: dict[str, list[Obj]],
) -> None:
    steps = dockerfile_instructions()
    stages = [rest for word, rest in steps if word == "FROM"]
    assert stages and all(s.startswith("python:3.11-slim") for s in stages)
    final = steps[max(i for i, (word, _) in enumerate(steps) if word == "FROM") :]
    (user,) = [rest for word, rest in final if word == "USER"]
    uid = int(user.split(":")[0])
    assert uid != 0
    pod = only(rendered["kustomize-prod"], "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == uid
    (entrypoint,) = [json.loads(rest) for word, rest in final if word == "ENTRYPOINT"]
    (command,) = [json.loads(rest) for word, rest in final if word == "CMD"]
    assert entrypoint == ["remediator"]
    assert command == controller(only(rendered["kustomize-prod"], "Deployment"))["args"]
    env = " ".join(rest for word, rest in final if word == "ENV")
    assert "REMEDIATOR_MIGRATIONS_DIR=/opt/remediator/migrations" in env
    assert "REMEDIATOR_RUNBOOKS_DIR=/opt/remediator/runbooks" in env


def test_image_copies_what_exists_and_is_not_ignored() -> None:
    ignored = dockerignored()
    sources = [
        part
        for word, rest in dockerfile_instructions()
        if word == "COPY" and not rest.startswith("--from")
        for part in rest.split()[:-1]
    ]
    assert {"migrations/", "policies/", "runbooks/", "remediator/", "pyproject.toml"} <= set(
        sources
    )
    for source in sources:
        assert (ROOT / source).exists(), source
        assert source.rstrip("/") not in ignored, source
    for needed_out in (".venv", ".git", "tests"):
        assert needed_out in ignored


# --- the node agent -------------------------------------------------------------------------------

AGENT_RENDERS = ["kustomize-base", "kustomize-dev", "kustomize-prod", "helm-prod", "helm-dev"]


@pytest.mark.parametrize("render", AGENT_RENDERS)
def test_agent_daemonset_watches_every_gpu_node_read_only(
    rendered: dict[str, list[Obj]], render: str
) -> None:
    objects = rendered[render]
    daemonset = only(objects, "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    tolerated = {(t["key"], t["effect"]) for t in pod["tolerations"]}
    assert {
        ("nvidia.com/gpu", "NoSchedule"),
        ("remediator.io/quarantine", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    } <= tolerated
    (agent,) = pod["containers"]
    assert agent["args"][0] == "agent"
    assert {"cpu", "memory"} <= agent["resources"]["limits"].keys()
    assert agent["securityContext"]["readOnlyRootFilesystem"] is True
    env = {e["name"]: e for e in agent["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    service = only(controller_part(objects), "Service")
    namespace = daemonset["metadata"]["namespace"]
    assert env["REMEDIATOR_CONTROLLER_URL"]["value"] == (
        f"http://{service['metadata']['name']}.{namespace}.svc:8080"
    )
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in agent["volumeMounts"]}
    assert volumes[mounts["/dev/kmsg"]["name"]]["hostPath"] == {
        "path": "/dev/kmsg",
        "type": "CharDevice",
    }
    for path, mount in mounts.items():
        source = volumes[mount["name"]]
        if "hostPath" in source and path != "/var/lib/remediator-agent":
            assert mount.get("readOnly") is True, path
    token = volumes[mounts["/var/run/remediator-agent"]["name"]]["secret"]
    assert token["secretName"] == "remediator-agent-token"
    assert "--token-file=/var/run/remediator-agent/token" in agent["args"]
    # Its own account, allowed to read Nodes and nothing else.
    account = only(objects, "ServiceAccount", pod["serviceAccountName"])
    assert is_agent(account)
    (role,) = [o for o in by_kind(objects, "ClusterRole") if is_agent(o)]
    assert grants(role) == {("", "nodes", "get")}
    (binding,) = [o for o in by_kind(objects, "ClusterRoleBinding") if is_agent(o)]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": namespace}
    ]


@pytest.mark.parametrize("render", AGENT_RENDERS)
def test_controller_selectors_never_pick_agent_pods(
    rendered: dict[str, list[Obj]], render: str
) -> None:
    objects = rendered[render]
    agent_labels = only(objects, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    selectors = [only(objects, "Service")["spec"]["selector"]]
    selectors += [
        b["spec"]["selector"]["matchLabels"] for b in by_kind(objects, "PodDisruptionBudget")
    ]
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    selectors += [
        c["labelSelector"]["matchLabels"] for c in pod.get("topologySpreadConstraints", [])
    ]
    for selector in selectors:
        assert not selector.items() <= agent_labels.items(), selector


@pytest.mark.parametrize(
    ("kustomized", "helmed"),
    [("kustomize-prod", "helm-prod-namespace"), ("kustomize-dev", "helm-dev")],
)
def test_kustomize_and_helm_render_the_same_agent(
    rendered: dict[str, list[Obj]], kustomized: str, helmed: str
) -> None:
    ours, theirs = only(rendered[kustomized], "DaemonSet"), only(rendered[helmed], "DaemonSet")
    assert normalise(ours["spec"]) == normalise(theirs["spec"])
