"""`slurm.signal` is a name scancel knows, checked where the config is read: a typo would
otherwise pass the config and the doctor and fail only at the first checkpoint, as an
"Unknown job signal" from scancel with the jobs still running."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from remediator.errors import RemediatorError
from remediator.settings import load_settings
from remediator.slurm.settings import SlurmSettings


def write(tmp_path: Path, signal: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(f"cluster_name: c\nslurm:\n  enabled: true\n  signal: {signal}\n")
    return path


def test_an_unknown_signal_is_refused_naming_the_field_and_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "FOO")
    with pytest.raises(RemediatorError) as caught:
        load_settings(path)
    message = str(caught.value)
    assert f"{path}:4: slurm.signal: Value error, unknown signal 'FOO'" in message
    assert "USR1" in message  # what it could be


@pytest.mark.parametrize(
    ("given", "kept"),
    [("TERM", "TERM"), ("usr1", "USR1"), ("SIGUSR2", "USR2"), ("15", "TERM"), ("10", "USR1")],
)
def test_scancels_spellings_are_kept_as_its_name(given: str, kept: str) -> None:
    assert SlurmSettings(signal=given).signal == kept


@pytest.mark.parametrize("given", ["0", "99", "RTMIN", "SIGWINCH", ""])
def test_what_scancel_refuses_is_refused(given: str) -> None:
    with pytest.raises(ValueError, match="unknown signal"):
        SlurmSettings(signal=given)


def test_the_doctor_fails_on_it_naming_the_field(tmp_path: Path) -> None:
    path = write(tmp_path, "FOO")
    done = subprocess.run(
        [sys.executable, "-m", "remediator", "doctor", "--config", str(path), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "fail" and "slurm.signal" in report["error"], report
