"""The NVSwitch SXid catalog and the switch driver's kernel-log lines."""

from __future__ import annotations

from remediator.signals.sxid import CATALOG, SxidImpact, lookup, parse_sxid_line

# Lines as the NVSwitch driver logs them (a GPU falling off the bus on an NVSwitch system).
FATAL = "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up"
NON_FATAL = "nvidia-nvswitch0: SXid (PCI:0000:C3:00.0): 11012, Non-fatal, Link 36 ingress SBE"
SEVERITY = "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Severity 1 Engine instance 60 Sub"
DATA = "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Data {0x10000000, 0x00000000}"


def test_the_catalog_sorts_codes_by_reach() -> None:
    assert lookup(20034) is not None and lookup(20034).impact is SxidImpact.PORT  # type: ignore[union-attr]
    assert lookup(22003) is not None and lookup(22003).impact is SxidImpact.FABRIC  # type: ignore[union-attr]
    assert lookup(11012) is not None and not lookup(11012).fatal  # type: ignore[union-attr]
    assert lookup(99999) is None
    assert all(info.fatal == (info.impact in ("port", "fabric")) for info in CATALOG.values())
    assert all(info.name and info.action for info in CATALOG.values())


def test_a_fatal_line_names_switch_pci_code_and_link() -> None:
    sxid = parse_sxid_line("[6781753.400584] " + FATAL)
    assert sxid is not None and sxid.raw is None and not sxid.detail
    assert (sxid.switch, sxid.pci, sxid.code, sxid.fatal, sxid.link) == (
        1,
        "0000:06:00.0",
        20034,
        True,
        48,
    )
    assert sxid.message == "Link 48 LTSSM Fault Up"
    other = parse_sxid_line(NON_FATAL)
    assert other is not None and other.fatal is False and other.pci == "0000:c3:00.0"


def test_detail_lines_belong_to_the_error_before_them() -> None:
    for line in (SEVERITY, DATA):
        sxid = parse_sxid_line(line)
        assert sxid is not None and sxid.detail and sxid.code == 20034 and sxid.fatal is None


def test_a_line_that_does_not_parse_is_kept_raw() -> None:
    for line in (
        "nvidia-nvswitch3: SXid (PCI:0000:08:0",  # cut short
        "nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 20034, Sideways, Link 2",  # unknown severity
        "nvidia-nvswitch: SXid garbled",
    ):
        sxid = parse_sxid_line(line)
        assert sxid is not None and sxid.raw == line and sxid.fatal is None, line
    assert parse_sxid_line("NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, gone") is None
    assert parse_sxid_line("nvidia-nvswitch1: probe done") is None


def test_an_unknown_code_keeps_the_drivers_verdict() -> None:
    sxid = parse_sxid_line("nvidia-nvswitch4: SXid (PCI:0000:09:00.0): 31337, Fatal, Link 7 new")
    assert sxid is not None and sxid.code == 31337 and sxid.fatal is True and lookup(31337) is None
