"""Stateful schema fuzzing: schemathesis chains operations along the OpenAPI links it infers from
response fields (a list's ids into a remediation's page and its commands, an audit row's
`remediation_id`, a page's cursor into the next page, a remediation's signals into a push), as an
operator, every check on every step (the stateful ones included: a resource a link names exists,
a cancelled one stays so), against the real app and its real OpenAPI document.

Every scenario starts on a console of its own, freshly seeded on a new SQLite file: what a chain
draws next depends on what the server answered (which links have a value to follow, which
bundles a response lands in), so a server changed by an earlier scenario made Hypothesis see a
different choice tree for the same prefix and raise FlakyStrategyDefinition in a full run. With
the same state at every scenario's start, the fixed seed (derandomize) replays the same chains.

Findings are collected, not raised, so Hypothesis does not replay mutating chains to shrink them;
each distinct finding (check, operation) is listed with a curl command that reproduces it.
Bounded: 40 scenarios of 12 steps, ~25 s. For a longer hunt by hand:
REMEDIATOR_STATEFUL_EXAMPLES=2000 .venv/bin/pytest -q tests/integration/test_web_stateful.py
"""

from __future__ import annotations

import os
import shutil
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis import GenerationMode
from schemathesis.checks import CHECKS as CHECKS_REGISTRY
from schemathesis.checks import load_all_checks
from schemathesis.core.failures import Failure, FailureGroup
from starlette.applications import Starlette
from starlette.routing import BaseRoute

from tests.fixtures.web import OPERATOR_TOKEN, Console, seeded

pytestmark = pytest.mark.integration

SCENARIOS = int(os.environ.get("REMEDIATOR_STATEFUL_EXAMPLES", "40"))
STEPS = 12
HEADERS = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
load_all_checks()
ALL_CHECKS = list(CHECKS_REGISTRY.get_all())


@dataclass
class Findings:
    """Each distinct (check, operation) once, with the first request that showed it."""

    seen: dict[tuple[str, str], str] = field(default_factory=dict)
    steps: int = 0
    # Each scenario's (method, path, status) chain: the run's fingerprint.
    chains: list[list[tuple[str, str, int]]] = field(default_factory=list)

    def add(self, failure: Failure, case: schemathesis.Case, response: Any) -> None:
        if _refused_item_by_item(failure, case, response):
            return
        key = (failure.title, f"{case.method} {case.path}")
        if key not in self.seen:
            curl = case.as_curl_command(headers={"Authorization": "Bearer <operator token>"})
            self.seen[key] = f"{failure.title} on {key[1]}: {failure.message}\n    {curl}"


def _refused_item_by_item(failure: Failure, case: schemathesis.Case, response: Any) -> bool:
    """The push judges each item on its own (docs/signals.md: one broken reading must not hold
    back an XID 79 beside it): a batch with a bad item answers 202 with that item named in
    `refused`. That is the bad data refused, not accepted."""
    if (case.method, case.path) != ("POST", "/api/v1/signals") or response.status_code != 202:
        return False
    if failure.title != "Schema-violating request accepted":
        return False
    return bool(response.json().get("refused"))


def recent_readings(case: schemathesis.Case, now: datetime) -> None:
    """A client pushes what it just read: a valid push's readings are made recent, else every
    one is refused as stale evidence (202, accepted 0) and the chain never opens a remediation.
    Cursors and windows need no such help: the schema states them (#39 item 23)."""
    if case.path != "/api/v1/signals" or not isinstance(case.body, list):
        return
    for item in case.body:
        if isinstance(item, dict) and "observed_at" in item:
            item["observed_at"] = now.isoformat()
            item.pop("since", None)


class Consoles(Starlette):
    """The ASGI app schemathesis calls: it forwards to the current scenario's console, so every
    request (the checks' own re-sent ones too) reaches the state that scenario started from.
    A Starlette app with the console's routes, so the literals schemathesis draws on come from
    the app's handlers (as in test_web_fuzz), not from this test's own module."""

    def __init__(self, template: Path, directory: Path) -> None:
        super().__init__()
        self.template, self.directory = template, directory
        directory.mkdir()
        self.count = 0
        self.stack = ExitStack()
        self.current = self.fresh()

    def fresh(self) -> Console:
        self.stack.close()
        self.count += 1
        path = self.directory / f"scenario-{self.count}.db"
        shutil.copyfile(self.template, path)
        self.current = self.stack.enter_context(seeded(f"sqlite:///{path}"))
        return self.current

    def close(self) -> None:
        self.stack.close()

    @property
    def routes(self) -> list[BaseRoute]:
        return self.current.app.routes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.current.app(scope, receive, send)


def _machine(consoles: Consoles, findings: Findings) -> type[Any]:
    schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", consoles)

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            self.chain: list[tuple[str, str, int]] = []
            findings.chains.append(self.chain)
            consoles.fresh()

        def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, Any]:
            return {"headers": HEADERS}

        def before_call(self, case: schemathesis.Case) -> None:
            # Only a valid request is made to look like a client's: an invalid one stays invalid
            # (a fresh `observed_at` over a broken one made it valid, then "accepted").
            if case.meta is None or case.meta.generation.mode is GenerationMode.POSITIVE:
                recent_readings(case, consoles.current.clock.now())
            findings.steps += 1

        def after_call(self, response: Any, case: schemathesis.Case) -> None:
            super().after_call(response, case)
            self.chain.append((case.method, case.path, response.status_code))

        def validate_response(
            self, response: Any, case: schemathesis.Case, *args: Any, **kwargs: Any
        ) -> None:
            try:
                case.validate_response(
                    response, checks=ALL_CHECKS, headers=HEADERS, recorder=self.recorder
                )
            except FailureGroup as group:
                for failure in group.exceptions:
                    findings.add(failure, case, response)
            except Failure as failure:
                findings.add(failure, case, response)

    return Workflow


def run_chains(template: Path, directory: Path) -> Findings:
    findings = Findings()
    consoles = Consoles(template, directory)
    try:
        _machine(consoles, findings).run(
            settings=settings(
                max_examples=SCENARIOS,
                stateful_step_count=STEPS,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(HealthCheck),
                phases=(Phase.explicit, Phase.generate),
            )
        )
    finally:
        consoles.close()
    return findings


def test_operation_chains_along_links_hold_every_check(
    sqlite_head_template: Path, tmp_path: Path
) -> None:
    """Each distinct finding is listed with a curl command that reproduces it."""
    findings = run_chains(sqlite_head_template, tmp_path / "first")
    assert findings.steps > SCENARIOS, "the state machine ran no chains"
    assert any(len(chain) > 1 for chain in findings.chains), "no chain followed a link"
    if findings.seen:
        pytest.fail("\n".join(findings.seen.values()), pytrace=False)
