"""#39 item 10 through the real controller: an XID 13 logged 100 s before an XID 79 and drained
in one intake opens its own notify, and the XID 79 then its repair, as when they come apart
(before, the XID 13 joined the XID 79's remediation and its notify was never sent)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from remediator.model.states import State
from remediator.store.records import RemediationFilter
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import start_engine, wait_for, write_policies, xid

APP_FAULTS = """
policies:
  - name: xid-application-faults
    description: Graphics engine exception (XID 13).
    why: Mostly the application's; its owner is told, the node keeps working.
    match:
      kind: xid
      codes: [13]
    priority: 5
    actions:
      - action: notify
"""


def test_an_earlier_app_fault_drained_with_an_xid_79_opens_its_own_notify(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> None:
    sim = sim_factory(nodes=4, provision_delay=0.3)
    policies = write_policies(tmp_path / "policies")
    (policies / "app-faults.yaml").write_text(APP_FAULTS)
    engine = start_engine(sim, migrated_database_url, policies)
    try:
        node = sorted(n.name for n in engine.controller.kube.list_nodes())[0]
        fallen = xid(node, 79, gpu=1)
        app_fault = xid(node, 13, gpu=0).model_copy(
            update={"observed_at": fallen.observed_at - timedelta(seconds=100)}
        )
        engine.push(fallen, app_fault)  # one put: one intake drains both

        def policies_opened() -> list[str]:
            rows = engine.repository.list(RemediationFilter(node=node), limit=10).rows
            return sorted(r.policy for r in rows)

        wait_for(
            lambda: policies_opened() == ["xid-79", "xid-application-faults"],
            30,
            "a remediation for each fault",
        )
        rows = engine.repository.list(RemediationFilter(node=node), limit=10).rows
        notify = next(r for r in rows if r.policy == "xid-application-faults")
        assert notify.state is State.SUCCEEDED
        assert [s.code for s in engine.repository.get(notify.id).signals] == [13]
    finally:
        engine.close()
