"""The contract between the agent's SXid signals and the domain policies (#29): a fatal SXid that
every tray of an NVL72 rack reports is one decision for the whole domain; a non-fatal one, or a
line the agent could not read, opens nothing but is kept as a signal."""

from __future__ import annotations

from datetime import timedelta

from remediator.agent.fabric import parse_fabric
from remediator.agent.report import sxid_signal
from remediator.model.topology import CLIQUE_LABEL, build_topology
from remediator.policy.evaluate import History, evaluate
from remediator.policy.scope import fold_scopes
from remediator.signals.model import Signal
from remediator.signals.sxid import parse_sxid_line
from tests.unit.policy.builders import SETTINGS, T0, policy

UUID = "7f3c1a2e-5b7d-4c1e-9a0b-2d4e6f8a0b1c"
TRAYS = [f"nvl-r0-t{t:02d}" for t in range(18)]
LABELS = {
    node: {CLIQUE_LABEL: f"{UUID}.0", "remediator.io/rack": "rack-0", "remediator.io/tray": str(t)}
    for t, node in enumerate(TRAYS)
} | {f"nvl-r1-t{t:02d}": {CLIQUE_LABEL: "other-rack.0"} for t in range(18)}
SMI = (
    "GPU 00000008:01:00.0\n    Fabric\n        State : Completed\n        Status : Success\n"
    f"        CliqueId : 0\n        ClusterUUID : {UUID}\n"
)
FATAL_SXID = policy(
    "nvswitch-fatal",
    {"kind": "sxid", "labels": {"fatal": "true"}},
    scope="domain",
)


def from_agent(node: str, line: str, seconds: float) -> Signal:
    sxid = parse_sxid_line(line)
    assert sxid is not None
    fabric = parse_fabric(SMI)[0]
    at = T0 + timedelta(seconds=seconds)
    return Signal.model_validate(sxid_signal(node, sxid, fabric, at))


def test_a_fatal_sxid_on_every_tray_is_one_domain_decision() -> None:
    line = "nvidia-nvswitch3: SXid (PCI:0000:07:00.0): 22003, Fatal, Link 12 MINION halt"
    signals = [from_agent(node, line, i) for i, node in enumerate(TRAYS)]
    assert {s.labels["domain"] for s in signals} == {UUID}
    now = T0 + timedelta(seconds=30)
    result = evaluate(signals, History(), [FATAL_SXID], now, SETTINGS)
    [one] = fold_scopes(result.decisions, build_topology(LABELS))
    assert one.domain == UUID and one.members == tuple(TRAYS)
    assert all(not n.startswith("nvl-r1") for n in one.members)


def test_non_fatal_and_unreadable_lines_open_nothing() -> None:
    kept = [
        from_agent(
            TRAYS[0], "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 11012, Non-fatal, Link 3 SBE", 0
        ),
        from_agent(TRAYS[1], "nvidia-nvswitch0: SXid (PCI:0000:05:0", 1),
    ]
    assert kept[1].code is None and kept[1].labels["fatal"] == "unknown"
    now = T0 + timedelta(seconds=30)
    assert evaluate(kept, History(), [FATAL_SXID], now, SETTINGS).decisions == ()
