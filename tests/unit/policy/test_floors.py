"""NCCL floors: a GPU model a validation has no floor for is listed — by `remediator policy
validate` against the known (or given) models, by the doctor per pool from its nodes' product
label — and a policy that names its model and lacks the floor is refused at load with file and
line. The shipped policies cover every model the simulator and the docs name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from remediator.doctor.cluster import floor_findings
from remediator.doctor.report import Status
from remediator.errors import PolicyError
from remediator.kube.objects import Node
from remediator.model.gpus import GPU_PRODUCT_LABEL, KNOWN_MODELS, floor_for, labelled_versions
from remediator.policy.floors import floor_gaps, pool_floor_gaps
from remediator.policy.loader import PolicySet, load_policy_dir

ROOT = Path(__file__).resolve().parents[3]
REMEDIATOR = Path(sys.executable).parent / "remediator"
H100 = "NVIDIA H100 80GB HBM3"
POLICY = """\
policies:
  - name: lost
    description: fell off the bus
    why: a dead GPU
    match: {kind: xid, codes: [79]}
NODES    actions:
      - action: replace
      - action: validate
        busbw_floor: {"NVIDIA H100 80GB HBM3": 400, "NVIDIA A100-SXM4-80GB": 180}
"""


def write(tmp_path: Path, nodes: str = "") -> Path:
    (tmp_path / "p.yaml").write_text(POLICY.replace("NODES", nodes))
    (tmp_path / "settings.yaml").write_text("max_concurrent: 5\n")
    return tmp_path


def load(tmp_path: Path, nodes: str = "") -> PolicySet:
    return load_policy_dir(write(tmp_path, nodes))


def gpu_node(name: str, pool: str, product: str | None) -> Node:
    labels = {"pool": pool, **({GPU_PRODUCT_LABEL: product} if product else {})}
    return Node(name=name, uid=name, resource_version="1", labels=labels, gpus=8)


def test_a_floor_is_found_under_either_spelling_of_the_model() -> None:
    floors = {H100: 400.0, "NVIDIA-GB200": 600.0}
    assert floor_for(floors, "NVIDIA-H100-80GB-HBM3") == 400.0
    assert floor_for(floors, "NVIDIA GB200") == 600.0
    assert floor_for(floors, "NVIDIA B200") is None and floor_for(floors, None) is None


def test_gpu_feature_discovery_labels_old_and_new_give_the_versions() -> None:
    new = {
        "nvidia.com/cuda.driver-version.full": "550.127.08",
        "nvidia.com/cuda.runtime-version.full": "12.4",
        "nvidia.com/gpu.count": "8",  # left to validations
    }
    old = {
        "nvidia.com/cuda.driver.major": "535",
        "nvidia.com/cuda.driver.minor": "183",
        "nvidia.com/cuda.driver.rev": "01",
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "2",
    }
    assert labelled_versions(new) == {"driver": "550.127.08", "cuda": "12.4"}
    assert labelled_versions(old) == {"driver": "535.183.01", "cuda": "12.2"}
    assert labelled_versions({}) == {}


def test_the_known_models_a_policy_lacks_are_listed_per_step(tmp_path: Path) -> None:
    (gap,) = floor_gaps(load(tmp_path).policies, KNOWN_MODELS)
    assert (gap.policy, gap.step, gap.field) == ("lost", 1, "busbw_floor")
    assert gap.models == ("NVIDIA H200", "NVIDIA B200", "NVIDIA GB200")


def test_each_pool_whose_model_lacks_a_floor_is_named(tmp_path: Path) -> None:
    policies = load(tmp_path).policies
    pools = {
        "h100-train": [{GPU_PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3"}] * 3,
        "gb200-rack": [{GPU_PRODUCT_LABEL: "NVIDIA-GB200"}] * 2,
        "unlabelled": [{}],
    }
    (gap,) = pool_floor_gaps(policies, pools)
    assert (gap.pool, gap.model, gap.nodes, gap.policies) == (
        "gb200-rack",
        "NVIDIA-GB200",
        2,
        ("lost",),
    )
    assert gap.describe() == "pool gb200-rack (2 x NVIDIA-GB200): no NCCL floor in lost"


def test_a_policy_that_selects_other_pools_leaves_the_pool_alone(tmp_path: Path) -> None:
    policies = load(tmp_path, "    nodes: {pools: [h100-train]}\n").policies
    assert pool_floor_gaps(policies, {"gb200-rack": [{GPU_PRODUCT_LABEL: "NVIDIA-GB200"}]}) == []


def test_the_doctor_warns_naming_the_pool_and_the_policy_stays_valid(tmp_path: Path) -> None:
    policies = load(tmp_path).policies
    pools = {
        "h100-train": [gpu_node("h0", "h100-train", "NVIDIA-H100-80GB-HBM3")],
        "gb200-rack": [gpu_node(f"t{i}", "gb200-rack", "NVIDIA-GB200") for i in range(2)],
    }
    (finding,) = floor_findings(policies, pools)
    assert finding.status is Status.WARN and finding.check == "NCCL floors"
    assert "pool gb200-rack (2 x NVIDIA-GB200): no NCCL floor in lost" in finding.found
    assert "h100-train" not in finding.found and "busbw_floor" in finding.fix
    covered = {"h100-train": pools["h100-train"]}
    assert floor_findings(policies, covered)[0].status is Status.PASS
    unknown = {"p": [gpu_node("x", "p", None)]}
    assert floor_findings(policies, unknown)[0].status is Status.SKIP


def test_a_policy_naming_its_model_without_a_floor_is_refused_with_file_and_line(
    tmp_path: Path,
) -> None:
    with pytest.raises(PolicyError) as refused:
        load(tmp_path, "    nodes:\n      labels: {nvidia.com/gpu.product: NVIDIA-GB200}\n")
    (problem,) = refused.value.problems
    assert problem.startswith("p.yaml:2: policies[0]: "), problem
    assert "nvidia.com/gpu.product=NVIDIA-GB200" in problem
    assert "actions[1].busbw_floor has no floor for that model" in problem
    named = "    nodes:\n      labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}\n"
    assert load(tmp_path, named).policies[0].name == "lost"


def run_validate(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REMEDIATOR), "policy", "validate", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_policy_validate_warns_about_the_models_without_a_floor(tmp_path: Path) -> None:
    done = run_validate(write(tmp_path))
    assert done.returncode == 0, done.stderr
    (warning,) = done.stderr.splitlines()
    assert warning.startswith(
        "warning: p.yaml:2: policy lost actions[1].busbw_floor has no floor for "
        "NVIDIA H200, NVIDIA B200, NVIDIA GB200 (of the known models; "
        "this command cannot see your pools)"
    ), warning
    given = run_validate(tmp_path, "--gpu-model", "NVIDIA-A100-SXM4-80GB", "--gpu-model", H100)
    assert given.returncode == 0 and given.stderr == "", given.stderr
    gb200 = run_validate(tmp_path, "--gpu-model", "NVIDIA-GB200")
    assert "has no floor for NVIDIA-GB200 (of the given models)" in gb200.stderr


def test_the_shipped_policies_have_a_floor_for_every_known_model() -> None:
    policies = load_policy_dir(ROOT / "policies").policies
    assert floor_gaps(policies, KNOWN_MODELS) == []
