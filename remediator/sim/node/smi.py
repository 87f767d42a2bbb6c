"""`nvidia-smi` on a simulated node: the summary table (driver 550's layout, 91 columns) and
`--query-gpu=FIELDS --format=csv[,noheader][,nounits]`, for the GPUs the node still shows. A GPU
gone from the bus or off it is not enumerated, and the indices close up, as after a real loss.

The CSV header names each field as nvidia-smi does (`memory.total [MiB]`); an alias such as
`gpu_name` is answered under its canonical name. An unknown field is refused as nvidia-smi
refuses it: `Field "X" is not a valid field to query.` and exit status 2 (invalid argument).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from remediator.sim.node.hardware import Gpu, Profile

EXIT_INVALID_ARGUMENT = 2


@dataclass(frozen=True)
class Result:
    exit_code: int
    output: str


@dataclass(frozen=True)
class Field:
    name: str
    unit: str | None
    value: Callable[[Profile, int, Gpu], str]


FIELDS: dict[str, Field] = {
    f.name: f
    for f in (
        Field("index", None, lambda p, i, g: str(i)),
        Field("name", None, lambda p, i, g: p.model),
        Field("uuid", None, lambda p, i, g: g.uuid),
        Field("serial", None, lambda p, i, g: g.serial),
        Field("pci.bus_id", None, lambda p, i, g: g.pci_bus_id),
        Field("driver_version", None, lambda p, i, g: p.driver_version),
        Field("vbios_version", None, lambda p, i, g: p.vbios_version),
        Field("memory.total", "MiB", lambda p, i, g: str(p.spec.memory_mib)),
        Field("count", None, lambda p, i, g: str(-1)),  # replaced per call: visible GPUs
    )
}
ALIASES = {
    "gpu_name": "name",
    "gpu_uuid": "uuid",
    "gpu_serial": "serial",
    "gpu_bus_id": "pci.bus_id",
}


def _option(argv: Sequence[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
    return None


def visible(profile: Profile, present: Sequence[int]) -> list[Gpu]:
    return [profile.gpu(i) for i in present]


def query(argv: Sequence[str], profile: Profile, present: Sequence[int]) -> Result:
    raw = _option(argv, "--query-gpu") or ""
    fmt = _option(argv, "--format")
    if fmt is None:
        return Result(
            EXIT_INVALID_ARGUMENT,
            '--format must be specified with --query-gpu, e.g. "--format=csv".\n'
            "Please run 'nvidia-smi -h' for help.\n\n",
        )
    options = {o.strip() for o in fmt.split(",")}
    if "csv" not in options or not options <= {"csv", "noheader", "nounits"}:
        return Result(
            EXIT_INVALID_ARGUMENT,
            f"\"{fmt}\" is not a valid format.\nPlease run 'nvidia-smi -h' for help.\n\n",
        )
    fields: list[Field] = []
    for name in (n.strip() for n in raw.split(",")):
        found = FIELDS.get(ALIASES.get(name, name))
        if found is None or not name:
            return Result(
                EXIT_INVALID_ARGUMENT, f'Field "{name}" is not a valid field to query.\n\n'
            )
        fields.append(found)
    gpus = visible(profile, present)
    lines = []
    if "noheader" not in options:
        lines.append(", ".join(f.name + (f" [{f.unit}]" if f.unit else "") for f in fields))
    for index, gpu in enumerate(gpus):
        cells = []
        for f in fields:
            value = str(len(gpus)) if f.name == "count" else f.value(profile, index, gpu)
            if f.unit and "nounits" not in options:
                value += f" {f.unit}"
            cells.append(value)
        lines.append(", ".join(cells))
    return Result(0, "".join(line + "\n" for line in lines))


BAR = "+" + "-" * 89 + "+"
GPU_BAR = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"


def table(profile: Profile, present: Sequence[int], now: float | None = None) -> Result:
    """The summary nvidia-smi prints with no arguments: idle GPUs, persistence mode on."""
    stamp = time.strftime("%a %b %e %H:%M:%S %Y", time.localtime(now))
    spec = profile.spec
    lines = [
        stamp + " " * 7,
        BAR,
        f"| NVIDIA-SMI {profile.driver_version:<23}Driver Version: {profile.driver_version:<15}"
        f"CUDA Version: {profile.cuda_version:<9}|",
        "|" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+",
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A "
        "| Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage "
        "| GPU-Util  Compute M. |",
        f"|{'':41}|{'':24}|{'MIG M.':>21} |",
        "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|",
    ]
    for index, gpu in enumerate(visible(profile, present)):
        temp = 28 + (int(gpu.serial[-2:]) % 9)
        power = 60 + (int(gpu.serial[-3:]) % 20)
        lines += [
            f"| {index:>3}  {profile.model:<31}{'On':<3} |   {gpu.pci_bus_id} {'Off':<3} |"
            f"{'0':>21} |",
            f"| {'N/A':>3}   {temp:>2}C    P0{power:>15}W / {spec.power_limit_w:>4}W |"
            f"{1:>8}MiB / {spec.memory_mib:>6}MiB |{0:>7}%{'Default':>13} |",
            f"|{'':41}|{'':24}|{'Disabled':>21} |",
            GPU_BAR,
        ]
    lines += [
        " " * 89,
        BAR,
        "| Processes:" + " " * 78 + "|",
        "|  GPU   GI   CI        PID   Type   Process name" + " " * 30 + "GPU Memory |",
        "|        ID   ID" + " " * 63 + "Usage      |",
        "|" + "=" * 89 + "|",
        "|  No running processes found" + " " * 61 + "|",
        BAR,
    ]
    return Result(0, "".join(line + "\n" for line in lines))


def run(argv: Sequence[str], profile: Profile, present: Sequence[int]) -> Result:
    if any(a.startswith("--query-gpu") for a in argv):
        return query(argv, profile, present)
    return table(profile, present)
