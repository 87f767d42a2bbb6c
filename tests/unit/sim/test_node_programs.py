"""The validation programs' outputs on a simulated node, read back by small readers written here
from the real programs' formats (nccl-tests' table, nvidia-smi's CSV and summary, ibstat's
blocks, dcgmi's JSON), so a drift in the simulator's text shows as a reader that no longer
understands it."""

from __future__ import annotations

import csv
import io
import re
import uuid
from dataclasses import replace

import pytest

from remediator.sim.node import hardware, ibstat, nccl, smi
from remediator.sim.node.hardware import (
    DRIVER_VERSION,
    Hardware,
    Profile,
    build_profile,
    gpu_uuid,
)
from remediator.sim.node.programs import (
    ALL_REDUCE_SECONDS,
    DIAG_SECONDS,
    DIAG_TESTS,
    RESET_SECONDS,
    HostPrograms,
    diag_report,
)
from remediator.sim.telemetry.exporters import Inventory

H100 = "NVIDIA H100 80GB HBM3"
ALL = list(range(8))

# nccl-tests 2.19 (src/util.cu): the result header and one row, column for column.
ROW = re.compile(
    r"^ {0,11}(\d+) +(\d+) +(\w+) +(\w+) +(-?\d+)"
    r" +([\d.e+]+) +([\d.e+]+) +([\d.e+]+) +(\d+)"
    r" +([\d.e+]+) +([\d.e+]+) +([\d.e+]+) +(\d+)$"
)


def profile(gpus: int = 8, model: str = H100) -> Profile:
    return build_profile("h100-train-0", "uid-1", 0, model, gpus)


def read_nccl(text: str) -> dict[str, object]:
    """An independent reader of all_reduce_perf's stdout: the devices, the rows, the summary."""
    devices, rows, summary = [], [], {}
    for line in text.splitlines():
        if m := re.match(
            r"^#  Rank +(\d+) Group +\d+ Pid +\d+ on +(\S+) device +(\d+) "
            r"\[(\w{4}):(\w{2}):(\w{2})\] (.+)$",
            line,
        ):
            devices.append((int(m[1]), m[2], m[5], m[7]))
        elif m := ROW.match(line):
            rows.append(
                {
                    "size": int(m[1]),
                    "count": int(m[2]),
                    "type": m[3],
                    "redop": m[4],
                    "root": int(m[5]),
                    "oop_algbw": float(m[7]),
                    "oop_busbw": float(m[8]),
                    "oop_wrong": int(m[9]),
                    "ip_busbw": float(m[12]),
                }
            )
        elif m := re.match(r"^# (Out of bounds values|Avg bus bandwidth) +: (\S+)", line):
            summary[m[1]] = m[2]
    return {"devices": devices, "rows": rows, "summary": summary}


