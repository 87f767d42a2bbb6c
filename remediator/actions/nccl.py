"""Reading nccl-tests' `all_reduce_perf` stdout: the size table, the out-of-bounds line and the
average bus bandwidth. The verdict uses the bus bandwidth of the largest message (the plateau a
floor is written for); the average over all sizes is kept as evidence, since the small sizes
that drag it down measure latency, not the links. Anything that is not that table is
unreadable, never a pass; when nccl-tests said why it stopped (too few GPUs, a CUDA or NCCL
call that failed), that line is the reason."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.]+)", re.MULTILINE)
OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s+(\S+)", re.MULTILINE)
NGPUS = re.compile(r"nGpus\s+(\d+)")
RANK = re.compile(r"^#\s+Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)")
# nccl-tests' own reasons for stopping (src/util.cu, src/common.h): the GPU count check, and
# the CUDACHECK/NCCLCHECK lines. Its TESTCHECK trace (" .. host pid N: Test failure file:line")
# only says where, so it is the reason only when nothing better was printed.
FAILURE = re.compile(
    r"^(Invalid number of GPUs: .*|\S+: Test (?:CUDA|NCCL) failure .*|invalid size.*)$",
    re.MULTILINE,
)
TRACE = re.compile(r"^ \.\. \S+ pid \d+: Test failure .*$", re.MULTILINE)


class NcclUnreadable(ValueError):
    """The output is not an nccl-tests report."""


class NcclFailed(NcclUnreadable):
    """nccl-tests stopped and said why: `line` is its own words."""

    def __init__(self, line: str) -> None:
        super().__init__(line)
        self.line = line


def failure_line(output: str) -> str | None:
    """The line in which nccl-tests said why it stopped, if it did."""
    found = FAILURE.search(output) or TRACE.search(output)
    return found.group(0).strip() if found else None


@dataclass(frozen=True)
class SizeRow:
    size: int
    busbw_out: float
    busbw_in: float
    wrong: int  # #wrong of both columns, summed

    @property
    def busbw(self) -> float:
        """The lower of out-of-place and in-place: both must reach the floor."""
        return min(self.busbw_out, self.busbw_in)


@dataclass(frozen=True)
class NcclReport:
    rows: tuple[SizeRow, ...]
    avg_busbw: float
    out_of_bounds: int
    gpus: int | None  # nGpus of the header (per process)
    ranks: int  # "Using devices" lines

    @property
    def peak(self) -> SizeRow:
        return max(self.rows, key=lambda r: r.size)

    @property
    def wrong(self) -> int:
        return sum(r.wrong for r in self.rows) + self.out_of_bounds

    def to_json(self) -> dict[str, Any]:
        return {
            "busbw_gbps": self.peak.busbw,
            "at_bytes": self.peak.size,
            "avg_busbw_gbps": self.avg_busbw,
            "wrong": self.wrong,
            "ranks": self.ranks,
        }


def _number(text: str) -> float:
    return 0.0 if text in ("N/A", "-") else float(text)


def _row(line: str) -> SizeRow | None:
    """size count type redop root time algbw busbw #wrong time algbw busbw #wrong."""
    words = line.split()
    if len(words) != 13 or not words[0].isdigit():
        return None
    try:
        return SizeRow(
            size=int(words[0]),
            busbw_out=_number(words[7]),
            busbw_in=_number(words[11]),
            wrong=int(_number(words[8])) + int(_number(words[12])),
        )
    except ValueError:
        return None


def parse_all_reduce(output: str) -> NcclReport:
    """The report; NcclFailed when it is not one and nccl-tests said why, else NcclUnreadable."""
    try:
        return _report(output)
    except NcclUnreadable:
        line = failure_line(output)
        if line is None:
            raise
        raise NcclFailed(line) from None


def _report(output: str) -> NcclReport:
    rows = tuple(r for r in (_row(line) for line in output.splitlines()) if r is not None)
    if not rows:
        raise NcclUnreadable("no size rows in the all_reduce_perf output")
    avg = AVG.search(output)
    if avg is None:
        raise NcclUnreadable("no '# Avg bus bandwidth' line: the run did not finish")
    bounds = OUT_OF_BOUNDS.search(output)
    if bounds is None:
        raise NcclUnreadable("no '# Out of bounds values' line: the run did not finish")
    gpus = NGPUS.search(output)
    ranks = sum(1 for line in output.splitlines() if RANK.match(line))
    return NcclReport(
        rows,
        float(avg.group(1)),
        int(bounds.group(1)),
        int(gpus.group(1)) if gpus else None,
        ranks,
    )
