"""The shadow-mode report: what a dry-run controller would have done, read from its history."""
