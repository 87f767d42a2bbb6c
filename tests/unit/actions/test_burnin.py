"""The validation checks' parsers and verdicts against samples in the programs' real layouts
(samples/): nccl-tests' table, `nvidia-smi --query-gpu` CSV and banner, `ibstat`, DCGM JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from remediator.actions import burnin
from remediator.actions.inventory import (
    Inventory,
    InventoryUnreadable,
    parse_ibstat,
    parse_query_gpu,
    parse_smi_header,
)
from remediator.actions.nccl import NcclUnreadable, parse_all_reduce

SAMPLES = Path(__file__).parent / "samples"
NCCL = (SAMPLES / "all_reduce_perf_h100x8.txt").read_text()
IBSTAT = (SAMPLES / "ibstat_4x400.txt").read_text()
IBSTAT_UP = IBSTAT.replace("State: Down", "State: Active").replace("Rate: 10\n", "Rate: 400\n")
GPUS = (SAMPLES / "query_gpu_h100x8.csv").read_text()
BANNER = (SAMPLES / "nvidia_smi_banner.txt").read_text()
H100 = "NVIDIA H100 80GB HBM3"


def inventory(gpus: str = GPUS, ib: str = IBSTAT_UP) -> Inventory:
    read = burnin.read_inventory({"gpus": gpus, "smi": BANNER, "ib": ib})
    assert isinstance(read, Inventory)
    return read


def test_all_reduce_reads_the_largest_message_and_the_summary() -> None:
    report = parse_all_reduce(NCCL)
    assert len(report.rows) == 31
    assert report.peak.size == 8589934592
    assert report.peak.busbw == 470.5  # the lower of out-of-place and in-place
    assert report.avg_busbw == 121.337
    assert report.out_of_bounds == 0 and report.wrong == 0
    assert report.gpus == 8 and report.ranks == 8


@pytest.mark.parametrize(
    "broken",
    [
        "",
        "all_reduce_perf: error while loading shared libraries: libnccl.so.2\n",
        NCCL.split("# Out of bounds")[0],  # killed before its summary
        NCCL.replace("# Avg bus bandwidth    : 121.337", ""),
    ],
)
def test_all_reduce_output_that_is_not_a_report_is_unreadable(broken: str) -> None:
    with pytest.raises(NcclUnreadable):
        parse_all_reduce(broken)


def test_nccl_passes_above_the_floor_and_fails_below_it() -> None:
    assert burnin.nccl_verdict(NCCL, H100, {H100: 400.0}).passed
    slow = burnin.nccl_verdict(NCCL, H100, {H100: 480.0})
    assert not slow.passed
    assert "470.5 GB/s" in slow.reason and "480" in slow.reason
    assert slow.evidence["busbw_gbps"] == 470.5


def test_nccl_wrong_values_fail_whatever_the_bandwidth() -> None:
    wrong = NCCL.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 3 FAILED")
    verdict = burnin.nccl_verdict(wrong, H100, {H100: 1.0})
    assert not verdict.passed and "3 wrong" in verdict.reason


def test_unreadable_output_fails_with_its_raw_tail_never_passes() -> None:
    verdict = burnin.nccl_verdict("Segmentation fault (core dumped)\n", H100, {H100: 1.0})
    assert not verdict.passed
    assert verdict.evidence["raw_tail"] == "Segmentation fault (core dumped)\n"
    dcgm = burnin.dcgm_verdict("Error: unable to connect to host engine\n", 3, 255)
    assert not dcgm.passed and "raw_tail" in dcgm.evidence


def test_a_model_without_a_floor_is_skipped_with_a_warning_neither_pass_nor_failure() -> None:
    verdict = burnin.nccl_verdict(NCCL, "NVIDIA GB200", {H100: 400.0})
    assert not verdict.passed and verdict.evidence["skipped"] is True
    assert verdict.evidence["warning"] is True and verdict.evidence["busbw_gbps"] == 470.5
    assert verdict.reason.startswith(
        "nccl skipped: no busbw_floor is configured for GPU model 'NVIDIA GB200'"
    )
    pair = burnin.nccl_verdict(NCCL, "NVIDIA GB200", {H100: 330.0}, burnin.NCCL_PAIR)
    assert pair.evidence["skipped"] is True and "no pair_busbw_floor" in pair.reason


def test_a_gap_skips_only_the_floor_a_broken_run_still_fails() -> None:
    wrong = NCCL.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 3 FAILED")
    for output in (wrong, "Segmentation fault (core dumped)\n"):
        verdict = burnin.nccl_verdict(output, "NVIDIA GB200", {H100: 400.0})
        assert not verdict.passed and not verdict.evidence.get("skipped"), verdict


def test_the_floor_is_found_under_the_nodes_label_spelling_too() -> None:
    verdict = burnin.nccl_verdict(NCCL, "NVIDIA-H100-80GB-HBM3", {H100: 400.0})
    assert verdict.passed and verdict.evidence["floor_gbps"] == 400.0


def test_query_gpu_csv_with_and_without_header() -> None:
    gpus = parse_query_gpu(GPUS)
    assert len(gpus) == 8
    assert gpus[3].pci_bus_id == "00000000:5D:00.0" and gpus[3].serial == "1652023018412"
    assert gpus[0].driver == "550.90.07" and gpus[0].vbios == "96.00.99.00.01"
    assert gpus[0].memory_mib == 81559
    noheader = "\n".join(GPUS.splitlines()[1:])
    assert parse_query_gpu(noheader) == gpus


@pytest.mark.parametrize(
    "broken",
    ["", "No devices were found\n", 'Field "vbios" is not a valid field to query.\n'],
)
def test_query_gpu_refusals_are_unreadable(broken: str) -> None:
    with pytest.raises(InventoryUnreadable):
        parse_query_gpu(broken)


def test_the_banner_gives_driver_and_cuda() -> None:
    assert parse_smi_header(BANNER) == ("550.90.07", "12.4")
    with pytest.raises(InventoryUnreadable):
        parse_smi_header("NVIDIA-SMI has failed because it couldn't communicate with the driver")


def test_ibstat_lists_every_port_with_state_rate_and_link_layer() -> None:
    ports = parse_ibstat(IBSTAT)
    assert [(p.ca, p.state, p.rate, p.link_layer) for p in ports] == [
        ("mlx5_0", "Active", 400, "InfiniBand"),
        ("mlx5_1", "Down", 10, "InfiniBand"),
        ("mlx5_2", "Active", 400, "InfiniBand"),
        ("mlx5_3", "Active", 100, "Ethernet"),
    ]
    with pytest.raises(InventoryUnreadable):
        parse_ibstat("ibpanic: [1234] main: stat of IB device 'mlx5_0' failed: No such file\n")


def test_summary_leaves_ethernet_ports_out() -> None:
    summary = inventory().summary
    assert summary == {
        "gpu_count": 8,
        "gpu_model": H100,
        "driver": "550.90.07",
        "vbios": "96.00.99.00.01",
        "cuda": "12.4",
        "ib_ports": 3,
        "ib_active": 3,
        "ib_rate": 400,
    }


def test_a_down_ib_port_fails_even_without_a_baseline() -> None:
    verdict = burnin.inventory_verdict(inventory(ib=IBSTAT), None)
    assert not verdict.passed and "mlx5_1 port 1 is Down" in verdict.reason


def _slow(port: str, rate: int, ib: str = IBSTAT_UP) -> str:
    """`ibstat` with one CA's port trained down to `rate` (still Active, as such a link shows)."""
    head, _, rest = ib.partition(f"CA '{port}'")
    return head + f"CA '{port}'" + rest.replace("Rate: 400\n", f"Rate: {rate}\n", 1)


