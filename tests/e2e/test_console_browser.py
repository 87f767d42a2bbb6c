"""The console in a real headless Chromium against a real uvicorn: log in, read the overview,
filter the list, open a remediation, read its timeline, approve a waiting one as an operator.
Screenshots of every page land in test-artifacts/console/ for a person to look at."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, expect

from remediator.model.states import State
from tests.fixtures.browser import login, new_page, shot
from tests.fixtures.web import OPERATOR_TOKEN, READONLY_TOKEN, Console, serve

pytestmark = pytest.mark.e2e


@pytest.fixture
def base_url(console: Console) -> Iterator[str]:
    with serve(console.app) as url:
        yield url


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_on_call_walkthrough(browser: Browser, console: Console, base_url: str) -> None:
    page = new_page(browser)
    page.goto(base_url + "/")
    shot(page, "01-login")
    login(page, base_url, OPERATOR_TOKEN, "alice")

    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    waiting_tile = page.locator("a.tile", has_text="waiting for approval")
    expect(waiting_tile.locator(".n")).to_have_text("1")
    expect(page.locator("svg.chart").first).to_be_visible()
    shot(page, "02-overview")

    page.click("header nav >> text=Remediations")
    expect(page.locator("table.remediations tbody tr")).to_have_count(6)
    shot(page, "03-list")

    page.fill("form.filters input[name=q]", "node-02")
    page.click("form.filters button[type=submit]")
    rows = page.locator("table.remediations tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("gpu-node-02")
    expect(rows.first).to_contain_text("awaiting approval")
    shot(page, "04-list-filtered")

    page.click(f"table.remediations a[href='/remediations/{console.ids['approval']}']")
    expect(page.locator("table.timeline")).to_contain_text("awaiting approval")
    expect(page.locator("table.timeline")).to_contain_text("controller-0")
    shot(page, "05-detail-waiting")

    page.fill("form[action$='/approve'] input[name=reason]", "GPU 3 checked, go ahead")
    page.click("form[action$='/approve'] button")
    expect(page.locator(".notice")).to_contain_text("Approved")
    expect(page.locator("h1 .badge")).to_have_text("quarantined")
    last = page.locator("table.timeline tbody tr").last
    expect(last).to_contain_text("alice (operator token")
    expect(last).to_contain_text("GPU 3 checked, go ahead")
    shot(page, "06-detail-approved")

    record = console.repository.get(console.ids["approval"])
    assert record is not None and record.state is State.QUARANTINED
    assert record.events[-1].actor.startswith("alice (operator token")

    page.goto(f"{base_url}/remediations/{console.ids['done']}")
    expect(page.locator("table.timeline tbody tr")).to_have_count(9)
    expect(page.get_by_text("checkpointed", exact=True)).to_be_visible()
    expect(page.get_by_text("gpu-node-91")).to_be_visible()
    expect(page.locator("pre")).to_contain_text("name: xid-79-fallen-off-bus")
    shot(page, "07-detail-done")

    page.goto(f"{base_url}/remediations/{console.ids['held']}")
    expect(page.locator(".problem")).to_contain_text("PodDisruptionBudget")
    expect(page.locator("a[href='/runbooks/drain-stuck-pdb']")).to_be_visible()
    expect(page.locator("form[action$='/release'] button")).to_be_visible()
    shot(page, "07-detail-held")

    page.goto(f"{base_url}/remediations/{console.ids['done']}")
    page.click("h1 a[href='/nodes/gpu-node-01']")
    expect(page.get_by_role("heading", name="Node gpu-node-01")).to_be_visible()
    shot(page, "08-node")

    page.goto(base_url + "/policies")
    shot(page, "09-policies", full_page=False)
    page.click("table a[href='#p-xid-79-fallen-off-bus']")
    page.click("#p-xid-79-fallen-off-bus summary")
    expect(page.locator("#p-xid-79-fallen-off-bus pre")).to_contain_text("codes: [79]")
    shot(page, "09-policy-open", full_page=False)

    page.goto(base_url + "/runbooks/xid-79")
    expect(page.get_by_role("heading", name="XID 79: GPU has fallen off the bus")).to_be_visible()
    shot(page, "10-runbook")
    page.close()


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_read_only_sees_no_actions(browser: Browser, console: Console, base_url: str) -> None:
    page = new_page(browser)
    login(page, base_url, READONLY_TOKEN, "bob", f"/remediations/{console.ids['approval']}")
    expect(page.locator("table.timeline")).to_be_visible()
    expect(page.locator("form[action$='/approve']")).to_have_count(0)
    page.goto(base_url + "/")
    expect(page.locator("form[action='/controller/pause']")).to_have_count(0)
    page.close()
