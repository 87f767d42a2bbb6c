"""A doctor given a config that does not load fails at once (exit 2), naming file, line and
field of each problem, in text and in JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from remediator.cli import main

BAD = """cluster_name: x
provider:
  type: aws
  timeout_seconds: -3
web:
  listen: 1
poll_interval_seconds: fast
"""


def test_each_bad_field_is_named_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "remediator.yaml"
    config.write_text(BAD)
    assert main(["doctor", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"{config}:4: provider.aws.timeout_seconds: Input should be greater than 0" in err
    assert f"{config}:6: web.listen:" in err
    assert f"{config}:7: poll_interval_seconds:" in err

    assert main(["doctor", "--config", str(config), "--format", "json"]) == 2
    printed = json.loads(capsys.readouterr().out)
    assert printed["exit_code"] == 2 and f"{config}:4:" in printed["error"]


def test_a_yaml_syntax_error_names_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "remediator.yaml"
    config.write_text("cluster_name: x\nweb: [unclosed\n")
    assert main(["doctor", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert str(config) in err and "line 3" in err
