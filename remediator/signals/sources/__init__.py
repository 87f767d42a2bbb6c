"""Signal sources, one per origin, each behind the same small interface."""
