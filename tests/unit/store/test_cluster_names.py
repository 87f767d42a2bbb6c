"""Cluster names: DNS-1123 and no longer than the database's column, refused at start."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediator.errors import RemediatorError
from remediator.model.cluster import NAME_MAX, name_problem
from remediator.settings import load_settings
from remediator.store.models import Base


def test_the_limit_is_the_columns_width() -> None:
    tables = Base.metadata.tables.values()
    widths = {table.c.cluster.type.length for table in tables if "cluster" in table.c}
    assert widths == {NAME_MAX}


@pytest.mark.parametrize("name", ["default", "prod", "eu-west-1.gpu", "a", "x" * NAME_MAX])
def test_good_names(name: str) -> None:
    assert name_problem(name) is None


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("Prod", "DNS-1123"),
        ("prod_east", "DNS-1123"),
        ("prod-", "DNS-1123"),
        ("", "DNS-1123"),
        ("gpu/east", "DNS-1123"),
        ("x" * (NAME_MAX + 1), f"at most {NAME_MAX}"),
    ],
)
def test_bad_names_say_why(name: str, why: str) -> None:
    problem = name_problem(name)
    assert problem is not None and why in problem


def test_the_config_refuses_a_bad_name_naming_the_file_and_field(tmp_path: Path) -> None:
    config = tmp_path / "remediator.yaml"
    config.write_text("cluster_name: Prod_East\n")
    with pytest.raises(RemediatorError, match=r"remediator.yaml:1: cluster_name: .*DNS-1123"):
        load_settings(config)
    config.write_text(f"cluster_name: {'a' * 200}\n")
    with pytest.raises(RemediatorError, match="200 characters"):
        load_settings(config)
