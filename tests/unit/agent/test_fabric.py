"""The agent's fabric reads: `nvidia-smi -q`'s Fabric section, Fabric Manager's state and log,
and the SXid and Fabric Manager signals it sends (checked against the controller's Signal)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from remediator.agent.fabric import (
    parse_fabric,
    parse_fabric_manager_line,
    parse_is_active,
)
from remediator.agent.follow import Entry
from remediator.agent.report import fabric_manager_signal, sxid_signal
from remediator.agent.runner import Agent, AgentConfig
from remediator.signals.model import Signal, SignalKind
from remediator.signals.sxid import parse_sxid_line

NOW = datetime(2026, 12, 2, 7, 0, tzinfo=UTC)
UUID = "7f3c1a2e-5b7d-4c1e-9a0b-2d4e6f8a0b1c"

SMI_Q = f"""
==============NVSMI LOG==============

Timestamp                                 : Wed Dec  2 07:00:00 2026
Driver Version                            : 570.124.06
CUDA Version                              : 12.8

Attached GPUs                             : 2
GPU 00000008:01:00.0
    Product Name                          : NVIDIA GB200
    Fabric
        State                             : Completed
        Status                            : Success
        CliqueId                          : 3
        ClusterUUID                       : {UUID}
        Health
            Bandwidth                     : Full
    Platform Info
        Chassis Serial Number             : 1821224190012
        Slot Number                       : 7
        Tray Index                        : 7
    Processes                             : None

GPU 00000009:01:00.0
    Product Name                          : NVIDIA GB200
    Fabric
        State                             : In Progress
        Status                            : N/A
        CliqueId                          : N/A
        ClusterUUID                       : N/A
        Health
            Bandwidth                     : N/A
    Processes                             : None
"""


def test_the_fabric_section_of_each_gpu() -> None:
    first, second = parse_fabric(SMI_Q)
    assert first.pci == "0008:01:00" and first.registered
    assert (first.clique_id, first.cluster_uuid, first.bandwidth) == (3, UUID, "Full")
    assert second.pci == "0009:01:00" and not second.registered
    assert (second.state, second.status, second.clique_id, second.cluster_uuid) == (
        "In Progress",
        None,
        None,
        None,
    )
    assert parse_fabric("GPU 00000000:18:00.0\n    Product Name : NVIDIA H100\n") == []


def test_fabric_manager_state_and_log() -> None:
    assert parse_is_active("active\n", 0).healthy
    failed = parse_is_active("failed\n", 3)
    assert failed.present and not failed.healthy and failed.state == "failed"
    assert parse_is_active("inactive\n", 4).healthy  # no such unit here: nothing to say
    line = parse_fabric_manager_line(
        "[Dec 02 2026 07:00:01] [ERROR] [tid 4312] detected NVSwitch fatal error 20034 on fid 0"
    )
    assert line is not None and line.level == "ERROR"
    assert line.message == "detected NVSwitch fatal error 20034 on fid 0"
    assert parse_fabric_manager_line("[Dec 02 2026 07:00:01] [INFO] [tid 4312] started") is None
    assert parse_fabric_manager_line("Fabric Manager version 570.124.06") is None


def test_signals_the_controller_accepts() -> None:
    fabric = parse_fabric(SMI_Q)[0]
    fatal = parse_sxid_line(
        "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up"
    )
    assert fatal is not None
    signal = Signal.model_validate(sxid_signal("nvl-r0-t07", fatal, fabric, NOW))
    assert signal.kind is SignalKind.SXID and signal.code == 20034
    assert signal.labels == {
        "message": "Link 48 LTSSM Fault Up",
        "domain": UUID,
        "clique": "3",
        "switch": "1",
        "pci": "0000:06:00.0",
        "link": "48",
        "fatal": "true",
        "impact": "port",
        "name": "LTSSM fault up: the link went down from active",
    }
    raw = parse_sxid_line("nvidia-nvswitch1: SXid (PCI:00")
    assert raw is not None
    kept = Signal.model_validate(sxid_signal("nvl-r0-t07", raw, None, NOW))
    assert kept.code is None and kept.labels["raw"] == "nvidia-nvswitch1: SXid (PCI:00"
    assert kept.labels["fatal"] == "unknown" and kept.labels["impact"] == "unknown"
    unknown = parse_sxid_line("nvidia-nvswitch4: SXid (PCI:0000:09:00.0): 31337, Fatal, Link 7 x")
    assert unknown is not None
    shown = Signal.model_validate(sxid_signal("nvl-r0-t07", unknown, None, NOW))
    assert shown.code == 31337 and shown.labels["impact"] == "unknown"
    down = Signal.model_validate(
        fabric_manager_signal("nvl-r0-t07", NOW, state=parse_is_active("failed\n", 3))
    )
    assert down.kind is SignalKind.FABRIC_MANAGER and down.code == 1
    assert down.labels == {"state": "failed"}


def test_the_agent_reports_fabric_manager_changes_and_log_errors(tmp_path: Path) -> None:
    """With the real commands replaced by shell one-liners: nothing while Fabric Manager is
    active; a signal when it fails and one when it is back; one per error line appended to its
    log after the agent started (not its history); the tray's domain then labels its SXids."""
    smi = tmp_path / "smi-q.txt"
    smi.write_text(SMI_Q)
    state = tmp_path / "fm-state"
    state.write_text("active")
    log = tmp_path / "fabricmanager.log"
    log.write_text("[Dec 02 2026 06:00:00] [ERROR] [tid 1] an old error, before the agent\n")
    agent = Agent(
        AgentConfig(
            node="nvl-r0-t07",
            controller_url="http://127.0.0.1:9",
            state_dir=tmp_path / "state",
            boot_id_file=tmp_path / "no-boot-id",
            driver_dir=tmp_path / "no-driver",
            fabric_smi_command=("cat", str(smi)),
            fabric_manager_command=(
                "sh",
                "-c",
                f'cat {state}; echo; [ "$(cat {state})" = active ] || exit 3',
            ),
            fabric_manager_log=log,
        )
    )
    try:
        assert agent.check_fabric() == []
        state.write_text("failed")
        with log.open("a") as f:
            f.write("[Dec 02 2026 07:00:01] [ERROR] [tid 9] detected NVSwitch fatal error 20034\n")
            f.write("[Dec 02 2026 07:00:01] [INFO] [tid 9] retraining\n")
        failed = agent.check_fabric()
        assert [(s["code"], s["labels"]) for s in failed] == [
            (1, {"state": "failed"}),
            (1, {"level": "ERROR", "message": "detected NVSwitch fatal error 20034"}),
        ]
        state.write_text("active")
        assert [(s["code"], s["labels"]) for s in agent.check_fabric()] == [
            (0, {"state": "active"})
        ]
        assert agent.check_fabric() == []
        assert len(agent.queue) == 3
        line = "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up"
        [signal] = agent.handle([Entry("1:0", line, None)])
        assert signal["labels"]["domain"] == UUID and signal["labels"]["clique"] == "3"
    finally:
        agent.queue.close()
        agent.client.close()
