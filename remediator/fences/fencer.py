"""How a step asks for a fence: through a Fencer, never by cordoning or releasing itself. The
fence owner (owner.py) is the one the controller plugs in: it writes this store's identity on
every mark and refuses to lift a fence something else still requires. `DirectFencer` serves a
service run without an owner (a single step under test)."""

from __future__ import annotations

from typing import Protocol

from remediator.actions.outcome import Outcome
from remediator.actions.quarantine import Why, quarantine
from remediator.actions.release import release
from remediator.kube.client import KubeClient


class Fencer(Protocol):
    def fence(self, node: str, why: Why, *, dry_run: bool = False) -> Outcome: ...

    def unfence(self, node: str, remediation_id: str) -> Outcome: ...


class DirectFencer:
    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube

    def fence(self, node: str, why: Why, *, dry_run: bool = False) -> Outcome:
        return quarantine(self._kube, node, why, dry_run=dry_run)

    def unfence(self, node: str, remediation_id: str) -> Outcome:
        return release(self._kube, node, remediation_id)
