"""Slurm host lists (`gpu-node-[0-3,7]`) expanded without a round trip to `scontrol show
hostnames`: squeue names a job's nodes this way."""

from __future__ import annotations

import re

_RANGE = re.compile(r"^(?P<prefix>[^\[\]]*)\[(?P<body>[^\]]+)\](?P<rest>.*)$")


def _split_top(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p]


def _expand_one(item: str) -> list[str]:
    match = _RANGE.match(item)
    if not match:
        return [item]
    prefix, rest = match["prefix"], match["rest"]
    names: list[str] = []
    for piece in match["body"].split(","):
        if "-" in piece:
            low, high = piece.split("-", 1)
            width = len(low)
            numbers = [str(n).zfill(width) for n in range(int(low), int(high) + 1)]
        else:
            numbers = [piece]
        for number in numbers:
            names.extend(prefix + number + tail for tail in _expand_one(rest) or [""])
    return names


def expand(hostlist: str) -> list[str]:
    """`a-[0-2],b` → [a-0, a-1, a-2, b]; an empty list for an empty string."""
    return [name for item in _split_top(hostlist.strip()) for name in _expand_one(item)]
