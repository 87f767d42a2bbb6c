"""The GPUs a validation's inventory read (`nvidia-smi --query-gpu=index,name,uuid,serial,
pci.bus_id,driver_version,vbios_version,…`, judged by actions/burnin.py and kept on the validate
step's timeline line), as the ledger's identities: each GPU's UUID, PCI address and index with
its board serial, model, VBIOS and driver. Pure: remediation/machine_hold.py hands them to the
ledger, which writes only what changed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from remediator.ledger.identity import GpuIdentity, _known, pci

INVENTORY_CHECK = "inventory"  # actions/burnin.py INVENTORY


def inventory_gpus(detail: Mapping[str, Any]) -> list[GpuIdentity]:
    """The GPUs of the inventory check on a `validate_done`/`validate_failed` line; none when the
    check did not run or its output did not parse (a failed verdict with no GPUs)."""
    for check in detail.get("checks") or ():
        if isinstance(check, Mapping) and check.get("check") == INVENTORY_CHECK:
            found = (_gpu(raw) for raw in check.get("gpus") or () if isinstance(raw, Mapping))
            return [gpu for gpu in found if gpu is not None]
    return []


def _gpu(raw: Mapping[str, Any]) -> GpuIdentity | None:
    uuid = _text(raw.get("uuid"))
    if uuid is None or not uuid.startswith("GPU-"):
        return None
    index = raw.get("index")
    return GpuIdentity(
        uuid=uuid,
        pci_bus_id=pci(_text(raw.get("pci_bus_id"))),
        index=index if isinstance(index, int) and not isinstance(index, bool) else None,
        serial=_text(raw.get("serial")),
        model=_text(raw.get("model")),
        vbios=_text(raw.get("vbios")),
        driver=_text(raw.get("driver")),
    )


def _text(value: Any) -> str | None:
    """nvidia-smi's value, or None for its ways of saying it has none (`[N/A]`)."""
    return _known(value) if isinstance(value, str) else None
