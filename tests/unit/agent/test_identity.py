"""The agent's hardware identity (issue #28): the DMI serial file, nvidia-smi's CSV, and the
labels an XID signal carries of them; the ledger takes the machine and the GPU's serial and
VBIOS from those labels."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from remediator.agent import report
from remediator.agent.follow import Entry
from remediator.agent.gpus import GpuInfo
from remediator.agent.identity import SMI_COMMAND, host_hardware, read_identity
from remediator.agent.runner import Agent, AgentConfig
from remediator.ledger.identity import pci
from remediator.ledger.store import Ledger
from remediator.signals.model import Signal
from remediator.signals.xid import parse_kernel_line
from remediator.sim.node import driver
from remediator.sim.node import smi as sim_nvidia_smi
from remediator.sim.node.hardware import DEFAULT_MODEL, build_profile
from remediator.store import db
from remediator.web.agents import HeartbeatIn

UUID = "GPU-6b3a0c1e-1f0e-4a7c-9d2b-3c5e7f9a1b2c"
SMI = (
    "serial, uuid, pci.bus_id, vbios_version\n"
    f"1654922004133, {UUID}, 00000000:2A:00.0, 96.00.74.00.01\n"
)
LINE = (
    "NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
)
T0 = datetime(2026, 4, 1, tzinfo=UTC)


def smi(command: Sequence[str]) -> str:
    assert list(command) == list(SMI_COMMAND)
    return SMI


def test_serials_and_vbios_travel_as_labels_of_the_xid(tmp_path: Path) -> None:
    (tmp_path / "product_serial").write_text("SN-4821\n")
    identity = read_identity(tmp_path / "product_serial", SMI_COMMAND, smi)
    xid = parse_kernel_line(LINE)
    assert xid is not None
    sent = report.xid_signal("gpu-a1", xid, None, UUID, T0, identity.labels(xid.pci))
    assert sent["labels"]["dmi_serial"] == "SN-4821"
    assert sent["labels"]["gpu_serial"] == "1654922004133"
    assert sent["labels"]["vbios"] == "96.00.74.00.01"


def test_what_cannot_be_read_stays_unknown(tmp_path: Path) -> None:
    def broken(command: Sequence[str]) -> str:
        raise subprocess.CalledProcessError(9, list(command))

    identity = read_identity(tmp_path / "absent", SMI_COMMAND, broken)
    assert identity.dmi_serial is None and identity.gpus == {}
    assert identity.labels("0000:2a:00") == {}
    (tmp_path / "blank").write_text("To Be Filled By O.E.M.\n")
    assert read_identity(tmp_path / "blank", None).dmi_serial is None


def test_the_ledger_learns_the_machine_and_the_gpus_serials(
    sqlite_head_template: Path, tmp_path: Path
) -> None:
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    engine = db.make_engine(f"sqlite:///{tmp_path / 'remediator.db'}")
    ledger = Ledger(db.make_session_factory(engine), "c1")
    (tmp_path / "product_serial").write_text("SN-4821\n")
    identity = read_identity(tmp_path / "product_serial", SMI_COMMAND, smi)
    xid = parse_kernel_line(LINE)
    assert xid is not None
    sent = report.xid_signal("gpu-a1", xid, None, UUID, T0, identity.labels(xid.pci))
    ledger.resolve([Signal.model_validate(sent)])
    # The providerID's id never replaces the DMI serial the agent read.
    ledger.observe_machine("gpu-a1", "metal3:ns:host-1", T0)
    assert ledger.machine_of("gpu-a1") == "dmi:SN-4821"
    life = ledger.gpu(UUID)
    assert life is not None
    assert (life.gpu.serial, life.gpu.vbios) == ("1654922004133", "96.00.74.00.01")
    assert life.placements[-1].machine_id == "dmi:SN-4821"
    engine.dispose()


def test_nvidia_smis_driver_travels_with_the_board_serial_and_vbios(tmp_path: Path) -> None:
    """The simulator's nvidia-smi answers the agent's own query: the driver version is read
    with the board serial and VBIOS, sent in the heartbeat the push API takes, and labelled on
    the XID."""
    profile = build_profile("gpu-a1", "uid-1", 0, DEFAULT_MODEL, 2)

    def sim_smi(command: Sequence[str]) -> str:
        answer = sim_nvidia_smi.query(command, profile, [0, 1])
        assert answer.exit_code == 0, answer.output
        return answer.output

    identity = read_identity(tmp_path / "absent", SMI_COMMAND, sim_smi)
    gpu = profile.gpu(1)
    key = pci(gpu.pci_bus_id)
    assert key is not None
    host = host_hardware(identity, {key: GpuInfo(key, 1, gpu.uuid, profile.model)})
    sent = next(g for g in host.wire()["gpus"] if g["uuid"] == gpu.uuid)
    assert (sent["serial"], sent["vbios"], sent["driver"]) == (
        gpu.serial,
        profile.vbios_version,
        profile.driver_version,
    )
    body = report.heartbeat("gpu-a1", "a", "1", T0, {}, host, whole=True)
    taken = HeartbeatIn.model_validate(body).hardware
    assert taken is not None
    assert {g.uuid: g.driver for g in taken.host().gpus}[gpu.uuid] == profile.driver_version
    assert identity.labels(key)["driver"] == profile.driver_version


def test_the_xid_signal_carries_the_kernel_line_the_agent_read(tmp_path: Path) -> None:
    """The whole line as the kernel logged it (what an RMA's xid.log shows), not only the
    text after the code."""
    root = tmp_path / "host"
    driver.attach(root, DEFAULT_MODEL, UUID, "00000000:2A:00.0", 3)
    agent = Agent(
        AgentConfig(
            node="gpu-a1",
            controller_url="http://127.0.0.1:9",
            state_dir=tmp_path / "state",
            driver_dir=root / driver.GPUS_DIR,
            dmi_serial_file=tmp_path / "absent",
            smi_command=None,
            boot_id_file=tmp_path / "no-boot-id",
        )
    )
    try:
        (sent,) = agent.handle([Entry("1", LINE, T0.timestamp())])
    finally:
        agent.client.close()
        agent.queue.close()
    assert sent["labels"]["line"] == LINE
    assert sent["labels"]["message"] == "GPU has fallen off the bus."
    assert Signal.model_validate(sent).labels["line"] == LINE
