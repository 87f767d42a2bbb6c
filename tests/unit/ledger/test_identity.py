"""Identities from the real formats: providerIDs, GKE's instance-id annotation, nvidia-smi's
CSV, the DMI serial, and the PCI address in each system's spelling."""

from __future__ import annotations

from remediator.ledger.identity import (
    GCE_INSTANCE_ID,
    GpuIdentity,
    dmi_serial,
    machine_id,
    parse_smi_csv,
    pci,
    rank,
)

SMI = """serial, uuid, pci.bus_id, vbios_version
1654922004133, GPU-6b3a0c1e-1f0e-4a7c-9d2b-3c5e7f9a1b2c, 00000000:18:00.0, 96.00.74.00.01
[N/A], GPU-7c4b1d2f-2a1f-4b8d-8e3c-4d6f8a0b2c3d, 00000000:2A:00.0, 96.00.74.00.01
"""


def test_pci_addresses_in_every_spelling_name_one_slot() -> None:
    assert {pci("00000000:18:00.0"), pci("0000:18:00.0"), pci("PCI:0000:18:00"), pci("18:00")} == {
        "0000:18:00"
    }
    assert pci("garbage") is None and pci(None) is None


def test_nvidia_smi_csv() -> None:
    assert parse_smi_csv(SMI) == [
        GpuIdentity(
            "GPU-6b3a0c1e-1f0e-4a7c-9d2b-3c5e7f9a1b2c",
            "0000:18:00",
            serial="1654922004133",
            vbios="96.00.74.00.01",
        ),
        GpuIdentity(
            "GPU-7c4b1d2f-2a1f-4b8d-8e3c-4d6f8a0b2c3d", "0000:2a:00", vbios="96.00.74.00.01"
        ),
    ]
    assert parse_smi_csv("") == []


def test_machine_ids() -> None:
    assert machine_id("aws:///us-east-1a/i-0abc", {}) == "aws:i-0abc"
    # GCE's providerID is the instance's name: only GKE's instance id tells a recreated one.
    assert machine_id("gce://p/z/gke-a1", {}) is None
    assert machine_id("gce://p/z/gke-a1", {GCE_INSTANCE_ID: "4242"}) == "gce:4242"
    assert machine_id("metal3://ns/host-1/m", {}, serial="SN9") == "dmi:SN9"
    assert machine_id("", {}) is None
    assert machine_id("metal3://ns/host-1/m-0", {}) == "metal3:ns:host-1:m-0"
    assert machine_id("", {}, serial="SN 1/2") == "dmi:SN_1_2"
    # A VM's DMI serial is its hypervisor's: the instance id names a cloud machine.
    assert machine_id("aws:///us-east-1a/i-0abc", {}, serial="ec2abc") == "aws:i-0abc"
    assert machine_id("gce://p/z/a1", {GCE_INSTANCE_ID: "4242"}, serial="GoogleCloud-1") == (
        "gce:4242"
    )
    assert machine_id("gce://p/z/a1", {}, serial="GoogleCloud-1") == "dmi:GoogleCloud-1"
    assert rank("aws:i-0abc") > rank("dmi:SN9") > rank("metal3:ns:host-1:m-0") > rank(None)
    assert dmi_serial("To Be Filled By O.E.M.\n") is None
    assert dmi_serial(" SN123\n") == "SN123"
