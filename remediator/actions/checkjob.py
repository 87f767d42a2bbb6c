"""All of a validation's programs in one Job: one container runs them in sequence under `sh -c`,
each program's output between two marker lines that name its check and program and carry the
time (`date +%s.%N`) and, at the end, the exit code. A Job costs a round trip (created, its pod
bound and started, its log read) of about a second; paying it once per validation instead of
once per check is what keeps the validate step's overhead under 2 s.

The log is split back into sections here, so each check keeps its own verdict, evidence and
time. A section whose markers are missing or broken (the pod killed half way, a shell without
`date`) is missing, and the check it belongs to fails with the raw tail; never a pass."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MARK = "### remediator-check"
_BEGIN = re.compile(rf"^{MARK} begin (\S+) (\S+) at=(\S+)$")
_END = re.compile(rf"^{MARK} end (\S+) (\S+) rc=(-?\d+) at=(\S+)$")


@dataclass(frozen=True)
class Program:
    check: str
    name: str
    argv: tuple[str, ...]


@dataclass(frozen=True)
class Section:
    """One program's output as the Job printed it, its exit code and when it ran (seconds since
    the epoch as the node's clock said; None when `date` printed something else)."""

    output: str
    exit_code: int
    began: float | None
    ended: float | None


def script(programs: Sequence[Program]) -> str:
    """The `sh -c` script: each program between its markers, stderr folded into its section.
    The blank `echo` before the end marker keeps it on a line of its own when the program's
    last line has no newline."""
    lines = []
    for p in programs:
        where = f"{p.check} {p.name}"
        lines += [
            f'echo "{MARK} begin {where} at=$(date +%s.%N)"',
            f"{shlex.join(p.argv)} 2>&1",
            "rc=$?",
            "echo",
            f'echo "{MARK} end {where} rc=$rc at=$(date +%s.%N)"',
        ]
    return "\n".join(lines) + "\n"


def command(programs: Sequence[Program]) -> list[str]:
    return ["sh", "-c", script(programs)]


def _seconds(raw: str) -> float | None:
    try:
        return float(raw)
    except ValueError:
        return None


def sections(log: str) -> dict[tuple[str, str], Section]:
    """(check, program) → its section, for each program whose begin and end markers both came
    out in order; anything else in the log (the runtime's own lines) is ignored."""
    found: dict[tuple[str, str], Section] = {}
    current: tuple[str, str, float | None] | None = None
    body: list[str] = []
    for line in log.splitlines():
        if m := _BEGIN.match(line):
            current, body = (m[1], m[2], _seconds(m[3])), []
            continue
        if (m := _END.match(line)) and current is not None and (m[1], m[2]) == current[:2]:
            if body and body[-1] == "":
                body.pop()  # the blank echo before the end marker
            text = "\n".join(body) + ("\n" if body else "")
            found[(m[1], m[2])] = Section(text, int(m[3]), current[2], _seconds(m[4]))
            current = None
            continue
        if current is not None:
            body.append(line)
    return found


def check_seconds(found: Mapping[tuple[str, str], Section], check: str) -> float | None:
    """From the first of the check's programs starting to the last one ending."""
    mine = [s for (c, _), s in found.items() if c == check]
    began = [s.began for s in mine if s.began is not None]
    ended = [s.ended for s in mine if s.ended is not None]
    if not mine or len(began) < len(mine) or len(ended) < len(mine):
        return None
    return round(max(0.0, max(ended) - min(began)), 3)
