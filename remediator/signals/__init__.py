"""Health signals: what the sources observed, in one typed shape."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from remediator.signals.model import Signal, SignalKind

__all__ = ["Signal", "SignalKind"]


def __getattr__(name: str) -> Any:
    # Imported on first use: the node agent reads the XID parser (signals/xid.py) on every GPU
    # node and must not load pydantic for it.
    if name in __all__:
        from remediator.signals import model

        return getattr(model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
