"""Health signals: what the sources observed, in one typed shape."""

from remediator.signals.model import Signal, SignalKind

__all__ = ["Signal", "SignalKind"]
