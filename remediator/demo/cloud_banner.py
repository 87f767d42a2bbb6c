"""The banner's inject lines per cloud: the command a new user copies must do what the docs say
it does. On AWS that is a GPU a reboot does not bring back (`--persistent`), so the node is
replaced through its Auto Scaling group, named here (docs/providers.md)."""

from __future__ import annotations

from remediator.sim.fleet import TRAIN_POOL

AWS_NODE = f"{TRAIN_POOL}-0000"


def inject_lines(remediator: str, inject_url: str, cloud: str) -> list[str]:
    command = f"{remediator} sim inject --url {inject_url}"
    if cloud != "aws":
        return [f"  inject    {command} --node NODE --gpu 0 --xid 79"]
    return [
        f"  inject    {command} --node {AWS_NODE} --gpu 0 --xid 79 --persistent",
        "            a GPU the reboot does not bring back: the diagnostics fail and the node is",
        f"            replaced through its Auto Scaling group {TRAIN_POOL} (the timeline names the",
        "            group, the launch activity and both instance ids); without --persistent the",
        "            reboot repairs it",
    ]
