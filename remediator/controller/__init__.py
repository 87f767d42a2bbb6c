"""The composition root: builds everything and runs the scheduler on the elected leader."""