def test_a_port_slower_than_the_others_keeps_the_nodes_rate_and_is_named() -> None:
    node = inventory(ib=_slow("mlx5_2", 200))
    assert node.summary["ib_rate"] == 400
    assert [(p.ca, p.rate) for p in node.off_rate_ports(None)] == [("mlx5_2", 200)]
    assert node.off_rate_ports(None) == node.off_rate_ports(400)
    assert inventory().off_rate_ports(None) == ()


def test_a_slow_active_port_fails_even_without_a_baseline() -> None:
    for baseline in (None, burnin.baseline_of({}, {})):
        verdict = burnin.inventory_verdict(inventory(ib=_slow("mlx5_2", 200)), baseline)
        assert not verdict.passed
        assert verdict.reason == (
            "inventory: IB mlx5_2 port 1 is Active at 200 Gb/s, "
            "expected 400 Gb/s (the node's other ports)"
        )
        assert verdict.evidence["ib_off_rate"] == [
            {
                "ca": "mlx5_2",
                "port": 1,
                "rate": 200,
                "expected": 400,
                "against": "the node's other ports",
            }
        ]


def test_a_slow_port_is_named_against_the_pools_rate_not_as_a_missing_one() -> None:
    good = inventory().summary
    baseline = burnin.baseline_of({"n1": good, "n2": good}, {})
    verdict = burnin.inventory_verdict(inventory(ib=_slow("mlx5_0", 200)), baseline)
    assert not verdict.passed and "None" not in verdict.reason
    assert verdict.reason == (
        "inventory: IB mlx5_0 port 1 is Active at 200 Gb/s, expected 400 Gb/s (the pool's baseline)"
    )


def test_ports_all_at_a_lower_rate_than_the_pin_are_each_named() -> None:
    both = _slow("mlx5_2", 200, _slow("mlx5_0", 200, IBSTAT_UP))
    slow = _slow("mlx5_1", 200, both)
    verdict = burnin.inventory_verdict(inventory(ib=slow), burnin.baseline_of({}, {"ib_rate": 400}))
    assert not verdict.passed and "ib_rate is" not in verdict.reason
    assert [p["ca"] for p in verdict.evidence["ib_off_rate"]] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert "expected 400 Gb/s (the pool's baseline)" in verdict.reason
    # The node agrees with itself, so without the pin nothing is off-rate.
    assert burnin.inventory_verdict(inventory(ib=slow), None).passed


