"""`ibstat` (infiniband-diags) on a simulated node: one `CA 'mlx5_N'` block per HCA, with its
fields tab-indented and each port's a second tab in, as the real program prints them. A port that
is down reads `State: Down`, `Physical state: Disabled`, `Rate: 10` and LIDs 0, as an
administratively disabled ConnectX port does. `ibstat -l` lists the CA names; `ibstat CA` shows
one; an unknown CA name is an error with a non-zero exit status.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from remediator.sim.node.hardware import (
    IB_CA_TYPE,
    IB_CAPABILITY_MASK,
    IB_FIRMWARE,
    IB_RATE,
    IbPort,
    Profile,
)

SM_LID = 1
DOWN_RATE = 10
EXIT_NO_DEVICE = 255


@dataclass(frozen=True)
class Result:
    exit_code: int
    output: str


def ca_block(port: IbPort, down: bool) -> str:
    lines = [
        f"CA '{port.device}'",
        f"\tCA type: {IB_CA_TYPE}",
        "\tNumber of ports: 1",
        f"\tFirmware version: {IB_FIRMWARE}",
        "\tHardware version: 0",
        f"\tNode GUID: {port.node_guid}",
        f"\tSystem image GUID: {port.node_guid}",
        f"\tPort {port.port}:",
        f"\t\tState: {'Down' if down else 'Active'}",
        f"\t\tPhysical state: {'Disabled' if down else 'LinkUp'}",
        f"\t\tRate: {DOWN_RATE if down else IB_RATE}",
        f"\t\tBase lid: {0 if down else port.lid}",
        "\t\tLMC: 0",
        f"\t\tSM lid: {0 if down else SM_LID}",
        f"\t\tCapability mask: {IB_CAPABILITY_MASK}",
        f"\t\tPort GUID: {port.node_guid}",
        "\t\tLink layer: InfiniBand",
    ]
    return "".join(line + "\n" for line in lines)


def run(argv: Sequence[str], profile: Profile, down: Collection[str]) -> Result:
    args = list(argv[1:])
    if "-l" in args or "--list_of_cas" in args:
        return Result(0, "".join(p.device + "\n" for p in profile.ib_ports))
    names = [a for a in args if not a.startswith("-")]
    ports = list(profile.ib_ports)
    if names:
        ports = [p for p in ports if p.device == names[0]]
        if not ports:
            return Result(
                EXIT_NO_DEVICE, f"ibpanic: [1] main: stat of IB device '{names[0]}' failed\n"
            )
    return Result(0, "".join(ca_block(p, p.device in down) for p in ports))
