"""Durable remediations: the state table, the planner and the service that advances them."""
