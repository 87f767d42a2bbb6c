"""The demo's banner as a new user reads it: the AWS demo's inject line is the command
docs/providers.md describes (with `--persistent`, so the node is replaced rather than rebooted),
the `--no-faults` line points at it where it really is, and the Auto Scaling group is named
(issue 22 item 15, the AWS half)."""

from __future__ import annotations

import io
import re
import shlex
from pathlib import Path

from remediator.demo.policies import DemoTimings
from remediator.demo.supervisor import Demo, DemoOptions
from remediator.sim.fleet import TRAIN_POOL

URLS = {"inject_url": "http://127.0.0.1:9999", "cloud": "aws"}


def banner(tmp_path: Path, cloud: str, faults: bool) -> list[str]:
    out = io.StringIO()
    demo = Demo(DemoOptions(cloud=cloud, faults=faults, data_dir=tmp_path), out=out)
    demo._banner(
        "http://127.0.0.1:8080",
        "token",
        {**URLS, "cloud": cloud},
        None,
        tmp_path / "policies",
        DemoTimings(),
        tmp_path / "remediator.yaml",
        [],
    )
    return out.getvalue().splitlines()


def test_the_aws_banner_carries_the_documented_inject_command(tmp_path: Path) -> None:
    lines = banner(tmp_path, "aws", faults=False)
    inject = next(i for i, line in enumerate(lines) if line.startswith("  inject"))
    command = shlex.split(lines[inject].split(None, 1)[1])
    assert command[1:3] == ["sim", "inject"]
    assert command[command.index("--node") + 1] == f"{TRAIN_POOL}-0000"
    assert command[command.index("--xid") + 1] == "79"
    assert "--persistent" in command
    documented = Path(__file__).resolve().parents[3] / "docs" / "providers.md"
    assert "--node h100-train-0000 --gpu 0 --xid 79 --persistent" in documented.read_text()
    # The group that replaces the node is named right under the command.
    text = "\n".join(lines)
    assert re.search(rf"Auto Scaling group {TRAIN_POOL}\b", text), text
    # "the command above" where the command is printed above the faults line.
    faults = next(i for i, line in enumerate(lines) if line.startswith("  faults"))
    assert "inject your own with the command above" in lines[faults]
    assert inject < faults


def test_other_clouds_keep_a_placeholder_node_and_say_above(tmp_path: Path) -> None:
    lines = banner(tmp_path, "http", faults=False)
    text = "\n".join(lines)
    assert "--node NODE --gpu 0 --xid 79" in text
    assert "the command below" not in text
