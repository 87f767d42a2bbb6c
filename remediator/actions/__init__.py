"""Actions: one idempotent executor per remediation step, safe to run twice after a crash."""
