"""The simulated node's `sh -c`: the validation's one-Job script (actions/checkjob.py) runs each
program in turn on the script's own clock, so its markers carry the times a real node's `date`
would print; syntax the simulator does not run stops the script (never a silent success)."""

from __future__ import annotations

from datetime import UTC, datetime

from remediator.actions import burnin, checkjob
from remediator.actions.burnin import Checks
from remediator.clock import FakeClock
from remediator.remediation.steps.validate import programs
from remediator.sim.node.programs import (
    ALL_REDUCE_SECONDS,
    DIAG_SECONDS,
    IBSTAT_SECONDS,
    SMI_SECONDS,
    HostPrograms,
)
from tests.unit.sim.test_node_programs import H100, HealthyNode, job

START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def host(scale: float = 1.0) -> HostPrograms:
    return HostPrograms(HealthyNode(), time_scale=scale, clock=FakeClock(START))


def test_the_validation_script_runs_every_program_one_after_another() -> None:
    wanted = programs(Checks(busbw_floor={H100: 400.0}), level=3, gpus=8)
    run = host().run(job(*checkjob.command(wanted)), "h100-train-0")
    assert run is not None and run.exit_code == 0
    checks = SMI_SECONDS * 2 + IBSTAT_SECONDS + DIAG_SECONDS[3] + ALL_REDUCE_SECONDS
    assert run.seconds == checks
    found = checkjob.sections(run.output)
    assert set(found) == {(p.check, p.name) for p in wanted}
    diag = found[(burnin.DCGM, "diag")]
    assert diag.began == START.timestamp() + SMI_SECONDS * 2 + IBSTAT_SECONDS
    assert checkjob.check_seconds(found, burnin.DCGM) == DIAG_SECONDS[3]
    assert burnin.dcgm_verdict(diag.output, 3, diag.exit_code).passed
    nccl = found[(burnin.NCCL, "allreduce")]
    assert burnin.nccl_verdict(nccl.output, H100, {H100: 400.0}).passed


def test_the_time_scale_shortens_each_program_inside_the_script() -> None:
    wanted = [checkjob.Program("dcgm", "diag", ("dcgmi", "diag", "-r", "2", "-j"))]
    run = host(0.5).run(job(*checkjob.command(wanted)), "h100-train-0")
    assert run is not None and run.seconds == DIAG_SECONDS[2] * 0.5
    assert checkjob.check_seconds(checkjob.sections(run.output), "dcgm") == DIAG_SECONDS[2] * 0.5


def test_exit_codes_and_variables_follow_sh() -> None:
    script = "nosuch --flag\nrc=$?\necho got $rc ${rc}; dcgmi diag -r 1 -j 2>&1; echo $?"
    run = host().run(job("sh", "-c", script), "n")
    assert run is not None
    lines = run.output.splitlines()
    assert lines[0] == "sh: 1: nosuch: not found"
    assert lines[1] == "got 127 127"
    assert lines[-1] == "0"


def test_syntax_the_simulator_does_not_run_stops_the_script() -> None:
    run = host().run(job("sh", "-c", "echo a; nvidia-smi | grep H100; echo b"), "n")
    assert run is not None and run.exit_code == 2
    assert run.output.startswith("a\nsh: 1: Syntax error")
    assert "b\n" not in run.output


def test_a_single_command_under_sh_keeps_the_programs_own_path() -> None:
    run = host().run(job("sh", "-c", "dcgmi diag -r 2 -j"), "n")
    assert run is not None and run.exit_code == 0 and run.seconds == DIAG_SECONDS[2]
    assert host().run(job("sh", "-c", "sleep infinity"), "n") is None