def test_an_active_port_without_a_readable_rate_is_not_a_pass() -> None:
    garbled = IBSTAT_UP.replace("Rate: 400\n", "Rate: ?\n", 1)
    verdict = burnin.inventory_verdict(inventory(ib=garbled), None)
    assert not verdict.passed and "mlx5_0 port 1 is Active at an unreadable rate" in verdict.reason


def test_the_first_node_without_pins_says_it_has_no_baseline() -> None:
    verdict = burnin.inventory_verdict(inventory(), burnin.baseline_of({}, {}))
    assert verdict.passed and "no baseline" in verdict.reason


def test_the_first_node_is_held_to_the_pins() -> None:
    baseline = burnin.baseline_of({}, {"driver": "535.129.03"})
    assert baseline is not None and baseline.source == "pinned in the policy"
    verdict = burnin.inventory_verdict(inventory(), baseline)
    assert not verdict.passed
    assert "driver is 550.90.07, the pool's baseline 535.129.03" in verdict.reason


def test_the_baseline_is_the_pools_majority_and_a_pin_wins() -> None:
    good = inventory().summary
    other = {**good, "driver": "535.129.03"}
    baseline = burnin.baseline_of({"n1": good, "n2": good, "n3": other}, {})
    assert baseline is not None and baseline.values["driver"] == "550.90.07"
    assert burnin.inventory_verdict(inventory(), baseline).passed
    lost_gpu = "\n".join(GPUS.splitlines()[:-1])
    verdict = burnin.inventory_verdict(inventory(gpus=lost_gpu), baseline)
    assert not verdict.passed and "gpu_count is 7, the pool's baseline 8" in verdict.reason
    pinned = burnin.baseline_of({"n1": good, "n2": good}, {"ib_rate": 200})
    assert pinned is not None and pinned.values["ib_rate"] == 200


def test_a_split_pool_has_no_majority_for_that_value() -> None:
    good = inventory().summary
    baseline = burnin.baseline_of({"n1": good, "n2": {**good, "vbios": "96.00.74.00.01"}}, {})
    assert baseline is not None and "vbios" not in baseline.values
    assert baseline.disagreeing == ("vbios",)


def _diag(status: str) -> str:
    result = {"gpu_ids": "2", "status": status, "warnings": [{"warning": "GPU 2: NVLink down"}]}
    return json.dumps(
        {
            "DCGM GPU Diagnostic": {
                "test_categories": [
                    {"category": "Integration", "tests": [{"name": "PCIe", "results": [result]}]}
                ],
                "version": "3.3.5",
            }
        }
    )


def test_dcgm_names_each_failing_test_with_its_gpu() -> None:
    verdict = burnin.dcgm_verdict(_diag("Fail"), 3, 226)
    assert not verdict.passed and verdict.reason == "DCGM level 3: PCIe on GPU 2"
    assert burnin.dcgm_verdict(_diag("Pass"), 3, 0).passed


def test_checks_run_in_order_and_nccl_can_be_left_out() -> None:
    assert burnin.Checks().enabled() == ("inventory", "dcgm", "nccl")
    assert burnin.Checks(nccl=False).enabled() == ("inventory", "dcgm")
    argv = burnin.programs("nccl", dcgm_level=3, gpus=8)["allreduce"]
    assert argv == ["all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "8"]


# nccl-tests' own words when the node shows fewer GPUs than `-g` asks (src/util.cu): on stderr,
# then its trace on stdout; the Job's log holds both.
SEVEN_OF_EIGHT = (
    "# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 "
    "iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n"
    "Invalid number of GPUs: 8 requested but only 7 were found.\n"
    "Please check the number of processes and GPUs per process.\n"
    " .. gpu-node-3 pid 4242: Test failure util.cu:681\n"
    " .. gpu-node-3 pid 4242: Test failure common.cu:1290\n"
)


def test_a_run_nccl_tests_refused_says_its_own_reason_not_unreadable() -> None:
    verdict = burnin.nccl_verdict(SEVEN_OF_EIGHT, H100, {H100: 400.0})
    assert not verdict.passed and not verdict.evidence.get("skipped")
    assert verdict.reason == (
        "nccl: all_reduce_perf failed: Invalid number of GPUs: 8 requested but only 7 were found."
    )
    assert verdict.evidence["failure"] == (
        "Invalid number of GPUs: 8 requested but only 7 were found."
    )
    assert verdict.evidence["raw_tail"] == SEVEN_OF_EIGHT


def test_a_cuda_or_nccl_failure_mid_run_is_named_with_its_line() -> None:
    cut = NCCL.split("# Out of bounds")[0]
    crashed = cut + "gpu-node-3: Test NCCL failure common.cu:383 'unhandled system error / '\n"
    verdict = burnin.nccl_verdict(crashed, H100, {H100: 400.0})
    assert not verdict.passed
    assert verdict.reason.endswith(
        "all_reduce_perf failed: gpu-node-3: Test NCCL failure common.cu:383 "
        "'unhandled system error / '"
    )
    # Without nccl-tests' own failure line the output is still unreadable, never a pass.
    assert "output unreadable" in burnin.nccl_verdict(cut, H100, {H100: 400.0}).reason
