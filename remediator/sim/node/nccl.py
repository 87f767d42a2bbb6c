"""`all_reduce_perf` from nccl-tests on a simulated node: the program's own stdout (its header,
the `Using devices` lines, the out-of-place/in-place table and the summary lines) for the GPUs the
node still has, with a bus bandwidth that follows its NVLink fabric's health.

The layout is nccl-tests 2.19's (src/util.cu): `%12li  %12li  %8s  %6s  %6s` for size, count,
type, redop and root, then `  %7s  %6s  %6s  %6g` for time, algbw, busbw and #wrong, out of
place and then in place, each number squeezed into its width as `getFloatStr` does. Times come
from a latency-plus-bandwidth model: bus bandwidth = algorithm bandwidth * 2(n-1)/n, as
all_reduce.cu computes it, approaching the fabric's bus bandwidth for large messages.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from remediator.sim.node.hardware import IB_RATE, Profile

NCCL_TESTS_VERSION = "2.19.6"
NCCL_VERSION_CODE = 22703  # NCCL 2.27.3
PROGRAM = "all_reduce_perf"
LATENCY_US = 14.0  # a small all-reduce inside one NVLink domain
LOCAL_BANDWIDTH = 1500.0  # GB/s: one GPU "reducing" with itself is a device copy
EXIT_INVALID_USAGE = 6  # testInvalidUsage
EXIT_NOT_IMPLEMENTED = 5  # testNotImplemented: more GPUs asked for than the node has
IB_EFFICIENCY = 0.92  # what of the rails' line rate an all-reduce across nodes reaches


class UsageError(ValueError):
    pass


@dataclass(frozen=True)
class Options:
    min_bytes: int = 32 * 1024 * 1024
    max_bytes: int = 32 * 1024 * 1024
    step_factor: int = 1
    step_bytes: int = 1024 * 1024
    threads: int = 1
    gpus: int = 1
    iters: int = 20
    warmup: int = 1
    check: int = 1


def parse_size(text: str, what: str) -> int:
    """nccl-tests' parsesize: a number with an optional K, M or G (powers of 1024)."""
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    mult = units.get(text[-1:].upper(), 1)
    digits = text[:-1] if mult != 1 else text
    if not digits.isdigit():
        raise UsageError(f"invalid size specified for '{what}'")
    return int(digits) * mult


_FLAGS = {
    "-b": "minbytes",
    "--minbytes": "minbytes",
    "-e": "maxbytes",
    "--maxbytes": "maxbytes",
    "-f": "stepfactor",
    "--stepfactor": "stepfactor",
    "-i": "stepbytes",
    "--stepbytes": "stepbytes",
    "-t": "nthreads",
    "--nthreads": "nthreads",
    "-g": "ngpus",
    "--ngpus": "ngpus",
    "-n": "iters",
    "--iters": "iters",
    "-w": "warmup_iters",
    "--warmup_iters": "warmup_iters",
    "-c": "check",
    "--check": "check",
}


def parse_options(args: Sequence[str]) -> Options:
    values: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        name, _, inline = arg.partition("=")
        key = _FLAGS.get(name)
        if key is not None:
            if inline:
                values[key] = inline
            elif i + 1 < len(args):
                values[key] = args[i + 1]
                i += 1
            else:
                raise UsageError(f"option '{arg}' requires an argument")
        i += 1
    opts = Options()
    try:
        factor = int(values.get("stepfactor", "0") or 0)
        options = Options(
            min_bytes=parse_size(values["minbytes"], "minbytes")
            if "minbytes" in values
            else opts.min_bytes,
            max_bytes=parse_size(values["maxbytes"], "maxbytes")
            if "maxbytes" in values
            else opts.max_bytes,
            step_factor=factor if factor > 1 else 1,
            step_bytes=parse_size(values["stepbytes"], "stepBytes")
            if "stepbytes" in values
            else opts.step_bytes,
            threads=int(values.get("nthreads", opts.threads)),
            gpus=int(values.get("ngpus", opts.gpus)),
            iters=int(values.get("iters", opts.iters)),
            warmup=int(values.get("warmup_iters", opts.warmup)),
            check=int(values.get("check", opts.check)),
        )
    except ValueError as exc:
        if isinstance(exc, UsageError):
            raise
        raise UsageError(f"invalid option value: {exc}") from exc
    if options.min_bytes > options.max_bytes:
        raise UsageError(
            f"invalid sizes for 'minbytes' and 'maxbytes': {options.min_bytes} > "
            f"{options.max_bytes}"
        )
    if options.gpus < 1 or options.threads < 1:
        raise UsageError("invalid number of GPUs or threads")
    return options


