"""The bounds every signal keeps, wherever it enters (push, webhook, node conditions,
Prometheus): a Kubernetes node name, a GPU index and a code that fit, a finite value in a range
the kind can have. `Signal` validates with these, so a value outside them can never be built,
stored or evaluated; sources that read raw numbers call them first to say which item was refused
and why. Pure functions, no I/O.
"""

from __future__ import annotations

import math
import re

from remediator.signals.kinds import SignalKind

# RFC 1123 subdomain, as Kubernetes requires of node names (lowercase, dots between labels).
NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
MAX_NODE_NAME = 253
MAX_GPU_INDEX = 1023
# NVIDIA's catalog ends in the 150s; the margin keeps codes of newer drivers, the bound keeps
# every code inside the database's 32-bit column.
XID_CODES = (1, 65_535)
CODES = (0, 2**31 - 1)
# A GPU or memory temperature in °C; a sensor's "invalid" markers (255, 65535) fall outside.
THERMAL_VALUES = (-50.0, 200.0)
# Error counts, rates and levels: any finite number a float column keeps exactly enough.
VALUES = (-1e15, 1e15)


def node_name_problem(node: str) -> str | None:
    if len(node) > MAX_NODE_NAME:
        return f"node name longer than {MAX_NODE_NAME} characters"
    if not NODE_NAME.fullmatch(node):
        return (
            f"{node[:80]!r} is not a Kubernetes node name (RFC 1123: lowercase letters, digits, "
            "'-' and '.')"
        )
    return None


def gpu_problem(gpu: int | None, gpus_on_node: int | None = None) -> str | None:
    """`gpus_on_node` is the node's GPU count when known (its capacity), else None."""
    if gpu is None:
        return None
    if not 0 <= gpu <= MAX_GPU_INDEX:
        return f"GPU index {gpu} is outside 0..{MAX_GPU_INDEX}"
    if gpus_on_node is not None and gpu >= gpus_on_node:
        return f"GPU index {gpu} but the node has {gpus_on_node} GPU(s) (0..{gpus_on_node - 1})"
    return None


def code_problem(kind: SignalKind, code: int | None) -> str | None:
    if code is None:
        return None
    low, high = XID_CODES if kind is SignalKind.XID else CODES
    if not low <= code <= high:
        shown = str(code) if len(str(code)) <= 24 else f"{str(code)[:20]}…"
        return f"{kind.value} code {shown} is outside {low}..{high}"
    return None


def value_problem(kind: SignalKind, value: float | None) -> str | None:
    if value is None:
        return None
    if not math.isfinite(value):
        return f"value {value} is not a finite number"
    low, high = THERMAL_VALUES if kind is SignalKind.THERMAL else VALUES
    if not low <= value <= high:
        return f"{kind.value} value {value:g} is outside {low:g}..{high:g}"
    return None
