"""The console in Chromium at phone width (390 x 844) and at desktop width: no page scrolls
sideways, tables collapse to rows, filters fold away; the waiting list with a failed
remediation; the audit page after each command; the API docs with the network cut off; a state
change that appears without a reload.
Screenshots of every page at both widths land in test-artifacts/console/."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Browser, Page, Route, expect

from remediator.model.states import State
from tests.fixtures.browser import DESKTOP, PHONE, login, new_page, shot
from tests.fixtures.web import OPERATOR_TOKEN, Console, serve

pytestmark = pytest.mark.e2e


@pytest.fixture
def base_url(console: Console) -> Iterator[str]:
    with serve(console.app) as url:
        yield url


def pages_of(console: Console) -> dict[str, str]:
    ids = console.ids
    return {
        "overview": "/",
        "list": "/remediations",
        "list-filtered": "/remediations?state=held&state=failed",
        "detail-done": f"/remediations/{ids['done']}",
        "detail-failed": f"/remediations/{ids['failed']}",
        "detail-held": f"/remediations/{ids['held']}",
        "detail-opt-out": f"/remediations/{ids['opt_out']}",
        "node": "/nodes/gpu-node-01",
        "policies": "/policies",
        "audit": "/audit",
        "optouts": "/optouts",
        "runbook": "/runbooks/xid-79",
        "backtest": "/backtest",
        "api-docs": "/api/docs",
    }


def sideways(page: Page) -> int:
    """How far the page reaches past the viewport's right edge, in CSS pixels."""
    width: int = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    return width


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_no_page_scrolls_sideways_at_phone_width(
    browser: Browser, console: Console, base_url: str
) -> None:
    for label, viewport in (("phone", PHONE), ("desktop", DESKTOP)):
        page = new_page(browser, viewport)
        page.goto(base_url + "/login")
        assert sideways(page) <= 0, f"login at {label}"
        shot(page, f"{label}-login")
        login(page, base_url, OPERATOR_TOKEN, "alice")
        for name, path in pages_of(console).items():
            page.goto(base_url + path)
            if name == "api-docs":
                expect(page.locator(".opblock").first).to_be_visible()
            assert sideways(page) <= 0, f"{name} scrolls sideways at {label} width"
            shot(page, f"{label}-{name}")
        if label == "phone":
            page.goto(base_url + "/remediations")
            expect(page.locator("details.fold")).not_to_have_attribute("open", "")
            expect(page.locator("form.filters input[name=q]")).to_be_hidden()
            expect(page.locator("table.remediations thead")).to_be_hidden()
            cell = page.locator("table.remediations tbody tr").first.locator("td").nth(1)
            expect(cell).to_have_attribute("data-label", "node")
            page.click("details.fold summary")
            expect(page.locator("form.filters input[name=q]")).to_be_visible()
            page.goto(base_url + "/")
            # The header's links stay on the dark bar, not drawn past it.
            nav = page.locator("header.top nav a").last.bounding_box()
            bar = page.locator("header.top").bounding_box()
            assert nav and bar and nav["y"] + nav["height"] <= bar["y"] + bar["height"]
        else:
            page.goto(base_url + "/remediations")
            expect(page.locator("form.filters input[name=q]")).to_be_visible()
        page.context.close()


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_waiting_list_names_what_each_action_would_do(
    browser: Browser, console: Console, base_url: str
) -> None:
    page = new_page(browser, PHONE)
    login(page, base_url, OPERATOR_TOKEN, "alice")
    waiting = page.locator("table.waiting tbody tr")
    expect(waiting).to_have_count(4)
    failed = page.locator(f"table.waiting tr[data-id='{console.ids['failed']}']")
    expect(failed).to_contain_text("no spare capacity in pool-b")
    expect(failed).to_contain_text("retry: asks the node pool for a new replacement of gpu-node-04")
    expect(failed.locator(".badge")).to_have_text("failed")
    shot(page, "phone-waiting")
    failed.locator("a", has_text="retry").click()
    expect(page.locator("#actions")).to_contain_text("asks the node pool for a new replacement")
    page.context.close()


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_audit_page_shows_each_command(browser: Browser, console: Console, base_url: str) -> None:
    page = new_page(browser)
    login(page, base_url, OPERATOR_TOKEN, "alice")
    ids = console.ids

    def command(path: str, name: str, reason: str, confirm: bool = False) -> None:
        page.goto(base_url + path)
        form = page.locator(f"form[action$='/{name}']")
        form.locator("input[name=reason]").fill(reason)
        if confirm:
            form.locator("input[name=confirm]").check()
        form.locator("button").click()
        expect(page.locator(".notice")).to_be_visible()
        page.goto(base_url + "/audit")
        top = page.locator("table.audit tbody tr").first
        expect(top).to_contain_text(name)
        expect(top).to_contain_text("alice (operator token")
        expect(top).to_contain_text(reason)
        expect(top).to_contain_text("127.0.0.1")
        expect(top.locator(".badge")).to_have_text("done")

    command(f"/remediations/{ids['approval']}", "approve", "GPU 3 checked")
    command(f"/remediations/{ids['held']}", "release", "PDB owner agreed")
    command(f"/remediations/{ids['failed']}", "retry", "capacity is back")
    command(f"/remediations/{ids['draining']}", "cancel", "wrong node", confirm=True)
    command("/", "pause", "maintenance window")
    command("/", "resume", "maintenance done")
    console.repository.trip_breaker(reason="6 nodes in 5 minutes")
    command("/", "reset-breaker", "one bad switch")
    expect(page.locator("table.audit tbody tr")).to_have_count(7)
    shot(page, "desktop-audit-after-commands")
    page.context.close()


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_api_docs_work_air_gapped_under_the_csp(browser: Browser, base_url: str) -> None:
    page = new_page(browser)
    here = urlparse(base_url).netloc
    elsewhere: list[str] = []
    violations: list[str] = []

    def only_here(route: Route) -> None:
        if urlparse(route.request.url).netloc == here:
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page.context.route("**/*", only_here)
    page.on(
        "console",
        lambda message: (
            violations.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    page.goto(base_url + "/api/docs")
    expect(page.locator(".opblock").first).to_be_visible()
    expect(page.locator("#swagger-ui")).to_contain_text("/api/v1/remediations")
    page.locator(".opblock-summary", has_text="/api/v1/overview").first.click()
    expect(page.locator(".opblock-body").first).to_be_visible()
    shot(page, "desktop-api-docs")
    assert elsewhere == [], f"the docs page reached outside: {elsewhere}"
    assert [v for v in violations if "script" in v] == [], violations
    page.context.close()


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_a_state_change_appears_without_reload(
    browser: Browser, console: Console, base_url: str
) -> None:
    page = new_page(browser)
    login(page, base_url, OPERATOR_TOKEN, "alice")
    rid = console.ids["draining"]
    page.goto(f"{base_url}/remediations/{rid}")
    expect(page.locator("h1 .badge")).to_have_text("draining")
    page.evaluate("window.__notReloaded = true")
    console.clock.advance(40)
    console.repository.transition(
        rid, State.DRAINING, State.REPLACING, action="drain_done", actor="controller-0"
    )
    expect(page.locator("h1 .badge")).to_have_text("replacing")
    expect(page.locator("table.timeline tbody tr").last).to_contain_text("drain_done")
    assert page.evaluate("window.__notReloaded") is True, "the page was reloaded"

    # The overview's waiting list and banners follow too.
    page.goto(base_url + "/")
    page.evaluate("window.__notReloaded = true")
    console.repository.transition(
        rid,
        State.REPLACING,
        State.HELD,
        action="replace_held",
        actor="controller-0",
        hold_reason="node pool API unreachable",
    )
    console.repository.record_source_health("prometheus", up=False, error="timed out")
    expect(page.locator(f"table.waiting tr[data-id='{rid}']")).to_contain_text(
        "node pool API unreachable"
    )
    expect(page.locator(".banner.source-down")).to_contain_text("prometheus is down")
    assert page.evaluate("window.__notReloaded") is True
    shot(page, "desktop-overview-live")
    page.context.close()
