"""The on-call console and JSON API."""
