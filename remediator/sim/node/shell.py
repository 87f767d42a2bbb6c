"""A `sh -c` script on a simulated node: the small part of POSIX sh that a remediation Job's
script uses (the validation Job runs all its checks' programs in one container this way,
actions/checkjob.py). Statements one per line or separated by `;`: `echo`, `NAME=value`, and
commands, which the node's host programs answer one after another, each taking its run time on
the script's own clock. `$?`, `$NAME`, `${NAME}` and `$(date +%s)` / `$(date +%s.%N)` expand (in
every word: quoting is not tracked); `2>&1` is accepted (a simulated program writes one stream).

Anything else — pipes, `&&`, other redirections or command substitutions — stops the script
with sh's exit status 2 and a message, so a script the simulator cannot run never looks like
one that ran; a command no host program answers is sh's `not found` (127)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from remediator.sim.kube.controllers.context import ProgramRun

NOT_FOUND = 127
SYNTAX = 2
_EXPAND = re.compile(r"\$\(([^)]*)\)|\$\{(\w+)\}|\$(\?|[A-Za-z_]\w*)")
_ASSIGN = re.compile(r"^([A-Za-z_]\w*)=(.*)$")
_STDERR_TO_STDOUT = ("2", ">&", "1")

# A command's argv → what it does, or None when no host program knows it.
Runner = Callable[[list[str]], ProgramRun | None]


class Unsupported(ValueError):
    pass


def is_script(argv: Sequence[str]) -> bool:
    """`sh -c SCRIPT` whose script has more than one statement (a single command keeps the
    host programs' own argv path)."""
    return (
        len(argv) >= 3
        and argv[0].rsplit("/", 1)[-1] in ("sh", "bash", "dash")
        and argv[1] == "-c"
        and bool(re.search(r"[;\n]", argv[2].strip()))
    )


@dataclass
class _Run:
    now: datetime
    elapsed: float = 0.0
    status: int = 0
    output: list[str] = field(default_factory=list)
    variables: dict[str, str] = field(default_factory=dict)
    then: list[Callable[[], None]] = field(default_factory=list)

    def date(self, fmt: str) -> str:
        at = (self.now + timedelta(seconds=self.elapsed)).timestamp()
        if fmt == "+%s":
            return str(int(at))
        if fmt == "+%s.%N":
            return f"{at:.9f}"
        raise Unsupported(f"date {fmt}")

    def expand(self, word: str) -> str:
        def one(m: re.Match[str]) -> str:
            if m[1] is not None:
                inner = shlex.split(m[1])
                if len(inner) == 2 and inner[0] == "date":
                    return self.date(inner[1])
                raise Unsupported(f"$({m[1]})")
            name = m[2] or m[3]
            return str(self.status) if name == "?" else self.variables.get(name, "")

        return _EXPAND.sub(one, word)


def _statements(script: str) -> list[list[str]]:
    out: list[list[str]] = []
    for line in script.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        current: list[str] = []
        for token in lexer:
            if token == ";":
                out.append(current)
                current = []
            else:
                current.append(token)
        out.append(current)
    return [s for s in out if s]


def _words(tokens: list[str]) -> list[str]:
    words: list[str] = []
    i = 0
    while i < len(tokens):
        if tuple(tokens[i : i + 3]) == _STDERR_TO_STDOUT:
            i += 3
            continue
        if set(tokens[i]) <= set("();<>|&"):
            raise Unsupported(tokens[i])
        words.append(tokens[i])
        i += 1
    return words


def run(script: str, runner: Runner, now: datetime) -> ProgramRun:
    """The script's combined output, last status and total run time from `now`."""
    state = _Run(now)
    try:
        for tokens in _statements(script):
            _statement(state, [state.expand(w) for w in _words(tokens)], runner)
    except (Unsupported, ValueError) as exc:
        state.output.append(f"sh: 1: Syntax error: {exc} is not supported here\n")
        state.status = SYNTAX
    thens = list(state.then)

    def after() -> None:
        for then in thens:
            then()

    return ProgramRun(state.status, "".join(state.output), state.elapsed, after if thens else None)


def _statement(state: _Run, words: list[str], runner: Runner) -> None:
    if len(words) == 1 and (m := _ASSIGN.match(words[0])):
        state.variables[m[1]] = m[2]
        state.status = 0
        return
    if words[0] == "echo":
        state.output.append(" ".join(words[1:]) + "\n")
        state.status = 0
        return
    found = runner(words)
    if found is None:
        state.output.append(f"sh: 1: {words[0]}: not found\n")
        state.status = NOT_FOUND
        return
    state.output.append(found.output)
    state.elapsed += found.seconds
    state.status = found.exit_code
    if found.then is not None:
        state.then.append(found.then)
