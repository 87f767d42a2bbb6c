"""What the RMA step asks the hardware ledger, through one narrow protocol: the facts it holds
on a GPU or a machine (serials, model, driver and VBIOS versions) and where the GPU sat when.
The ledger (remediator/ledger/) answers it; the step never joins its tables itself."""

from __future__ import annotations

from typing import Protocol

from remediator.rma.bundle import Hardware
from remediator.rma.model import Target


class HardwareSource(Protocol):
    def machine_of(self, node: str) -> str | None:
        """The machine the node is now (instance id or DMI serial), if the ledger saw it."""
        ...

    def hardware(self, target: Target, hardware_id: str) -> Hardware:
        """What is known of it (an empty Hardware for an id the ledger never saw)."""
        ...

    def remediation_ids(self, target: Target, hardware_id: str) -> list[int]:
        """Every remediation linked to it, in any cluster of this database."""
        ...
