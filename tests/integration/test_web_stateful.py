"""Stateful schema fuzzing: schemathesis chains operations along the OpenAPI links it infers from
response fields (a list's ids into a remediation's page and its commands, an audit row's
`remediation_id`, a page's cursor into the next page, a remediation's signals into a push), as an
operator, every check on every step (the stateful ones included: a resource a link names exists,
a cancelled one stays so).

Findings are collected, not raised: a step's failure does not depend on Hypothesis replaying the
scenario against a database the earlier scenarios changed (which it reports as flaky data
generation instead of the finding). Each distinct finding (check, operation) is listed with a
curl command that reproduces it. Bounded and derandomized: well under a minute of CPU per backend.

For a longer hunt by hand: REMEDIATOR_STATEFUL_EXAMPLES=2000 .venv/bin/pytest -q
tests/integration/test_web_stateful.py -k sqlite.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import CHECKS as CHECKS_REGISTRY
from schemathesis.checks import load_all_checks
from schemathesis.core.failures import Failure, FailureGroup

from tests.fixtures.web import OPERATOR_TOKEN, Console
from tests.integration.test_web_fuzz import as_a_client_would

pytestmark = pytest.mark.integration

SCENARIOS = int(os.environ.get("REMEDIATOR_STATEFUL_EXAMPLES", "40"))
STEPS = 8
HEADERS = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
# Where the server hands out an opaque position: a client only ever sends one of these back.
POSITION_FIELDS = ("next_cursor", "remediations_next", "signals_next", "next_before")
load_all_checks()
ALL_CHECKS = list(CHECKS_REGISTRY.get_all())


@dataclass
class Findings:
    """Each distinct (check, operation) once, with the first request that showed it."""

    seen: dict[tuple[str, str], str] = field(default_factory=dict)
    steps: int = 0

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


def _positions(value: Any, found: set[str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in POSITION_FIELDS and isinstance(item, str | int):
                found.add(str(item))
            else:
                _positions(item, found)
    elif isinstance(value, list):
        for item in value:
            _positions(item, found)


def _machine(console: Console, findings: Findings) -> type[Any]:
    schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", console.app)
    handed_out: set[str] = set()

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, Any]:
            return {"headers": HEADERS}

        def before_call(self, case: schemathesis.Case) -> None:
            as_a_client_would(case, console, handed_out)
            findings.steps += 1

        def after_call(self, response: Any, case: schemathesis.Case) -> None:
            super().after_call(response, case)
            if response.headers.get("content-type", [""])[0].startswith("application/json"):
                _positions(response.json(), handed_out)

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


def test_operation_chains_along_links_hold_every_check(console: Console) -> None:
    """Its own freshly seeded console: chains drawn from the shared one's state (changed by
    whatever ran before) made Hypothesis see different data on a replay (FlakyStrategyDefinition
    in a full suite run); only the generate phase runs, since findings are collected, not
    raised, and a replay of a mutating chain cannot draw the same data."""
    findings = Findings()
    machine = _machine(console, findings)
    machine.run(
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
    assert findings.steps > SCENARIOS, "the state machine ran no chains"
    assert not findings.seen, "\n".join(findings.seen.values())
