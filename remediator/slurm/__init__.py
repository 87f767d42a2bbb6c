"""The only package that talks to Slurm: drain/down/resume nodes, signal and requeue jobs, read
node states as signals. Everything goes through `SlurmClient` (client.py); the CLI adapter is the
one implementation (docs/slurm.md says why, and how to add slurmrestd)."""
