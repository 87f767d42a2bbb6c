"""`python -m bench`: which words are bench names and which are a bench's own options."""

from __future__ import annotations

from bench.__main__ import main, split


def test_options_after_one_bench_are_its_own() -> None:
    assert split(["scale_10k", "--db", "sqlite"]) == (["scale_10k"], ["--db", "sqlite"])


def test_names_alone_and_a_separator_for_options_shared_by_several() -> None:
    assert split(["sim_scale", "api_load"]) == (["sim_scale", "api_load"], [])
    assert split(["a", "b", "--", "--window", "5"]) == (["a", "b"], ["--window", "5"])


def test_options_after_several_names_are_refused_before_anything_runs() -> None:
    assert main(["sim_scale", "api_load", "--window", "5"]) == 2
