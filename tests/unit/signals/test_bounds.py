"""The bounds every signal keeps (signals/bounds.py), and history read back as recorded."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from remediator.signals.bounds import code_problem, gpu_problem, node_name_problem, value_problem
from remediator.signals.model import STORED, Signal, SignalKind

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    "name", ["gpu-a", "gpu-a.rack-3.example.com", "a", "0node", "n" * 63 + "." + "m" * 63]
)
def test_kubernetes_node_names_pass(name: str) -> None:
    assert node_name_problem(name) is None


@pytest.mark.parametrize("name", ["GPU-A", "gpu_a", "-gpu", "gpu-", "gpu..a", "gpu a", "a" * 254])
def test_other_names_do_not(name: str) -> None:
    assert node_name_problem(name) is not None


def test_codes_values_and_gpus() -> None:
    assert code_problem(SignalKind.XID, 79) is None
    assert code_problem(SignalKind.XID, 0) == "xid code 0 is outside 1..65535"
    assert (
        code_problem(SignalKind.XID, 10**20) == "xid code 100000000000000000000 is outside 1..65535"
    )
    assert code_problem(SignalKind.NODE_CONDITION, 1) is None
    assert value_problem(SignalKind.THERMAL, 90.5) is None
    assert value_problem(SignalKind.THERMAL, float("nan")) == "value nan is not a finite number"
    assert value_problem(SignalKind.THERMAL, 255) == "thermal value 255 is outside -50..200"
    assert value_problem(SignalKind.NVLINK, 1e6) is None
    assert gpu_problem(7, 8) is None
    assert gpu_problem(8, 8) == "GPU index 8 but the node has 8 GPU(s) (0..7)"
    assert gpu_problem(8, None) is None


def test_history_is_read_back_as_recorded_not_judged_by_todays_bounds() -> None:
    """A row stored before a bound existed must still show on the node page."""
    recorded = {"node": "GPU_Node_1", "kind": "xid", "source": "t", "observed_at": NOW, "code": 0}
    signal = Signal.model_validate(recorded, context=STORED)
    assert (signal.node, signal.code) == ("GPU_Node_1", 0)
    with pytest.raises(ValidationError, match="not a Kubernetes node name"):
        Signal.model_validate(recorded)
