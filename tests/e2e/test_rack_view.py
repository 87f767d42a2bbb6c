"""The rack view in Chromium: two NVL72 racks as grids of their 18 trays (Ready, spare, cordoned,
NotReady, in remediation), the gang jobs across them, the domain's open remediation, a node
without clique labels counted as unplaced; at desktop and phone width; and its JSON API."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest
from playwright.sync_api import Browser, expect
from prometheus_client import CollectorRegistry

from remediator.kube.objects import Node, NodeCondition, Pod
from remediator.model.states import State
from remediator.signals.model import SignalKind
from remediator.web.app import create_app
from tests.fixtures.browser import DESKTOP, PHONE, login, new_page, shot
from tests.fixtures.web import OPERATOR_TOKEN, Console, Seeder, serve

pytestmark = pytest.mark.e2e

DOMAINS = ("7f3c1a2e-5b7d-4c1e-9a0b-2d4e6f8a0b1c", "0b9d2c4e-1a3f-4e5d-8c7b-6a5f4e3d2c1b")
READY = (NodeCondition("Ready", "True"),)
NOT_READY = (NodeCondition("Ready", "False", "KubeletNotReady"),)


def tray(rack: int, slot: int, **changes: object) -> Node:
    labels = {
        "nvidia.com/gpu.clique": f"{DOMAINS[rack]}.0",
        "remediator.io/rack": f"rack-{rack}",
        "remediator.io/tray": str(slot),
    }
    if slot >= 16:
        labels["remediator.io/spare"] = "true"
    name = f"nvl-r{rack}-t{slot:02d}"
    node = Node(name, name, "1", labels=labels, conditions=READY, gpus=4)
    return replace(node, **changes)  # type: ignore[arg-type]


def fleet() -> list[Node]:
    nodes = [tray(r, s) for r in range(2) for s in range(18)]
    nodes[3] = tray(0, 3, unschedulable=True)
    nodes[7] = tray(0, 7, conditions=NOT_READY)
    loose = Node("gpu-node-99", "gpu-node-99", "1", conditions=READY, gpus=8)
    return [*nodes, loose]


def gang() -> list[Pod]:
    pods = [
        Pod(
            "training",
            f"gang-r0-c0-{s}",
            f"p{s}",
            node_name=f"nvl-r0-t{s:02d}",
            phase="Running",
            labels={"remediator.io/gang": "gang-r0-c0"},
        )
        for s in range(16)
    ]
    pods.append(
        Pod("training", "gang-r0-c0-16", "p16", labels={"remediator.io/gang": "gang-r0-c0"})
    )
    return pods


@pytest.fixture
def racks(console: Console) -> Iterator[tuple[Console, str, int]]:
    seeder = Seeder(console)
    rid = seeder.create("nvl-r0-t05", "xid-79", SignalKind.XID, 79)
    seeder.walk(rid, State.QUARANTINED)
    deps = replace(
        console.deps, registry=CollectorRegistry(), list_nodes=fleet, list_gang_pods=gang
    )
    app = create_app(deps)
    with serve(app) as url:
        yield console, url, rid


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_each_rack_is_a_grid_of_its_trays(
    browser: Browser, racks: tuple[Console, str, int]
) -> None:
    _, url, rid = racks
    for label, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
        page = new_page(browser, viewport)
        login(page, url, OPERATOR_TOKEN, "alice", "/racks")
        rack0 = page.locator(f"section.domain[data-domain='{DOMAINS[0]}']")
        expect(rack0.locator("h2")).to_contain_text("rack-0")
        trays = rack0.locator("li.tray")
        expect(trays).to_have_count(18)
        expect(trays.nth(3)).to_have_attribute("data-state", "cordoned")
        expect(trays.nth(5)).to_have_attribute("data-state", "in remediation")
        expect(trays.nth(5).locator("a.rem")).to_have_text(f"#{rid}")
        expect(trays.nth(7)).to_have_attribute("data-state", "NotReady")
        expect(trays.nth(16)).to_have_attribute("data-state", "spare")
        expect(trays.nth(0)).to_have_attribute("data-state", "Ready")
        expect(rack0.locator("table.jobs tbody tr")).to_contain_text("training/gang-r0-c0")
        expect(rack0.locator("table.jobs tbody tr td.num").last).to_have_text("1")  # pending
        expect(rack0.locator("ul.domain-remediations")).to_contain_text(f"#{rid} nvl-r0-t05")
        rack1 = page.locator(f"section.domain[data-domain='{DOMAINS[1]}']")
        expect(rack1.locator("li.tray[data-state='Ready']")).to_have_count(16)
        expect(rack1.locator("ul.domain-remediations")).to_contain_text("None.")
        expect(page.locator("#unplaced strong")).to_have_text("1")
        width = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert width <= 0, f"the rack view scrolls sideways at {label} width"
        columns = page.evaluate(
            "getComputedStyle(document.querySelector('ol.trays')).gridTemplateColumns"
            ".split(' ').length"
        )
        assert columns == (6 if label == "desktop" else 3)
        shot(page, f"{label}-racks")
        page.context.close()


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_the_domains_api(racks: tuple[Console, str, int]) -> None:
    _, url, rid = racks
    auth = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    listed = httpx.get(f"{url}/api/v1/domains", headers=auth).json()
    assert [d["id"] for d in listed["domains"]] == list(DOMAINS)  # by rack name: rack-0, rack-1
    assert listed["unplaced"] == 1 and listed["unplaced_nodes"] == ["gpu-node-99"]
    one = httpx.get(f"{url}/api/v1/domains/{DOMAINS[0]}", headers=auth).json()
    assert one["counts"] == {
        "Ready": 13,
        "cordoned": 1,
        "in remediation": 1,
        "NotReady": 1,
        "spare": 2,
    }
    assert one["remediations"] == [
        {"id": rid, "node": "nvl-r0-t05", "policy": "xid-79", "state": "quarantined"}
    ]
    assert one["jobs"][0]["running"] == 16 and len(one["jobs"][0]["nodes"]) == 16
    missing = httpx.get(f"{url}/api/v1/domains/no-such-domain", headers=auth)
    assert missing.status_code == 404
