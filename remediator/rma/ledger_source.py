"""The hardware ledger (remediator/ledger/) as the RMA step's HardwareSource: serials, model,
driver and VBIOS, where the GPU sat when, and the remediations linked to it."""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from remediator.ledger.store import Ledger, Placement
from remediator.rma.bundle import Hardware
from remediator.rma.model import Target

EVER = datetime(1970, 1, 1, tzinfo=UTC)


def _placement(p: Placement) -> dict[str, Any]:
    row = asdict(p)
    row["from_at"] = p.from_at.isoformat()
    row["to_at"] = p.to_at.isoformat() if p.to_at else None
    return row


class LedgerHardware:
    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger

    def machine_of(self, node: str) -> str | None:
        return self._ledger.machine_of(node)

    def hardware(self, target: Target, hardware_id: str) -> Hardware:
        if target is Target.GPU:
            life = self._ledger.gpu(hardware_id)
            if life is None:
                return Hardware()
            gpu = life.gpu
            facts: dict[str, Any] = {
                "uuid": gpu.uuid,
                "serial": gpu.serial,
                "model": gpu.model,
                "vbios_version": gpu.vbios,
                "driver_version": gpu.driver,
                "first_seen_at": gpu.first_seen_at.isoformat(),
                "last_seen_at": gpu.last_seen_at.isoformat(),
                "faults": gpu.faults,
                "faults_by_xid": {str(k): v for k, v in life.faults_by_xid.items()},
                "swapped_card_conflicts": [
                    {**asdict(c), "at": c.at.isoformat()} for c in life.conflicts
                ],
            }
            return Hardware(facts, [_placement(p) for p in life.placements])
        machine = self._ledger.machine(hardware_id)
        if machine is None:
            return Hardware()
        facts = {
            "id": machine.id,
            "provider_id": machine.provider_id,
            "dmi_serial": machine.dmi_serial,
            "cluster": machine.cluster,
            "node": machine.node,
            "first_seen_at": machine.first_seen_at.isoformat(),
            "last_seen_at": machine.last_seen_at.isoformat(),
            "quarantined_at": machine.quarantined_at.isoformat()
            if machine.quarantined_at
            else None,
        }
        return Hardware(facts, [_placement(p) for p in machine.placements])

    def remediation_ids(self, target: Target, hardware_id: str) -> list[int]:
        gpus = [hardware_id] if target is Target.GPU else []
        machines = [hardware_id] if target is Target.MACHINE else []
        links = self._ledger.remediations_of(EVER, gpus=gpus, machines=machines)
        return sorted({link.ref_id for link in links if link.ref_id is not None})
