"""Shared fixtures live in tests/fixtures/, one module per real service; register them here.

The session ends with a check that every process the suite started is gone (tests/fixtures/
processes.py), and that no Slurm job wrote its output file into the working tree: either fails
the run, naming what was left. Under pytest-xdist each worker checks what it started and hands
its findings to the controller, which fails the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import processes

pytest_plugins: list[str] = [
    "tests.fixtures.prometheus",
    "tests.fixtures.alertmanager",
    "tests.fixtures.postgres",
    "tests.fixtures.sim",
    "tests.fixtures.slurm",
    "tests.fixtures.web",
    "tests.fixtures.browser",
]

TOKEN = pytest.StashKey[str]()
JOB_OUTPUTS = pytest.StashKey[frozenset[Path]]()
FOUND = pytest.StashKey[list[str]]()
WORKER_KEY = "leftovers"


def _job_outputs(root: Path) -> frozenset[Path]:
    return frozenset(root.glob("slurm-*.out"))


def pytest_configure(config: pytest.Config) -> None:
    config.stash[TOKEN] = processes.mark_this_process()
    config.stash[JOB_OUTPUTS] = _job_outputs(config.rootpath)
    config.stash[FOUND] = []


def _temporary(config: pytest.Config) -> tuple[str, ...]:
    """This process's temporary directory (an xdist worker's own), if the session made one."""
    factory = getattr(config, "_tmp_path_factory", None)
    base = getattr(factory, "_basetemp", None)
    return (f"{base}/",) if base is not None else ()


def _is_xdist_controller(config: pytest.Config) -> bool:
    return config.pluginmanager.has_plugin("dsession")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist (controller): a worker's findings."""
    found = getattr(node, "workeroutput", {}).get(WORKER_KEY) or []
    node.config.stash[FOUND].extend(found)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    found = config.stash[FOUND]
    if not _is_xdist_controller(config):
        found.extend(
            str(left) for left in processes.leftovers(config.stash[TOKEN], _temporary(config))
        )
        found.extend(
            f"job output file {path}"
            for path in sorted(_job_outputs(config.rootpath) - config.stash[JOB_OUTPUTS])
        )
        workeroutput = getattr(config, "workeroutput", None)
        if workeroutput is not None:  # an xdist worker: the controller reports
            workeroutput[WORKER_KEY] = list(found)
            return
    if not found:
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write("\n")
        reporter.write_sep("=", "left behind by the suite", red=True, bold=True)
        for line in found:
            reporter.write_line(line)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
