"""Domain values shared by the layers: a remediation's states and the eviction record.

They sit below store/, policy/ and remediation/ so that the lower packages can persist and
reason about them without importing the engine.
"""
