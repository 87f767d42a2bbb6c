from __future__ import annotations

import pytest

from remediator.signals.xid import (
    CATALOG,
    FATAL_ACTIONS,
    Action,
    Cause,
    KernelXid,
    lookup,
    parse_kernel_line,
    parse_pci_uuid_line,
)


def test_catalog_is_large_and_keyed_by_code() -> None:
    assert len(CATALOG) >= 30
    assert all(code == info.code for code, info in CATALOG.items())
    assert all(info.name and info.meaning and info.explanation for info in CATALOG.values())
    assert all(info.causes for info in CATALOG.values())


@pytest.mark.parametrize(
    ("code", "immediate", "investigatory", "fatal"),
    [
        (13, Action.RESTART_APP, Action.WORKFLOW_XID_13, False),
        (31, Action.RESTART_APP, Action.WORKFLOW_XID_31, False),
        (43, Action.IGNORE, Action.CONTACT_SUPPORT, False),
        (45, Action.WORKFLOW_XID_45, Action.IGNORE, False),
        (46, Action.RESET_GPU, Action.CONTACT_SUPPORT, True),
        (48, Action.WORKFLOW_XID_48, Action.WORKFLOW_XID_48, True),
        (54, Action.CHECK_MECHANICALS, Action.CONTACT_SUPPORT, False),
        (62, Action.RESET_GPU, Action.CONTACT_SUPPORT, True),
        (63, Action.IGNORE, Action.IGNORE, False),
        (64, Action.RESET_GPU, Action.CONTACT_SUPPORT, True),
        (74, Action.WORKFLOW_NVLINK_ERR, Action.CONTACT_SUPPORT, True),
        (79, Action.RESTART_BM, Action.CONTACT_SUPPORT, True),
        (92, Action.IGNORE, Action.CONTACT_SUPPORT, False),
        (94, Action.RESTART_APP, Action.IGNORE, False),
        (95, Action.RESET_GPU, Action.IGNORE, True),
        (121, Action.IGNORE, Action.CONTACT_SUPPORT, False),
        (140, Action.RESET_GPU, Action.CONTACT_SUPPORT, True),
        (144, Action.WORKFLOW_NVLINK5_ERR, Action.WORKFLOW_NVLINK5_ERR, True),
        (150, Action.WORKFLOW_NVLINK5_ERR, Action.WORKFLOW_NVLINK5_ERR, True),
        (151, Action.RESTART_VM, Action.CONTACT_SUPPORT, True),
        (154, Action.XID_154, None, False),
        (159, Action.CHECK_UVM, None, False),
    ],
)
def test_actions_follow_nvidias_catalog(
    code: int, immediate: Action, investigatory: Action | None, fatal: bool
) -> None:
    info = lookup(code)
    assert info is not None
    assert (info.immediate, info.investigatory, info.fatal) == (immediate, investigatory, fatal)


def test_fatal_is_exactly_the_reset_or_restart_actions() -> None:
    for info in CATALOG.values():
        assert info.fatal == (info.immediate in FATAL_ACTIONS)


@pytest.mark.parametrize(
    ("code", "cause"),
    [
        (48, Cause.HARDWARE),
        (13, Cause.APPLICATION),
        (79, Cause.THERMAL),
        (154, Cause.INFORMATIONAL),
    ],
)
def test_causes(code: int, cause: Cause) -> None:
    info = lookup(code)
    assert info is not None and cause in info.causes


def test_double_bit_ecc_is_hardware_only() -> None:
    info = lookup(48)
    assert info is not None and info.causes == {Cause.HARDWARE}


def test_engine_families_are_restart_the_app() -> None:
    for code, name in ((70, "CE3"), (86, "OFA0"), (99, "NVJPG1"), (105, "NVJPG7"), (139, "OFA1")):
        info = lookup(code)
        assert info is not None and name in info.name
        assert (info.immediate, info.fatal) == (Action.RESTART_APP, False)


def test_unknown_code() -> None:
    assert lookup(0) is None
    assert lookup(9999) is None


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', "
            "name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 1, SM 0): "
            "Out Of Range Address",
            KernelXid(
                "0000:cb:00",
                13,
                "Graphics SM Warp Exception on (GPC 7, TPC 1, SM 0): Out Of Range Address",
            ),
        ),
        (
            "kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=2314, name=python3, "
            "GPU has fallen off the bus.",
            KernelXid("0000:18:00", 79, "GPU has fallen off the bus.", pid=2314, process="python3"),
        ),
        (
            "NVRM: Xid (PCI:0000:3B:00 GPU-I:05 GPU-CI:01): 94, pid=881, name=train.py, "
            "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x3c04c",
            KernelXid(
                "0000:3b:00",
                94,
                "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x3c04c",
                pid=881,
                process="train.py",
                gpu_instance=5,
                compute_instance=1,
            ),
        ),
        (
            # Older drivers print neither pid nor name.
            "NVRM: Xid (PCI:0000:18:00): 48, An uncorrectable double bit error (DBE) has been "
            "detected on GPU in the framebuffer at partition 6, subpartition 0.",
            KernelXid(
                "0000:18:00",
                48,
                "An uncorrectable double bit error (DBE) has been detected on GPU in the "
                "framebuffer at partition 6, subpartition 0.",
            ),
        ),
        (
            "[ 1234.567890] NVRM: GPU 0000:5d:00.0: GPU has fallen off the bus.",
            KernelXid("0000:5d:00", 79, "GPU has fallen off the bus."),
        ),
    ],
)
def test_parse_kernel_line(line: str, expected: KernelXid) -> None:
    assert parse_kernel_line(line) == expected


@pytest.mark.parametrize(
    "line",
    [
        "",
        "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context",
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.08",
        "NVRM: Xid (PCI:0000:18:00): not-a-number, pid=1, name=x, msg",
        "NVRM: GPU at PCI:0000:18:00: GPU-2c5d6b6a-1234-5678-9abc-def012345678",
    ],
)
def test_lines_without_xid(line: str) -> None:
    assert parse_kernel_line(line) is None


def test_pci_to_uuid_line() -> None:
    line = "NVRM: GPU at PCI:0000:18:00: GPU-2c5d6b6a-1234-5678-9abc-def012345678"
    assert parse_pci_uuid_line(line) == ("0000:18:00", "GPU-2c5d6b6a-1234-5678-9abc-def012345678")
    assert (
        parse_pci_uuid_line("NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.") is None
    )
