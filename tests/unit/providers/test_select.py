"""Provider settings and per-pool selection: a pool's own provider answers for it, its operation
ids find their way back to it, and every other pool goes to the default, ids unchanged."""

from __future__ import annotations

import pytest

from remediator.providers.base import Operation, OperationState
from remediator.providers.select import PoolProviders
from remediator.settings import AwsProviderSettings, ProviderSettings, Settings


class Recording:
    """A provider that answers from memory and records what it was asked."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.asked: list[str] = []

    def request_replacement(self, pool: str, node: str, key: str, reason: str) -> Operation:
        self.asked.append(f"request {pool} {node}")
        return Operation(f"{self.name}-op", pool, node, OperationState.PENDING)

    def get_operation(self, op_id: str) -> Operation:
        self.asked.append(f"get {op_id}")
        return Operation(op_id, "p", "n", OperationState.SUCCEEDED, new_node="new")

    def spare_capacity(self, pool: str) -> int | None:
        self.asked.append(f"capacity {pool}")
        return 1


def test_a_provider_without_type_is_the_http_contract_as_before() -> None:
    settings = Settings(provider={"url": "http://pools:8080"})  # type: ignore[arg-type]
    assert isinstance(settings.provider, ProviderSettings)
    mixed = Settings(pool_providers={"train": {"type": "aws", "region": "us-east-1"}})  # type: ignore[dict-item]
    assert isinstance(mixed.pool_providers["train"], AwsProviderSettings)
    with pytest.raises(ValueError, match="nope"):
        Settings(provider={"type": "nope"})  # type: ignore[arg-type]


def test_pools_go_to_their_own_provider_and_ids_lead_back() -> None:
    default, aws = Recording("http"), Recording("aws")
    router = PoolProviders(default, {"train": aws})
    op = router.request_replacement("train", "n1", "k", "r")
    assert op.id == "train::aws-op"
    assert router.get_operation(op.id).id == "train::aws-op"
    assert aws.asked == ["request train n1", "get aws-op"]
    plain = router.request_replacement("infer", "n2", "k2", "r")
    assert plain.id == "http-op"
    router.get_operation("http-op")
    assert router.spare_capacity("infer") == 1
    assert default.asked == ["request infer n2", "get http-op", "capacity infer"]
