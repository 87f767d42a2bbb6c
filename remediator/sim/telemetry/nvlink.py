"""The DCGM exporter's per-link NVLink fields for NVL72 trays, beside the per-GPU totals: for
each of a GPU's 18 links its CRC flit, CRC data, replay and recovery error counters
(`DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L{n}` …, DCGM field ids 400-486) and its state
(`DCGM_FI_DEV_NVLINK_GET_STATE`, field 1508, a link entity: 1 active, 0 inactive), and the
GPU's fabric registration (`DCGM_FI_DEV_FABRIC_MANAGER_STATUS`, `DCGM_FI_DEV_FABRIC_CLIQUE_ID`).

The link entity's label (`nvlink="n"`) was not checked against a real exporter's output."""

from __future__ import annotations

from remediator.sim.rack.fabric import FABRIC_COMPLETED, FABRIC_NOT_STARTED, LINK_UP, Fabric
from remediator.sim.rack.topology import NVLINKS_PER_GPU
from remediator.sim.telemetry.exporters import NodeState

COUNTERS = (
    ("CRC_FLIT_ERROR_COUNT", "Number of NVLink flow-control CRC errors on link {n}."),
    ("CRC_DATA_ERROR_COUNT", "Number of NVLink data CRC errors on link {n}."),
    ("REPLAY_ERROR_COUNT", "Number of NVLink retries on link {n}."),
    ("RECOVERY_ERROR_COUNT", "Number of NVLink recovery errors on link {n}."),
)
FLITS_PER_EVENT = 16  # CRC flit errors a non-fatal SXid on the link's switch counts


def render_nvlink(fabric: Fabric, states: list[NodeState]) -> list[str]:
    trays = []
    for state in states:
        tray = fabric.tray(state.name)
        if tray is not None:
            trays.append((state, tray))
    if not trays:
        return []
    out: list[str] = []

    def family(name: str, kind: str, help_text: str, samples: list[str]) -> None:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(f"{name}{{{sample}" for sample in samples)

    for n in range(NVLINKS_PER_GPU):
        for field, help_text in COUNTERS:
            samples = []
            for state, tray in trays:
                errors = tray.link_errors.get(n, 0)
                value = {
                    "CRC_FLIT_ERROR_COUNT": errors * FLITS_PER_EVENT,
                    "REPLAY_ERROR_COUNT": errors,
                    "RECOVERY_ERROR_COUNT": errors + (1 if n in tray.links_down else 0),
                }.get(field, 0)
                samples += [f"{g.labels}}} {value}" for g in state.gpus if g.healthy_on_bus]
            family(f"DCGM_FI_DEV_NVLINK_{field}_L{n}", "counter", help_text.format(n=n), samples)
    states_ = []
    for state, tray in trays:
        for g in state.gpus:
            if not g.healthy_on_bus:
                continue
            for n in range(NVLINKS_PER_GPU):
                value = 0 if n in tray.links_down else LINK_UP
                states_.append(f'{g.labels},nvlink="{n}"}} {value}')
    family("DCGM_FI_DEV_NVLINK_GET_STATE", "gauge", "NVLink state (1: active).", states_)
    fm = [
        f"{g.labels}}} {FABRIC_COMPLETED if tray.fm_active else FABRIC_NOT_STARTED}"
        for state, tray in trays
        for g in state.gpus
        if g.healthy_on_bus
    ]
    family(
        "DCGM_FI_DEV_FABRIC_MANAGER_STATUS",
        "gauge",
        "The GPU's fabric registration state (3: completed).",
        fm,
    )
    cliques = [
        f"{g.labels}}} {tray.clique}"
        for state, tray in trays
        for g in state.gpus
        if g.healthy_on_bus
    ]
    family("DCGM_FI_DEV_FABRIC_CLIQUE_ID", "gauge", "The GPU's fabric clique id.", cliques)
    return out
