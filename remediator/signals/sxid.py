"""NVSwitch SXid catalog and kernel-log parser.

The NVSwitch driver logs its errors as "SXid"s (switch XIDs), one line per error with the
switch, the code, the driver's own verdict (`Fatal` / `Non-fatal`) and usually the link:

    nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up

followed by detail lines for the same error (`20034, Severity 1 Engine instance 48 …`,
`20034, Data {0x…}`). The catalog follows the SXid appendix of NVIDIA's Fabric Manager User Guide
(DU-09883-001): non-fatal errors the hardware corrects, errors fatal to the traffic through one
port, and errors always fatal to the whole fabric. On an NVL72 rack the fabric is the NVLink
domain, so an always-fatal SXid takes the whole domain; a port-fatal one takes the GPUs behind
the port (the NVLink job across the clique breaks either way).

A line that is an SXid but cannot be read is kept raw (`KernelSxid.raw`), never dropped; an
SXid code not in the catalog is reported with the driver's verdict and shown as unknown.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType


class SxidImpact(StrEnum):
    """How far an SXid reaches, as the Fabric Manager guide sorts them."""

    CORRECTED = "corrected"  # the switch corrected it (single-bit ECC): no impact
    WARNING = "warning"  # not fatal itself, but often followed by fatal ones (or cooling)
    PORT = "port"  # fatal to the traffic through one port: the GPUs and jobs using it
    FABRIC = "fabric"  # always fatal to the whole fabric: every GPU and switch needs a reset


@dataclass(frozen=True, slots=True)
class SxidInfo:
    code: int
    name: str
    impact: SxidImpact
    action: str

    @property
    def fatal(self) -> bool:
        return self.impact in (SxidImpact.PORT, SxidImpact.FABRIC)


_CORRECTED_ACTION = "None: the NVSwitch corrected it. Watch the rate; many in a row precede DBEs."
_PORT_ACTION = (
    "Stop the jobs using the port and reset the GPUs and the switch port behind it (on an NVL72 "
    "rack: the clique's trays); if the same SXid returns, inspect and repair the NVSwitch tray."
)
_FABRIC_ACTION = (
    "Fatal to the whole NVLink fabric: stop every job on it and reset all GPUs and NVSwitches "
    "(on an NVL72 rack: fence the domain and repair it as a rack)."
)


def _entries() -> tuple[SxidInfo, ...]:
    corrected = (
        (11012, "Ingress single-bit ECC error"),
        *((c, "Egress single-bit ECC error") for c in (11021, 11022, 11023, 12021, 12023)),
        *((c, "Route single-bit ECC error") for c in (15008, 15011)),
        *((c, "NPORT RAM single-bit ECC error") for c in (19049, 19055, 19057, 19059)),
        *((c, "NPORT RAM single-bit ECC error") for c in (19062, 19065, 19068, 19071)),
        (24001, "Sourcetrack single-bit ECC error"),
        (20009, "NVLink RX short error rate"),
    )
    port = (
        (11004, "Ingress invalid ACL (fabric partition misconfigured)"),
        (12024, "Egress output ECC double-bit error"),
        (12030, "Egress control parity error"),
        (12025, "Egress credit overflow"),
        (12026, "Egress destination request ID error"),
        (12027, "Egress destination response ID error"),
        (12031, "Egress credit parity error"),
        (12032, "Egress flit type mismatch"),
        (14017, "TS ATO timeout"),
        (15001, "Route buffer over/underflow"),
        (15006, "Route transdone over/underflow"),
        (15009, "Route GLT double-bit ECC error"),
        (15010, "Route parity error"),
        (15012, "Route incoming double-bit ECC error"),
        (15013, "Route credit parity error"),
        (19047, "NCISOC header double-bit ECC error"),
        (19048, "NCISOC data double-bit ECC error"),
        (19054, "Header RAM double-bit ECC error"),
        (19056, "DAT0 RAM double-bit ECC error"),
        (19058, "DAT1 RAM double-bit ECC error"),
        (19060, "CREQ RAM header double-bit ECC error"),
        (19061, "CREQ RAM data double-bit ECC error"),
        (19063, "Response RAM header double-bit ECC error"),
        (19064, "Response RAM data double-bit ECC error"),
        (19066, "COM RAM header double-bit ECC error"),
        (19067, "COM RAM data double-bit ECC error"),
        (19069, "RSP1 RAM header double-bit ECC error"),
        (19070, "RSP1 RAM data double-bit ECC error"),
        (20034, "LTSSM fault up: the link went down from active"),
        (22012, "MINION link NA interrupt (broken connection or uncoordinated shutdown)"),
        (24004, "Sourcetrack TCEN0 crumbstore double-bit ECC error"),
        (24005, "Sourcetrack TCEN0 TD crumbstore double-bit ECC error"),
        (24006, "Sourcetrack TCEN1 crumbstore double-bit ECC error"),
        (24007, "Sourcetrack timeout"),
    )
    fabric = (
        (10003, "Host unhandled interrupt"),
        (12020, "Egress sequence ID error"),
        (22003, "MINION halt"),
        (22011, "MINION external error"),
        (23001, "Ingress SRC-VC buffer overflow"),
        (23002, "Ingress SRC-VC buffer underflow"),
        (23003, "Egress DST-VC credit overflow"),
        (23004, "Egress DST-VC credit underflow"),
        (23005, "Ingress packet burst error"),
        (23006, "Ingress packet sticky error"),
        (23007, "Possible bubbles at ingress"),
        (23008, "Ingress packet invalid destination"),
        (23009, "Ingress packet parity error"),
        (23010, "Ingress SRC-VC buffer overflow"),
        (23011, "Ingress SRC-VC buffer underflow"),
        (23012, "Egress DST-VC credit overflow"),
        (23013, "Egress DST-VC credit underflow"),
        (23014, "Ingress packet burst error"),
        (23015, "Ingress packet sticky error"),
        (23016, "Possible bubbles at ingress"),
        (23017, "Ingress credit parity error"),
    )
    warning = (
        (10001, "Host privileged access error", "None by itself; watch for fatal SXids after it."),
        (10002, "Host privileged access timeout", "None by itself; watch for fatal SXids."),
        (10004, "Thermal event start", "Check the rack's cooling: links drop to one lane."),
        (10005, "Thermal event end", "Check the rack's cooling."),
    )
    return (
        *(SxidInfo(c, n, SxidImpact.CORRECTED, _CORRECTED_ACTION) for c, n in corrected),
        *(SxidInfo(c, n, SxidImpact.PORT, _PORT_ACTION) for c, n in port),
        *(SxidInfo(c, n, SxidImpact.FABRIC, _FABRIC_ACTION) for c, n in fabric),
        *(SxidInfo(c, n, SxidImpact.WARNING, a) for c, n, a in warning),
    )


def _index(entries: tuple[SxidInfo, ...]) -> Mapping[int, SxidInfo]:
    catalog: dict[int, SxidInfo] = {}
    for info in entries:
        if info.code in catalog:
            raise ValueError(f"SXid {info.code} is listed twice in the catalog")
        catalog[info.code] = info
    return MappingProxyType(catalog)


CATALOG: Mapping[int, SxidInfo] = _index(_entries())


def lookup(code: int) -> SxidInfo | None:
    return CATALOG.get(code)


@dataclass(frozen=True, slots=True)
class KernelSxid:
    """One SXid line. `raw` is set (and the other fields may be None) when the line is an SXid
    but not one this parser can read: kept so it is shown, never dropped. `detail` marks the
    lines that add register detail to an error already reported (no new error)."""

    switch: int | None
    pci: str | None
    code: int | None
    fatal: bool | None
    link: int | None
    message: str
    raw: str | None = None
    detail: bool = False


_SXID = re.compile(r"nvidia-nvswitch(?P<switch>\d*): SXid\b")
# nvidia-nvswitch%d: SXid (PCI:%04x:%02x:%02x.%x): %05d, {Fatal|Non-fatal}, [Link %d ]%s
_HEADER = re.compile(
    r"nvidia-nvswitch(?P<switch>\d+): SXid \(PCI:(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:"
    r"[0-9a-fA-F]{2}\.[0-7])\): (?P<code>\d+),\s*(?P<rest>.*?)\s*$"
)
_SEVERITY = re.compile(r"(?P<severity>Fatal|Non-fatal|Nonfatal|Non-Fatal),\s*(?P<message>.*)$")
_LINK = re.compile(r"\bLink (?P<link>\d+)\b")
_DETAIL = re.compile(r"^(Severity \d+ Engine instance|Data \{)")


def parse_sxid_line(line: str) -> KernelSxid | None:
    """None when the line is no SXid; otherwise what it says, or its raw text."""
    found = _SXID.search(line)
    if found is None:
        return None
    raw = line[found.start() :].strip()
    header = _HEADER.search(line)
    if header is None:
        switch = int(found["switch"]) if found["switch"] else None
        return KernelSxid(switch, None, None, None, None, raw, raw=raw)
    switch, pci, code = int(header["switch"]), header["pci"].lower(), int(header["code"])
    rest = header["rest"]
    if _DETAIL.match(rest):
        return KernelSxid(switch, pci, code, None, None, rest, detail=True)
    severity = _SEVERITY.match(rest)
    if severity is None:
        return KernelSxid(switch, pci, code, None, None, rest, raw=raw)
    link = _LINK.search(severity["message"])
    return KernelSxid(
        switch,
        pci,
        code,
        severity["severity"] == "Fatal",
        int(link["link"]) if link else None,
        severity["message"],
    )
