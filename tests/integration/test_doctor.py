"""`remediator doctor` as a platform team runs it, against the simulator with the shipped RBAC
enforced, a real Prometheus scraping its exporters and a real database: the shipped setup passes
and reads only; each way a real install goes wrong (a verb missing from the ClusterRole,
Prometheus on a dead port, DCGM's Hostname label renamed, a pool label that matches nothing)
turns its check into a failure that names the fix, and exit status 2."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from remediator.sim.launch import DEPLOY
from remediator.store.db import upgrade
from tests.fixtures.postgres import PostgresServer
from tests.fixtures.prometheus import (
    PrometheusFactory,
    PrometheusHandle,
    free_port,
    scrape_config,
)
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import ControllerProcess, wait_for, write_process_config

pytestmark = pytest.mark.integration

POLICIES = Path(__file__).resolve().parents[2] / "policies"
READS = {"get", "list", "watch"}


def write_config(path: Path, sim: SimHandle, database_url: str, **overrides: Any) -> Path:
    config: dict[str, Any] = {
        "kubeconfig": str(sim.controller_kubeconfig),
        "policies_dir": str(POLICIES),
        "database_url": database_url,
        "provider": sim.provider,
        **overrides,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def doctor(config: Path, timeout: float = 60.0) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "remediator",
            "doctor",
            "--config",
            str(config),
            "--format",
            "json",
            "--timeout",
            str(timeout),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def failures(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{f['area']}: {f['check']}": f for f in report["findings"] if f["status"] == "fail"}


def wait_scraped(prometheus: PrometheusHandle) -> None:
    for metric in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS", "node_infiniband_state_id"):
        prometheus.wait_for(f"count({metric})", timeout=90)


@pytest.fixture
def database(postgres_server: PostgresServer) -> str:
    return postgres_server.url(postgres_server.migrated_database())


def test_the_shipped_setup_passes_reading_only_and_each_break_names_its_fix(
    sim: SimHandle, prometheus_factory: PrometheusFactory, database: str, tmp_path: Path
) -> None:
    prometheus = prometheus_factory([f"{sim.metrics_url}/metrics"])
    wait_scraped(prometheus)
    log = httpx.get(f"{sim.inject_url}/v1/kube-requests", timeout=10).json()
    since = log["total"]

    config = write_config(tmp_path / "ok.yaml", sim, database, prometheus_url=prometheus.url)
    code, report = doctor(config)
    assert code == 0, json.dumps(report, indent=2)
    states = {f["status"] for f in report["findings"]}
    assert states <= {"pass", "skip"}, report
    checked = {f["area"] for f in report["findings"] if f["status"] == "pass"}
    assert {"kubernetes", "nodes", "policies", "prometheus", "provider", "database"} <= checked
    permissions = next(f for f in report["findings"] if f["check"] == "permissions")
    assert "SelfSubjectAccessReview" in permissions["found"]

    # Doctor never writes: every request it made reads, or asks (an access review stores nothing).
    made = httpx.get(
        f"{sim.inject_url}/v1/kube-requests", params={"since": since}, timeout=10
    ).json()["requests"]
    assert made
    writes = [
        r
        for r in made
        if r["verb"] not in READS
        and not (r["verb"] == "create" and r["resource"] == "selfsubjectaccessreviews")
    ]
    assert writes == []
    assert any(r["resource"] == "selfsubjectaccessreviews" for r in made)

    dead = write_config(
        tmp_path / "dead.yaml", sim, database, prometheus_url=f"http://127.0.0.1:{free_port()}"
    )
    code, report = doctor(dead)
    assert code == 2
    found = failures(report)
    assert list(found) == ["prometheus: reachable"], found
    assert "prometheus_url" in found["prometheus: reachable"]["fix"]

    nowhere = write_config(
        tmp_path / "pool.yaml",
        sim,
        database,
        prometheus_url=prometheus.url,
        pool_label="example.com/no-such-pool",
    )
    code, report = doctor(nowhere)
    assert code == 2
    found = failures(report)
    assert "nodes: pools" in found, found
    assert "example.com/no-such-pool" in found["nodes: pools"]["found"]
    assert "pool_label" in found["nodes: pools"]["fix"]


def test_a_verb_missing_from_the_cluster_role_fails_naming_it(
    sim_factory: Any, sqlite_head_template: Path, tmp_path: Path
) -> None:
    manifests = tmp_path / "rbac"
    manifests.mkdir()
    for name in ("clusterrolebinding.yaml", "role.yaml", "rolebinding.yaml"):
        shutil.copy(DEPLOY / "base" / name, manifests / name)
    role = yaml.safe_load((DEPLOY / "base" / "clusterrole.yaml").read_text())
    role["rules"] = [r for r in role["rules"] if r["resources"] != ["pods/eviction"]]
    (manifests / "clusterrole.yaml").write_text(yaml.safe_dump(role))
    sim = sim_factory(nodes=2, rbac=manifests)
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    config = write_config(tmp_path / "c.yaml", sim, f"sqlite:///{tmp_path / 'remediator.db'}")

    code, report = doctor(config)
    assert code == 2
    found = failures(report)
    assert list(found) == ["kubernetes: permissions"], found
    permissions = found["kubernetes: permissions"]
    assert "create pods/eviction" in permissions["found"]
    assert "deploy/base/clusterrole.yaml" in permissions["fix"]


def test_a_renamed_dcgm_hostname_label_fails_naming_it(
    sim: SimHandle, sqlite_head_template: Path, tmp_path: Path
) -> None:
    """A DCGM exporter whose node label is `host`: Prometheus relabels it, as a user's scrape
    config might."""
    scrape = scrape_config([f"{sim.metrics_url}/metrics"], "1s", "telemetry")
    scrape["scrape_configs"][0]["metric_relabel_configs"] = [
        {"source_labels": ["Hostname"], "target_label": "host"},
        {"regex": "Hostname", "action": "labeldrop"},
    ]
    (tmp_path / "prometheus").mkdir()
    prometheus = PrometheusHandle(tmp_path / "prometheus", scrape)
    prometheus.start()
    try:
        wait_scraped(prometheus)
        shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
        config = write_config(
            tmp_path / "c.yaml",
            sim,
            f"sqlite:///{tmp_path / 'remediator.db'}",
            prometheus_url=prometheus.url,
        )
        code, report = doctor(config)
    finally:
        prometheus.stop()
    assert code == 2
    found = failures(report)
    assert found and all(key.startswith("prometheus: ") for key in found), found
    xid = found["prometheus: xid series (DCGM_FI_DEV_XID_ERRORS)"]
    assert "Hostname" in xid["found"] and "Hostname" in xid["fix"]
    assert "prometheus: infiniband series (node_infiniband_state_id)" not in found


def test_run_warns_at_start_and_the_console_page_shows_the_checks(
    sim: SimHandle, migrated_database_url: str, tmp_path: Path
) -> None:
    config = write_process_config(tmp_path, sim, migrated_database_url)
    settings = json.loads(config.read_text())
    settings["prometheus_url"] = f"http://127.0.0.1:{free_port()}"
    config.write_text(json.dumps(settings))
    controller = ControllerProcess(tmp_path, config, "doctor").wait_ready()
    try:
        wait_for(
            lambda: "doctor: fail prometheus: reachable" in controller.log_tail(200),
            timeout=60,
            what="the start-up doctor's warning",
        )
        page = httpx.get(
            f"{controller.web_url}/doctor",
            headers={"Authorization": "Bearer operator-token"},
            timeout=60,
        )
        assert page.status_code == 200, page.text
        assert "prometheus_url" in page.text and "SelfSubjectAccessReview" in page.text
        assert controller.proc.poll() is None  # a failing check warns; the controller runs on
    finally:
        controller.stop()


@pytest.mark.parametrize(
    ("cloud", "call"),
    [
        ("aws", "DescribeAutoScalingGroups"),
        ("gce", "instanceGroupManagers.get"),
        ("clusterapi", "MachineSets readable"),
    ],
)
def test_each_cloud_is_asked_one_read_per_pool_and_alertmanager_routes_are_found(
    sim_factory: Any,
    alertmanager: Any,
    sqlite_head_template: Path,
    tmp_path: Path,
    cloud: str,
    call: str,
) -> None:
    sim = sim_factory(nodes=2, cloud=cloud)
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    config = write_config(
        tmp_path / "c.yaml",
        sim,
        f"sqlite:///{tmp_path / 'remediator.db'}",
        signals={"alertmanager_url": alertmanager.url},
    )
    code, report = doctor(config)
    assert code == 0, json.dumps(report, indent=2)
    providers = [f for f in report["findings"] if f["area"] == "provider"]
    assert providers and all(f["status"] == "pass" for f in providers)
    assert all(call in f["found"] and "not tried" in f["found"] for f in providers), providers
    (route,) = [f for f in report["findings"] if f["check"] == "route to receiver 'remediator'"]
    assert route["status"] == "pass"


def test_slurm_answers_and_every_node_maps_both_ways(
    sim_factory: Any, sqlite_head_template: Path, tmp_path: Path
) -> None:
    sim = sim_factory(nodes=2, slurm=True)
    assert sim.slurm is not None
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    database = f"sqlite:///{tmp_path / 'remediator.db'}"
    config = write_config(tmp_path / "c.yaml", sim, database, slurm=sim.slurm)
    code, report = doctor(config)
    assert code == 0, json.dumps(report, indent=2)
    slurm = {f["check"]: f for f in report["findings"] if f["area"] == "slurm"}
    assert set(slurm) == {"slurmctld answers", "Kubernetes → Slurm", "Slurm → Kubernetes"}
    assert all(f["status"] == "pass" for f in slurm.values()), slurm

    wrong = write_config(
        tmp_path / "wrong.yaml",
        sim,
        database,
        slurm={**sim.slurm, "node_label": None, "node_template": "gpu-{name}"},
    )
    code, report = doctor(wrong)
    assert code == 2
    found = failures(report)
    assert list(found) == ["slurm: Kubernetes → Slurm"], found
    assert "node_template" in found["slurm: Kubernetes → Slurm"]["fix"]


def test_a_pool_whose_gpu_model_has_no_nccl_floor_is_a_warning_naming_it(
    sim: SimHandle, tmp_path: Path
) -> None:
    """The simulator's nodes carry GPU feature discovery's product label: the doctor sees the
    inference pool's A100s, which this policy set gives no floor; the set stays valid."""
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "p.yaml").write_text(
        """\
policies:
  - name: xid-79
    description: The GPU has fallen off the bus.
    why: A GPU off the bus is dead to every job on the node.
    match: {kind: xid, codes: [79]}
    actions:
      - action: replace
      - action: validate
        busbw_floor: {"NVIDIA H100 80GB HBM3": 400}
"""
    )
    (policies / "settings.yaml").write_text(
        "startup_taint: remediator.io/unvalidated=true:NoSchedule\n"
    )
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(url)
    code, report = doctor(write_config(tmp_path / "c.yaml", sim, url, policies_dir=str(policies)))
    found = {f"{f['area']}: {f['check']}": f for f in report["findings"]}
    assert found["policies: valid"]["status"] == "pass", found["policies: valid"]
    floors = found["policies: NCCL floors"]
    assert floors["status"] == "warn" and code >= 1, floors
    assert "pool a100-infer (1 x NVIDIA-A100-SXM4-80GB): no NCCL floor in xid-79" in floors["found"]
    assert "h100-train" not in floors["found"] and "busbw_floor" in floors["fix"]
