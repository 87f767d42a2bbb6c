"""The chaos soak (issue #38): the real controller as an HA pair against the simulator and a
real Slurm, a seeded schedule of every fault the setup can inject, and an independent checker of
docs/safety.md's invariants. `run.py` is the entry point; `schedule.py` draws the faults,
`faults.py` carries them out, `checker.py` watches from outside, `stack.py` starts and stops the
processes, `journal.py` is what the fault runner and the checker share."""
