"""`remediator COMMAND` builds its parser from that command's module alone: the map it uses
must name every command each module registers, and a command must not import the others'."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

from remediator.cli import COMMAND_MODULES, COMMAND_OF


def test_every_command_maps_to_the_module_that_registers_it() -> None:
    registered: dict[str, str] = {}
    for name in COMMAND_MODULES:
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers(dest="command")
        importlib.import_module(name).register(sub)
        registered.update(dict.fromkeys(sub.choices, name))
    assert registered == COMMAND_OF


def test_a_command_does_not_import_the_backtest_or_the_controller() -> None:
    code = (
        "import sys\n"
        "from remediator.cli import main\n"
        "try:\n"
        "    main(['sim', 'inject', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith(('remediator.backtest', "
        "'remediator.controller'))))\n"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert found.stdout.strip().splitlines()[-1] == "[]"
