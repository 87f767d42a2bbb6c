"""remediator: automated GPU node health and remediation for Kubernetes."""

__version__ = "0.1.0"
