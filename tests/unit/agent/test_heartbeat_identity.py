"""The host's identity in the agent's heartbeat (issue #28): whole on the first heartbeat, a
digest after, whole again when the controller's answer asks; the body is what the push API
validates, and an odd field read from the host never gets every heartbeat refused."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from remediator.agent import report
from remediator.agent.gpus import GpuInfo
from remediator.agent.heartbeat import Beat, judge, whole_due
from remediator.agent.identity import HostIdentity, host_hardware
from remediator.agent.runner import Agent, AgentConfig
from remediator.ledger.identity import GpuIdentity, HostHardware
from remediator.sim.node import driver
from remediator.web.agents import HeartbeatIn

START = datetime(2026, 11, 1, tzinfo=UTC)
U0 = "GPU-0c3e7a52-1111-2222-3333-444455556666"
U1 = "GPU-9f1b2c3d-1111-2222-3333-444455556666"


def test_the_driver_and_nvidia_smi_are_joined_by_pci_address() -> None:
    smi = HostIdentity(
        "SN-77",
        {
            "0000:18:00": GpuIdentity(U0, "0000:18:00", serial="1650000000001", vbios="96.00.99"),
            "0000:9a:00": GpuIdentity("GPU-only-in-smi", "0000:9a:00", serial="1650000000009"),
        },
    )
    found = {
        "0000:18:00": GpuInfo("0000:18:00", 0, U0, "NVIDIA H100 80GB HBM3"),
        "0000:2a:00": GpuInfo("0000:2a:00", 1, U1),
        "0000:3b:00": GpuInfo("0000:3b:00", 2, None),  # no UUID read: not an identity
    }
    host = host_hardware(smi, found)
    assert host == HostHardware(
        "SN-77",
        (
            GpuIdentity(U0, "0000:18:00", 0, "1650000000001", "NVIDIA H100 80GB HBM3", "96.00.99"),
            GpuIdentity(U1, "0000:2a:00", 1),
            GpuIdentity("GPU-only-in-smi", "0000:9a:00", serial="1650000000009"),
        ),
    )


def test_odd_fields_are_left_out_not_sent_to_be_refused() -> None:
    odd = HostIdentity("S" * 200, {"0000:18:00": GpuIdentity(U0, "0000:18:00", serial="a\x07b")})
    host = host_hardware(odd, {"0000:18:00": GpuInfo("0000:18:00", 5000, U0, "M" * 300)})
    assert host == HostHardware(None, (GpuIdentity(U0, "0000:18:00"),))
    body = report.heartbeat("n1", "a", "1", START, {}, host, whole=True)
    HeartbeatIn.model_validate(body)  # the push API takes it


def test_whole_on_the_first_heartbeat_a_digest_after_whole_again_when_asked() -> None:
    host = HostHardware("SN-77", (GpuIdentity(U0, "0000:18:00", 0),))
    whole = report.heartbeat("n1", "a", "1", START, {}, host, whole=True)
    assert whole["hardware"] == {
        "dmi_serial": "SN-77",
        "gpus": [{"uuid": U0, "pci_bus_id": "0000:18:00", "index": 0}],
    }
    assert whole["hardware_digest"] == host.digest
    short = report.heartbeat("n1", "a", "1", START, {}, host)
    assert "hardware" not in short and short["hardware_digest"] == host.digest
    for body in (whole, short):
        parsed = HeartbeatIn.model_validate(body)
        assert parsed.hardware_digest == host.digest
    assert HeartbeatIn.model_validate(whole).hardware is not None
    assert "hardware_digest" not in report.heartbeat("n1", "a", "1", START, {})

    assert judge(200, {}, '{"recorded": true, "send_hardware": true}').send_hardware
    assert not judge(200, {}, '{"recorded": true}').send_hardware
    assert not judge(200, {}, '{"send_hardware": "yes"}').send_hardware
    assert not judge(200, {}, "<html>proxy</html>").send_hardware
    assert whole_due(True, Beat(True)) is False  # taken
    assert whole_due(False, Beat(True, send_hardware=True)) is True  # asked
    assert whole_due(True, Beat(False)) is True  # not answered: still due
    assert whole_due(False, Beat(False, 3.0)) is False


@pytest.mark.parametrize(
    "hardware",
    [
        {"dmi_serial": "SN\x00"},
        {"dmi_serial": ""},
        {"gpus": [{"uuid": "not-a-gpu"}]},
        {"gpus": [{"uuid": U0, "pci_bus_id": "18:00.0"}]},
        {"gpus": [{"uuid": U0, "index": -1}]},
        {"gpus": [{"uuid": U0}] * 65},
        {"machine": "extra field"},
    ],
)
def test_a_malformed_identity_is_refused_at_the_edge(hardware: dict[str, object]) -> None:
    body = report.heartbeat("n1", "a", "1", START, {})
    with pytest.raises(ValidationError):
        HeartbeatIn.model_validate({**body, "hardware": hardware, "hardware_digest": "0" * 16})
    with pytest.raises(ValidationError):
        HeartbeatIn.model_validate({**body, "hardware_digest": "NOT-HEX-DIGEST00"})


def test_the_agent_sends_its_host_whole_then_its_digest(tmp_path: Path) -> None:
    root = tmp_path / "host"
    driver.attach(root, "NVIDIA H100 80GB HBM3", U0, "00000000:18:00.0", 0)
    serial = root / "sys/class/dmi/id/product_serial"
    serial.parent.mkdir(parents=True)
    serial.write_text("SN-77\n")
    agent = Agent(
        AgentConfig(
            node="n1",
            controller_url="http://127.0.0.1:9",
            state_dir=tmp_path / "state",
            driver_dir=root / driver.GPUS_DIR,
            dmi_serial_file=serial,
            smi_command=None,
            boot_id_file=tmp_path / "no-boot-id",
        )
    )
    try:
        first = agent.heartbeat_body()
        assert first["hardware"]["dmi_serial"] == "SN-77"
        assert [g["uuid"] for g in first["hardware"]["gpus"]] == [U0]
        agent._answered(Beat(False))  # not answered: the next is whole again
        assert "hardware" in agent.heartbeat_body()
        agent._answered(Beat(True))
        later = agent.heartbeat_body()
        assert "hardware" not in later and later["hardware_digest"] == first["hardware_digest"]
        agent._answered(Beat(True, send_hardware=True))  # a restarted controller asks
        assert agent.heartbeat_body()["hardware"] == first["hardware"]
    finally:
        agent.client.close()
        agent.queue.close()
