"""Schema-based fuzzing of our own OpenAPI: schemathesis generates requests, valid and not, for
every API operation against a seeded history on a real database (commands really run). As an
operator, every check schemathesis has must hold (server errors, status codes, content types,
headers, response schemas, negative data refused, positive data accepted, auth, methods); with no
token, no answer may be a 5xx or differ from the schema, and a 405 must say what is allowed.

Each operation is driven through Hypothesis directly with the operation's strategy (schemathesis'
own pytest plugin does not run under this pytest); one pytest case per operation keeps failures
named by route. No case is adjusted to suit the server: what the schema allows, the server takes,
and the coverage phase (each constraint's boundary values, and each broken in turn) runs as
`schemathesis run --checks all` runs it.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import CHECKS as CHECKS_REGISTRY
from schemathesis.checks import load_all_checks, not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
)

from tests.fixtures.web import OPERATOR_TOKEN, Console

pytestmark = pytest.mark.integration

# Bounded so the whole file stays well under a minute of CPU; derandomized, so a run is repeatable.
EXAMPLES = 10
OPERATIONS = (
    "GET /api/v1/remediations",
    "GET /api/v1/remediations/{remediation_id}",
    "GET /api/v1/nodes/{name}",
    "GET /api/v1/policies",
    "GET /api/v1/overview",
    "GET /api/v1/controller",
    "GET /api/v1/audit",
    "GET /api/v1/live",
    "POST /api/v1/remediations/{remediation_id}/approve",
    "POST /api/v1/remediations/{remediation_id}/cancel",
    "POST /api/v1/remediations/{remediation_id}/retry",
    "POST /api/v1/remediations/{remediation_id}/release",
    "POST /api/v1/controller/pause",
    "POST /api/v1/controller/resume",
    "POST /api/v1/controller/reset-breaker",
    "GET /api/v1/fleet/breaker",
    "GET /api/v1/domains",
    "GET /api/v1/domains/{domain}",
    "POST /api/v1/fleet/breaker/reset",
    "POST /api/v1/signals",
    "GET /api/v1/signals",
    "POST /api/v1/alertmanager",
    "POST /api/v1/agents/heartbeat",
    "GET /api/v1/agents",
    "GET /api/v1/agents/admission",
    "GET /api/v1/optouts",
    "POST /api/v1/optouts",
    "DELETE /api/v1/optouts/{opt_out_id}",
    "GET /api/v1/fences",
    "POST /api/v1/fences/{node}",
    "GET /api/v1/rma",
    "GET /api/v1/rma/{ref}",
    "GET /api/v1/rma/{ref}/bundle",
    "PATCH /api/v1/rma/{ref}",
    "GET /api/v1/reliability",
    "GET /api/v1/validations",
    "GET /api/v1/gpus",
    "GET /api/v1/gpus/{uuid}",
    "GET /api/v1/machines/{machine_id}",
    "POST /api/v1/machines/{machine_id}/lift-quarantine",
    "GET /healthz",
    "HEAD /healthz",
    "GET /readyz",
    "HEAD /readyz",
    "GET /metrics",
    "HEAD /metrics",
)
AUTH = {"operator": {"Authorization": f"Bearer {OPERATOR_TOKEN}"}, "anonymous": {}}
CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]
load_all_checks()
ALL_CHECKS = list(CHECKS_REGISTRY.get_all())


def _schema(console: Console) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_asgi("/api/v1/openapi.json", console.app)


def _operations(console: Console) -> dict[str, schemathesis.APIOperation]:
    schema = _schema(console)
    found = {}
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), f"schemathesis cannot read an operation: {result.err()}"
        operation = result.ok()
        found[f"{operation.method.upper()} {operation.path}"] = operation
    return found


def _has_inputs(operation: schemathesis.APIOperation) -> bool:
    return (operation.body is not None and len(operation.body) > 0) or any(
        True for _ in operation.iter_parameters()
    )


def test_schema_lists_every_fuzzed_operation(shared_console: Console) -> None:
    assert set(_operations(shared_console)) == set(OPERATIONS)


@pytest.mark.parametrize("mode", list(GenerationMode), ids=str)
@pytest.mark.parametrize("name", OPERATIONS)
def test_every_check_holds_for_an_operator(
    shared_console: Console, name: str, mode: GenerationMode
) -> None:
    """Every check schemathesis has (status codes, content types, headers, bodies, negative data
    refused, positive data accepted, auth, methods), requests valid and not, as an operator."""
    operation = _operations(shared_console)[name]
    headers = AUTH["operator"]
    strategy = operation.as_strategy(generation_mode=mode)
    if mode is GenerationMode.NEGATIVE and not _has_inputs(operation):
        pytest.skip("nothing to make invalid: the operation takes no input")

    @given(case=strategy)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def fuzz(case: schemathesis.Case) -> None:
        response = case.call(headers=headers)
        case.validate_response(response, checks=ALL_CHECKS, headers=headers)

    fuzz()


@pytest.mark.parametrize("name", OPERATIONS)
def test_no_server_errors_or_schema_violations_without_a_token(
    shared_console: Console, name: str
) -> None:
    operation = _operations(shared_console)[name]
    headers = AUTH["anonymous"]

    @given(case=operation.as_strategy())
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def fuzz(case: schemathesis.Case) -> None:
        response = case.call(headers=headers)
        what = (
            f"{case.method} {case.formatted_path} query={case.query} body={case.body!r} → "
            f"{response.status_code}: {response.text[:500]}"
        )
        assert response.status_code < 500, what
        if response.status_code == 405:
            assert response.headers.get("allow"), what
        case.validate_response(response, checks=CHECKS, headers=headers)

    fuzz()


# Where `schemathesis run --checks all` found the schema and the server apart (#39 item 23).
STATED = (
    "GET /api/v1/remediations",
    "GET /api/v1/nodes/{name}",
    "GET /api/v1/signals",
    "POST /api/v1/signals",
    "POST /api/v1/agents/heartbeat",
    "POST /api/v1/alertmanager",
)


@pytest.mark.parametrize("name", STATED)
def test_the_schema_states_every_rule_the_server_enforces(
    shared_console: Console, name: str
) -> None:
    """#39 item 23: `schemathesis run --checks all` found schema-valid requests refused (a
    cursor the server did not hand out, a window's start after its end, a stale reading, a
    counter past 2**62 that a double rounds down to it) and schema-violating ones taken (`false`
    for an integer, a number for a time, an empty `groupKey`). Its coverage phase, every check,
    both modes: each refusal is one the schema states, and each request it allows is taken."""
    schema = _schema(shared_console)
    operation = _operations(shared_console)[name]
    headers = AUTH["operator"]
    config = schema.config.generation_for(operation=operation, phase="coverage")
    failures: dict[str, str] = {}
    for case in schema.iter_coverage_cases(
        operation, generation_modes=list(GenerationMode), generation_config=config
    ):
        response = case.call(headers=headers)
        try:
            case.validate_response(response, checks=ALL_CHECKS, headers=headers)
        except FailureGroup as group:
            for failure in group.exceptions:
                failures.setdefault(
                    f"{failure.title}: {failure.message.splitlines()[-1]}",
                    f"{case.method} {case.formatted_path} query={case.query} "
                    f"body={case.body!r} → {response.status_code}: {response.text[:300]}",
                )
    assert not failures, "\n".join(f"{k}\n    {v}" for k, v in failures.items())