def test_all_reduce_perf_prints_the_nccl_tests_table_for_every_size() -> None:
    result = nccl.run(
        ["all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "8"], profile(), ALL, "n0"
    )
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].startswith("# nccl-tests version ")
    assert lines[2].startswith("# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor)")
    header = next(line for line in lines if "#wrong" in line).split()
    assert (
        header[1:]
        == ["size", "count", "type", "redop", "root"] + ["time", "algbw", "busbw", "#wrong"] * 2
    )
    assert any("out-of-place" in line and "in-place" in line for line in lines)
    read = read_nccl(result.output)
    rows = read["rows"]
    assert isinstance(rows, list)
    assert [r["size"] for r in rows] == [8 * 2**i for i in range(31)]  # 8 B .. 8 GiB
    assert all(r["count"] == r["size"] // 4 and r["type"] == "float" for r in rows)
    assert all(r["redop"] == "sum" and r["root"] == -1 and r["oop_wrong"] == 0 for r in rows)
    # busbw = algbw * 2(n-1)/n for 8 ranks
    big = rows[-1]
    assert big["oop_busbw"] == pytest.approx(big["oop_algbw"] * 1.75, rel=0.01)
    assert 400 < big["oop_busbw"] <= 480
    summary = read["summary"]
    assert isinstance(summary, dict)
    assert summary["Out of bounds values"] == "0"
    average = sum(r["oop_busbw"] + r["ip_busbw"] for r in rows) / (2 * len(rows))
    assert float(summary["Avg bus bandwidth"]) == pytest.approx(average, rel=0.01)
    devices = read["devices"]
    assert [(d[0], d[2], d[3]) for d in devices] == [  # type: ignore[index]
        (i, bus, H100) for i, bus in enumerate(["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"])
    ]
    assert result.output.endswith("# Collective test concluded: all_reduce_perf\n#\n\n")


def test_a_slow_nvlink_lowers_the_bus_bandwidth_by_its_fraction() -> None:
    argv = ["all_reduce_perf", "-b", "1G", "-e", "8G", "-f", "2", "-g", "8"]
    healthy = read_nccl(nccl.run(argv, profile(), ALL, "n0").output)["summary"]
    slow_profile = replace(profile(), nvlink_fraction=0.4)
    slow = read_nccl(nccl.run(argv, slow_profile, ALL, "n0").output)["summary"]
    assert isinstance(healthy, dict) and isinstance(slow, dict)
    ratio = float(slow["Avg bus bandwidth"]) / float(healthy["Avg bus bandwidth"])
    assert ratio == pytest.approx(0.4, abs=0.03)


def test_all_reduce_perf_fails_as_nccl_tests_does_when_a_gpu_is_missing() -> None:
    result = nccl.run(
        ["all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "8"], profile(), ALL[:7], "n0"
    )
    assert result.exit_code == nccl.EXIT_NOT_IMPLEMENTED
    assert "Invalid number of GPUs: 8 requested but only 7 were found." in result.output
    assert "Avg bus bandwidth" not in result.output


def test_all_reduce_perf_refuses_a_malformed_size() -> None:
    result = nccl.run(["all_reduce_perf", "-b", "8X", "-e", "8G"], profile(), ALL, "n0")
    assert result.exit_code != 0
    assert "invalid size specified for 'minbytes'" in result.output


def test_float_str_squeezes_numbers_into_their_width_as_nccl_tests_does() -> None:
    assert nccl.float_str(14.1, 7) == "  14.10"
    assert nccl.float_str(15758.123, 7) == "15758.1"
    assert nccl.float_str(123456.7, 7) == " 123457"
    assert nccl.float_str(12345678.0, 7) == "1.2e+07"
    assert nccl.float_str(480.0, 6) == "480.00"


def test_query_gpu_csv_has_nvidia_smis_header_and_one_row_per_gpu() -> None:
    fields = "index,name,uuid,serial,pci.bus_id,driver_version,vbios_version,memory.total"
    result = smi.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv"], profile(), ALL)
    assert result.exit_code == 0
    rows = list(csv.reader(io.StringIO(result.output), skipinitialspace=True))
    assert rows[0] == [
        "index",
        "name",
        "uuid",
        "serial",
        "pci.bus_id",
        "driver_version",
        "vbios_version",
        "memory.total [MiB]",
    ]
    assert len(rows) == 9
    first = dict(zip(rows[0], rows[1], strict=True))
    assert first["index"] == "0" and first["name"] == H100
    assert first["uuid"] == gpu_uuid("h100-train-0", 0)
    assert re.fullmatch(r"\d{13}", first["serial"])
    assert first["pci.bus_id"] == "00000000:18:00.0"
    assert first["driver_version"] == DRIVER_VERSION
    assert first["memory.total [MiB]"] == "81559 MiB"
    assert len({r[2] for r in rows[1:]}) == 8 and len({r[3] for r in rows[1:]}) == 8


def test_query_gpu_noheader_nounits_and_a_gpu_gone() -> None:
    argv = [
        "nvidia-smi",
        "--query-gpu=index,pci.bus_id,memory.total",
        "--format=csv,noheader,nounits",
    ]
    result = smi.run(argv, profile(), [0, 1, 2, 4, 5, 6, 7])
    lines = result.output.splitlines()
    assert len(lines) == 7
    assert lines[3] == "3, 00000000:9A:00.0, 81559"  # indices close up; GPU 3's bus is gone


def test_an_unknown_field_is_refused_as_nvidia_smi_refuses_it() -> None:
    result = smi.run(
        ["nvidia-smi", "--query-gpu=index,cuda_version", "--format=csv"], profile(), ALL
    )
    assert result.exit_code == 2
    assert result.output.startswith('Field "cuda_version" is not a valid field to query.')


def test_the_summary_table_has_the_driver_and_cuda_versions_and_every_gpu() -> None:
    p = replace(profile(), driver_version="535.183.01", cuda_version="12.2")
    result = smi.run(["nvidia-smi"], p, ALL)
    lines = result.output.splitlines()
    assert re.search(r"Driver Version: 535\.183\.01 +CUDA Version: 12\.2 ", result.output)
    table = [line for line in lines[1:] if line.strip()]
    assert {len(line) for line in table} == {91}
    gpu_rows = [line for line in lines if re.match(r"^\| +\d+  NVIDIA", line)]
    assert len(gpu_rows) == 8
    assert "00000000:DB:00.0" in gpu_rows[7]
    assert re.search(r"1MiB / +81559MiB", result.output)


def read_ibstat(text: str) -> dict[str, dict[str, str]]:
    cas: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in text.splitlines():
        if m := re.match(r"^CA '(\S+)'$", line):
            current = cas.setdefault(m[1], {})
        elif m := re.match(r"^\t\t([^:]+): (.*)$", line):
            current["port1." + m[1]] = m[2]
        elif m := re.match(r"^\t([^:]+): ?(.*)$", line):
            current[m[1]] = m[2]
    return cas


def test_ibstat_shows_every_hca_active_at_400_and_a_down_port_down() -> None:
    result = ibstat.run(["ibstat"], profile(), {"mlx5_3"})
    cas = read_ibstat(result.output)
    assert list(cas) == [f"mlx5_{i}" for i in range(8)]
    up = cas["mlx5_0"]
    assert up["CA type"] == "MT4129" and up["Number of ports"] == "1"
    assert up["port1.State"] == "Active" and up["port1.Physical state"] == "LinkUp"
    assert up["port1.Rate"] == "400" and up["port1.Link layer"] == "InfiniBand"
    assert up["Port 1"] == ""
    down = cas["mlx5_3"]
    assert (down["port1.State"], down["port1.Physical state"]) == ("Down", "Disabled")
    assert down["port1.Base lid"] == "0"


def test_ibstat_one_ca_a_list_and_an_unknown_ca() -> None:
    assert list(read_ibstat(ibstat.run(["ibstat", "mlx5_2"], profile(), set()).output)) == [
        "mlx5_2"
    ]
    listed = ibstat.run(["ibstat", "-l"], profile(), set()).output.split()
    assert listed == [f"mlx5_{i}" for i in range(8)]
    unknown = ibstat.run(["ibstat", "mlx5_9"], profile(), set())
    assert unknown.exit_code == 255
    assert "stat of IB device 'mlx5_9' failed: No such file or directory" in unknown.output


def test_dcgm_diag_runs_each_levels_dcgm_3_tests_and_names_the_boards() -> None:
    names = {
        level: [
            t["name"]
            for c in diag_report(level, 8, {})["DCGM GPU Diagnostic"]["test_categories"]
            for t in c["tests"]
        ]
        for level in (1, 2, 3, 4)
    }
    assert "PCIe" not in names[1] and {"PCIe", "GPU Memory"} <= set(names[2])
    assert {"Targeted Stress", "Targeted Power", "Memory Bandwidth", "Diagnostic"} <= set(names[3])
    assert "Memtest" not in names[3] and {"Memtest", "Pulse Test"} <= set(names[4])
    assert len(names[4]) == sum(len(DIAG_TESTS[level]) for level in (1, 2, 3, 4))
    p = replace(profile(), driver_version="535.183.01")
    report = diag_report(2, 8, {}, p)
    assert report["Driver Version Detected"] == "535.183.01"
    assert report["GPU Device Serials"]["7"] == p.gpus[7].serial


def test_a_machine_keeps_its_identities_until_it_is_replaced() -> None:
    hardware = Hardware()
    first = hardware.profile("train-0", "uid-a", H100, 8)
    assert hardware.profile("train-0", "uid-a", H100, 8) == first  # a reboot: same object
    assert first.gpus[0].uuid == gpu_uuid("train-0", 0)  # the telemetry's historic identity
    second = hardware.profile("train-0", "uid-b", H100, 8)  # a new machine under the old name
    assert {g.uuid for g in second.gpus}.isdisjoint(g.uuid for g in first.gpus)
    assert {g.serial for g in second.gpus}.isdisjoint(g.serial for g in first.gpus)
    assert second.ib_ports[0].node_guid != first.ib_ports[0].node_guid
    other = Hardware().profile("train-0", "uid-a", H100, 8)
    assert other == first  # the same fleet has the same identities in every run


def test_version_and_nvlink_faults_stay_until_repaired() -> None:
    hardware = Hardware()
    hardware.profile("train-0", "uid-a", H100, 8)
    drifted = hardware.versions("train-0", driver="535.183.01", vbios=None, cuda=None)
    assert (drifted.driver_version, drifted.cuda_version) == ("535.183.01", "12.2")
    hardware.slow_nvlink("train-0", 0.5)
    assert hardware.profile("train-0", "uid-a", H100, 8).nvlink_busbw == 240.0
    assert {f["type"] for f in hardware.faults("train-0")} == {"versions", "nvlink_slow"}
    hardware.repair("train-0")
    assert hardware.faults("train-0") == []


def test_query_gpu_count_and_aliases() -> None:
    argv = ["nvidia-smi", "--query-gpu=count,gpu_name,gpu_bus_id", "--format=csv"]
    rows = list(
        csv.reader(io.StringIO(smi.run(argv, profile(), ALL[:6]).output), skipinitialspace=True)
    )
    assert rows[0] == ["count", "name", "pci.bus_id"]
    assert {r[0] for r in rows[1:]} == {"6"} and len(rows) == 7


def test_gpu_uuids_are_rfc_4122_version_5_as_the_telemetry_always_named_them() -> None:
    """The hand-cut UUID (for speed at 10,000 nodes) is uuid.uuid5's, byte for byte."""
    for node, index, generation, key in (
        ("h100-train-0001", 7, 0, "h100-train-0001/7"),
        ("n", 3, 2, "n#2/3"),
    ):
        expected = f"GPU-{uuid.uuid5(hardware._UUID_NAMESPACE, key)}"
        assert gpu_uuid(node, index, generation) == expected


class HealthyNode:
    """NodeRepairs for one healthy 8-GPU node."""

    def reset_gpu(self, node: str, gpu: int) -> str | None:
        return None

    def reboot(self, node: str) -> None:
        return None

    def faulty_gpus(self, node: str) -> dict[int, str]:
        return {}

    def gpu_count(self, node: str) -> int:
        return 8

    def inventory(self, node: str) -> Inventory:
        return Inventory(profile(), frozenset(), frozenset())


def job(*argv: str) -> dict[str, object]:
    return {"spec": {"containers": [{"command": list(argv)}]}}


@pytest.mark.parametrize(
    ("argv", "seconds"),
    [
        (("dcgmi", "diag", "-r", "3", "-j"), DIAG_SECONDS[3]),
        (("all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "8"), ALL_REDUCE_SECONDS),
        (("nvidia-smi", "--gpu-reset", "-i", "2"), RESET_SECONDS),
    ],
)
def test_the_time_scale_shortens_a_programs_run_and_nothing_else(
    argv: tuple[str, ...], seconds: float
) -> None:
    realistic = HostPrograms(HealthyNode()).run(job(*argv), "h100-train-0")
    fast = HostPrograms(HealthyNode(), time_scale=0.2).run(job(*argv), "h100-train-0")
    assert realistic is not None and fast is not None
    assert realistic.seconds == seconds
    assert fast.seconds == pytest.approx(seconds * 0.2)
    assert (fast.exit_code, fast.output) == (realistic.exit_code, realistic.output)
    assert HostPrograms(HealthyNode(), time_scale=0.2).run(job("sleep", "infinity"), "n") is None


def test_the_time_scale_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        HostPrograms(HealthyNode(), time_scale=0)


class TwoNodes(HealthyNode):
    """Two healthy 8-GPU nodes; `h100-train-1` has `down` IB ports."""

    def __init__(self, down: frozenset[str] = frozenset()) -> None:
        self._down = down

    def inventory(self, node: str) -> Inventory:
        if node not in ("h100-train-0", "h100-train-1"):
            raise LookupError(node)
        down = self._down if node == "h100-train-1" else frozenset()
        return Inventory(build_profile(node, f"uid-{node}", 0, H100, 8), frozenset(), down)


MPI = (
    *("mpirun", "--allow-run-as-root", "-np", "16", "-H", "h100-train-0:8,h100-train-1:8"),
    *("all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "1"),
)


def test_mpirun_runs_all_reduce_across_two_nodes_in_the_multi_node_layout() -> None:
    run = HostPrograms(TwoNodes()).run(job(*MPI), "h100-train-0")
    assert run is not None and run.exit_code == 0
    found = read_nccl(run.output)
    devices = found["devices"]
    assert isinstance(devices, list) and len(devices) == 16
    assert [d[0] for d in devices] == list(range(16))
    assert {d[1] for d in devices[:8]} == {"h100-train-0"}
    assert {d[1] for d in devices[8:]} == {"h100-train-1"}
    locals_ = re.findall(r"on +h100-train-1 device +(\d+) ", run.output)
    assert locals_ == [str(i) for i in range(8)]  # device numbers restart on each node
    assert "nThread 1 nGpus 1 " in run.output
    rows = found["rows"]
    assert isinstance(rows, list)
    peak = min(rows[-1]["oop_busbw"], rows[-1]["ip_busbw"])
    rails = nccl.network_busbw(nccl.Host("x", profile(), ALL, 8))
    assert rails * 0.9 < peak <= rails


def test_a_down_rail_on_the_peer_slows_the_pair_and_an_unknown_host_fails() -> None:
    ok = HostPrograms(TwoNodes()).run(job(*MPI), "h100-train-0")
    assert ok is not None
    healthy = read_nccl(ok.output)
    slowed = HostPrograms(TwoNodes(frozenset({"mlx5_3", "mlx5_5"}))).run(job(*MPI), "h100-train-0")
    assert slowed is not None
    rows_ok, rows_slow = healthy["rows"], read_nccl(slowed.output)["rows"]
    assert isinstance(rows_ok, list) and isinstance(rows_slow, list)
    assert rows_slow[-1]["oop_busbw"] < rows_ok[-1]["oop_busbw"] * 0.8
    gone = [a.replace("h100-train-1:8", "h100-train-9:8") for a in MPI]
    missing = HostPrograms(TwoNodes()).run(job(*gone), "h100-train-0")
    assert missing is not None and missing.exit_code == 1
    assert "Could not resolve hostname h100-train-9" in missing.output
