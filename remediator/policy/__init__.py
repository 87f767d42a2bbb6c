"""Policies: the YAML schema, the loader, pure evaluation and pure budgets."""
