"""The validation's one-Job script and the split of its log back into each check's sections: run
by a real `sh` (dash) over stand-in programs that print the samples' real layouts, and against
logs cut short or mangled, which must leave the section missing (never a pass)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from remediator.actions import burnin, checkjob
from remediator.actions.burnin import Checks
from remediator.actions.checkjob import Program
from remediator.actions.inventory import Inventory
from remediator.actions.nccl import parse_all_reduce
from remediator.remediation.steps.validate import missing_verdict, programs

SAMPLES = Path(__file__).parent / "samples"
H100 = "NVIDIA H100 80GB HBM3"
CHECKS = Checks(busbw_floor={H100: 400.0})


def stand_ins(bin_dir: Path) -> None:
    """`nvidia-smi`, `ibstat` and `all_reduce_perf` print the samples; `dcgmi` says so on
    stderr and exits 226 (a failed diag), with no trailing newline."""
    smi = (
        '#!/bin/sh\ncase "$1" in --query-gpu=*) cat "$SAMPLES/query_gpu_h100x8.csv";;'
        ' *) cat "$SAMPLES/nvidia_smi_banner.txt";; esac\n'
    )
    scripts = {
        "nvidia-smi": smi,
        "ibstat": '#!/bin/sh\ncat "$SAMPLES/ibstat_4x400.txt"\n',
        "all_reduce_perf": '#!/bin/sh\ncat "$SAMPLES/all_reduce_perf_h100x8.txt"\n',
        "dcgmi": "#!/bin/sh\nprintf 'Error: unable to connect to host engine' >&2\nexit 226\n",
    }
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)


@pytest.mark.skipif(shutil.which("dash") is None, reason="needs a POSIX sh")
def test_a_real_sh_runs_every_program_and_each_section_comes_back_whole(tmp_path: Path) -> None:
    stand_ins(tmp_path)
    wanted = programs(CHECKS, level=3, gpus=8)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "SAMPLES": str(SAMPLES)}
    argv = checkjob.command(wanted)
    argv[0] = "dash"
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180, check=True)
    found = checkjob.sections(done.stdout)
    assert set(found) == {(p.check, p.name) for p in wanted}
    nccl = found[(burnin.NCCL, "allreduce")]
    assert nccl.exit_code == 0
    assert nccl.output == (SAMPLES / "all_reduce_perf_h100x8.txt").read_text()
    assert parse_all_reduce(nccl.output).peak.busbw == 470.5
    read = burnin.read_inventory(
        {n: found[(burnin.INVENTORY, n)].output for n in ("gpus", "smi", "ib")}
    )
    assert isinstance(read, Inventory) and read.summary["gpu_count"] == 8
    diag = found[(burnin.DCGM, "diag")]
    assert diag.exit_code == 226
    assert diag.output == "Error: unable to connect to host engine\n"
    verdict = burnin.dcgm_verdict(diag.output, 3, diag.exit_code)
    assert not verdict.passed and "unreadable" in verdict.reason
    seconds = checkjob.check_seconds(found, burnin.INVENTORY)
    assert seconds is not None and 0 <= seconds < 60


def section(check: str, name: str, body: str, rc: int = 0, t0: float = 10.0) -> str:
    return (
        f"{checkjob.MARK} begin {check} {name} at={t0}\n{body}\n"
        f"{checkjob.MARK} end {check} {name} rc={rc} at={t0 + 1.5}\n"
    )


def test_each_check_gets_its_own_output_exit_code_and_time() -> None:
    log = (
        "runtime noise\n"
        + section("dcgm", "diag", '{"a": 1}\n', rc=226, t0=100.0)
        + section("nccl", "allreduce", "table", t0=102.0)
    )
    found = checkjob.sections(log)
    assert found[("dcgm", "diag")].output == '{"a": 1}\n'
    assert found[("dcgm", "diag")].exit_code == 226
    assert found[("nccl", "allreduce")].output == "table\n"
    assert checkjob.check_seconds(found, "dcgm") == 1.5
    assert checkjob.check_seconds(found, "nccl") == 1.5
    assert checkjob.check_seconds(found, "inventory") is None


BEGIN = f"{checkjob.MARK} begin nccl allreduce at=1.0\n"


@pytest.mark.parametrize(
    "log",
    [
        "",
        f"{checkjob.MARK} begin nccl allreduce at=1.0\n# nccl-tests version 2.19.6\n",  # killed
        f"{checkjob.MARK} end nccl allreduce rc=0 at=2.0\n",  # no begin
        f"{BEGIN}x\n{checkjob.MARK} end dcgm diag rc=0 at=2\n",  # another program's end
        f"{BEGIN}x\n{checkjob.MARK} end nccl allreduce rc=x at=2\n",  # no exit code
    ],
)
def test_a_section_cut_short_or_mangled_is_missing(log: str) -> None:
    assert ("nccl", "allreduce") not in checkjob.sections(log)


def test_a_date_that_printed_no_number_leaves_the_time_unknown() -> None:
    mark = checkjob.MARK
    log = f"{mark} begin dcgm diag at=%s.%N\nout\n{mark} end dcgm diag rc=0 at=%s.%N\n"
    found = checkjob.sections(log)
    assert found[("dcgm", "diag")].output == "out\n"
    assert checkjob.check_seconds(found, "dcgm") is None


def test_a_missing_section_fails_its_check_with_the_logs_tail() -> None:
    log = "x" * 5000 + "\nsh: 1: all_reduce_perf: not found\n"
    absent = [Program("nccl", "allreduce", ("all_reduce_perf", "-g", "8"))]
    verdict = missing_verdict("nccl", absent, log)
    assert not verdict.passed
    assert "all_reduce_perf" in verdict.reason
    assert verdict.evidence["raw_tail"].endswith("all_reduce_perf: not found\n")
    assert len(verdict.evidence["raw_tail"]) <= 1001


def test_the_job_runs_only_the_enabled_checks_in_order() -> None:
    names = [(p.check, p.name) for p in programs(Checks(nccl=False), level=2, gpus=8)]
    assert names == [
        ("inventory", "gpus"),
        ("inventory", "smi"),
        ("inventory", "ib"),
        ("dcgm", "diag"),
    ]
    script = checkjob.script(programs(Checks(inventory=False), level=4, gpus=4))
    assert "dcgmi diag -r 4 -j 2>&1" in script
    assert "all_reduce_perf -b 8 -e 8G -f 2 -g 4 2>&1" in script
