"""Shared fixtures live in tests/fixtures/, one module per real service; register them here."""

pytest_plugins: list[str] = [
    "tests.fixtures.prometheus",
    "tests.fixtures.alertmanager",
    "tests.fixtures.postgres",
    "tests.fixtures.sim",
    "tests.fixtures.slurm",
    "tests.fixtures.web",
    "tests.fixtures.browser",
]