def sizes(opts: Options) -> list[int]:
    out, size = [], opts.min_bytes
    while size <= opts.max_bytes:
        out.append(size)
        if opts.step_factor > 1:
            size *= opts.step_factor
        else:
            size += opts.step_bytes
        if size == out[-1]:  # -b 0 with a factor: nccl-tests stops after one
            break
    return out


def float_str(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: two decimals, then one, then none, then an exponent, whichever
    first fits the width."""
    for fmt in ("%*.2f", "%*.1f", "%*.0f"):
        text = fmt % (width, value)
        if len(text) <= width:
            return text
    return ("%*.1e" if width >= 7 else "%*.0e") % (width, value)


def bus_factor(ranks: int) -> float:
    return 2.0 * (ranks - 1) / ranks


@dataclass(frozen=True)
class Result:
    exit_code: int
    output: str


def _header(opts: Options) -> list[str]:
    step = f"{opts.step_factor}(factor)" if opts.step_factor > 1 else f"{opts.step_bytes}(bytes)"
    return [
        f"# nccl-tests version {NCCL_TESTS_VERSION} nccl-headers={NCCL_VERSION_CODE} "
        f"nccl-library={NCCL_VERSION_CODE}",
        f"# Collective test starting: {PROGRAM}",
        f"# nThread {opts.threads} nGpus {opts.gpus} minBytes {opts.min_bytes} maxBytes "
        f"{opts.max_bytes} step: {step} warmup iters: {opts.warmup} iters: {opts.iters} "
        f"agg iters: 1 validation: {opts.check} graph: 0 unalign: 0",
        "#",
        "# Using devices",
    ]


def _rank_line(rank: int, pid: int, host: str, device: int, profile: Profile, gpu: int) -> str:
    pci_bus = int(profile.gpu(gpu).pci_bus_id.split(":")[1], 16)
    return (
        f"#  Rank {rank:2d} Group {0:2d} Pid {pid:6d} on {host:>10} device {device:2d} "
        f"[{0:04x}:{pci_bus:02x}:{0:02x}] {profile.model}"
    )


def _table(opts: Options, ranks: int, peak_bus: float, rng: random.Random) -> list[str]:
    """The result table and summary, for `ranks` ranks whose large-message bus bandwidth
    approaches `peak_bus`."""
    columns = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s "
    out = [
        "#",
        "#" + " " * 54 + "           out-of-place                       in-place          ",
        columns
        % ("size", "count", "type", "redop", "root", *("time", "algbw", "busbw", "#wrong") * 2),
        columns % ("(B)", "(elements)", "", "", "", *("(us)", "(GB/s)", "(GB/s)", "") * 2),
    ]
    factor = bus_factor(ranks)
    peak_alg = peak_bus / factor if factor > 0 else LOCAL_BANDWIDTH
    total, count = 0.0, 0
    for size in sizes(opts):
        elements = size // 4
        nbytes = elements * 4
        row = f"{nbytes:12d}  {elements:12d}  {'float':>8}  {'sum':>6}  {-1:6d}"
        for _place in ("out-of-place", "in-place"):
            time_us = (LATENCY_US + nbytes / (peak_alg * 1e3)) * (1.0 + 0.03 * rng.random())
            alg = nbytes / time_us / 1e3
            bus = alg * factor
            total += bus
            count += 1
            row += f"  {float_str(time_us, 7)}  {float_str(alg, 6)}  {float_str(bus, 6)}  {0:6g}"
        out.append(row)
    average = total / count if count else 0.0
    return [
        *out,
        f"# {'Out of bounds values':<20} : 0 OK",
        f"# {'Avg bus bandwidth':<20} : {average:g} ",
        "#",
        f"# Collective test concluded: {PROGRAM}",
        "#",
        "",
    ]


def run(argv: Sequence[str], profile: Profile, present: Sequence[int], host: str) -> Result:
    """`present`: the indices of the GPUs the node still shows (CUDA numbers them 0..n-1)."""
    try:
        opts = parse_options(argv[1:])
    except UsageError as exc:
        return Result(EXIT_INVALID_USAGE, f"{exc}\n")
    rng = random.Random(zlib.crc32(f"{profile.node}/{profile.uid}".encode()))
    pid = rng.randint(2000, 99999)
    out = _header(opts)
    ranks = opts.threads * opts.gpus
    if ranks > len(present):
        text = "\n".join(out) + "\n"
        text += (
            f"Invalid number of GPUs: {ranks} requested but only {len(present)} were found.\n"
            "Please check the number of processes and GPUs per process.\n"
            f" .. {host} pid {pid}: Test failure common.cu:1450\n"
        )
        return Result(EXIT_NOT_IMPLEMENTED, text)
    out += [_rank_line(r, pid, host, r, profile, present[r]) for r in range(ranks)]
    out += _table(opts, ranks, profile.nvlink_busbw, rng)
    return Result(0, "\n".join(out) + "\n")


@dataclass(frozen=True)
class Host:
    """One node of a multi-node run: its name, machine, the GPUs it still shows and its
    InfiniBand ports that are up."""

    name: str
    profile: Profile
    present: Sequence[int]
    ib_up: int


def network_busbw(host: Host) -> float:
    """GB/s a node's rails carry for an all-reduce that spans nodes: each up port at its rate,
    less protocol overhead."""
    return host.ib_up * IB_RATE / 8 * IB_EFFICIENCY


def run_multi(argv: Sequence[str], hosts: Sequence[tuple[Host, int]]) -> Result:
    """`all_reduce_perf` under MPI: (host, slots) processes per node, each rank on its own
    GPU (`-g 1`, nccl-tests' multi-node form); rank 0 prints the one table, whose bus bandwidth
    the slowest node's fabric bounds — its NVLink, or its rails between nodes."""
    try:
        opts = parse_options(argv[1:])
    except UsageError as exc:
        return Result(EXIT_INVALID_USAGE, f"{exc}\n")
    seed = "/".join(f"{h.profile.node}/{h.profile.uid}" for h, _ in hosts)
    rng = random.Random(zlib.crc32(seed.encode()))
    out = _header(opts)
    rank = 0
    for host, slots in hosts:
        if slots * opts.gpus > len(host.present):
            text = "\n".join(out) + "\n"
            text += (
                f"{host.name}: Test CUDA failure common.cu:1012 'invalid device ordinal'\n"
                f" .. {host.name} pid {rng.randint(2000, 99999)}: Test failure common.cu:1450\n"
            )
            return Result(1, text)
        for local in range(slots * opts.gpus):
            pid = rng.randint(2000, 99999)
            out.append(_rank_line(rank, pid, host.name, local, host.profile, host.present[local]))
            rank += 1
    peak = min(min(h.profile.nvlink_busbw, network_busbw(h)) for h, _ in hosts)
    if len(hosts) == 1:
        peak = hosts[0][0].profile.nvlink_busbw
    out += _table(opts, rank, peak, rng)
    return Result(0, "\n".join(out) + "\n")
