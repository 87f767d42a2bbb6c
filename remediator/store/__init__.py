"""Persistence: SQLAlchemy models, sessions and typed queries over the remediation history."""
