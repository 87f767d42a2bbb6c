"""The console's rough edges found by an on-call walk-through at 1400 x 900 and 390 x 844: a
filtered list that keeps up, the diagnostics table on a phone, words broken mid-token at desktop
width, and what waits for a human first on every width.
Screenshots land in test-artifacts/console/ for a person to look at."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from remediator.model.states import State
from tests.fixtures.browser import DESKTOP, PHONE, login, new_page, shot
from tests.fixtures.web import OPERATOR_TOKEN, Console, Seeder, serve

pytestmark = pytest.mark.e2e

# Every word of the page's text (outside code blocks and charts) whose letters land on more
# than one line: a word broken mid-token.
BROKEN_WORDS = """() => {
  const broken = [];
  const walker = document.createTreeWalker(document.querySelector("main"), NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest("pre, svg, script, style")) continue;
    // Between break opportunities: a line may end after a hyphen or a slash.
    const re = /[^\\s/-]{2,}/g;
    let m;
    while ((m = re.exec(node.textContent)) !== null) {
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const tops = new Set(Array.from(range.getClientRects(), (r) => Math.round(r.top)));
      if (tops.size > 1) broken.push(m[0]);
    }
  }
  return broken;
}"""


@pytest.fixture
def base_url(console: Console) -> Iterator[str]:
    with serve(console.app) as url:
        yield url


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_a_filtered_list_keeps_up(browser: Browser, console: Console, base_url: str) -> None:
    """The overview's tiles link to state-filtered lists; their ticked boxes are the filter,
    not someone typing, so the list refreshes in place."""
    page = new_page(browser)
    login(page, base_url, OPERATOR_TOKEN, "alice", "/remediations?state=held")
    rows = page.locator("table.remediations tbody tr")
    expect(rows).to_have_count(1)
    page.evaluate("window.__notReloaded = true")
    rid = console.ids["draining"]
    console.clock.advance(30)
    console.repository.transition(
        rid,
        State.DRAINING,
        State.HELD,
        action="drain_held",
        actor="controller-0",
        hold_reason="PodDisruptionBudget serve/db allows 0",
    )
    expect(rows).to_have_count(2)
    expect(page.locator(f"table.remediations a[href='/remediations/{rid}']")).to_be_visible()
    assert page.evaluate("window.__notReloaded") is True, "the page was reloaded"
    page.context.close()


def _seed_diagnostics(console: Console) -> int:
    rid = console.ids["draining"]
    tests: list[dict[str, object]] = [
        {"category": "Hardware", "test": f"test-{n:02d}", "gpu": n % 8, "status": "Pass"}
        for n in range(60)
    ]
    tests.insert(
        37,
        {
            "category": "Memory",
            "test": "memory_bandwidth",
            "gpu": 3,
            "status": "Fail",
            "detail": "row remap pending",
        },
    )
    tests.insert(51, {"category": "Stress", "test": "targeted_stress", "gpu": 3, "status": "Fail"})
    Seeder(console).note(rid, "diagnose_done", {"verdict": "failed", "tests": tests})
    return rid


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_diagnostics_show_failures_first_with_their_own_labels(
    browser: Browser, console: Console, base_url: str
) -> None:
    rid = _seed_diagnostics(console)
    for label, viewport in (("phone", PHONE), ("desktop", DESKTOP)):
        page = new_page(browser, viewport)
        login(page, base_url, OPERATOR_TOKEN, "alice", f"/remediations/{rid}")
        diag = page.locator("table.diag").first
        shown = diag.locator("tbody tr:visible")
        expect(shown).to_have_count(2)
        expect(shown.nth(0)).to_contain_text("memory_bandwidth")
        expect(shown.nth(1)).to_contain_text("targeted_stress")
        folded = page.locator("details.passes")
        expect(folded.locator("summary")).to_contain_text("60 passed")
        if label == "phone":
            labels = diag.locator("tbody td").evaluate_all(
                "cells => cells.map(c => c.getAttribute('data-label'))"
            )
            assert set(labels) <= {"category", "test", "GPU", "result", None}, labels
            assert "category" in labels
        shot(page, f"{label}-detail-diagnostics")
        folded.locator("summary").click()
        expect(folded.locator("tbody tr").first).to_be_visible()
        expect(folded.locator("tbody tr")).to_have_count(60)
        page.context.close()


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_no_word_is_broken_mid_token_at_desktop_width(
    browser: Browser, console: Console, base_url: str
) -> None:
    page = new_page(browser, DESKTOP)
    login(page, base_url, OPERATOR_TOKEN, "alice")
    for path in (
        "/",
        "/remediations",
        f"/remediations/{console.ids['done']}",
        f"/remediations/{console.ids['held']}",
        "/nodes/gpu-node-01",
        "/audit",
        "/policies",
    ):
        page.goto(base_url + path)
        broken = page.evaluate(BROKEN_WORDS)
        assert broken == [], f"{path} breaks words mid-token at {DESKTOP['width']} px: {broken}"
    page.context.close()


def _below_fold(page: Page) -> float:
    box = page.locator("table.waiting tbody tr").first.bounding_box()
    assert box is not None
    height: int = page.evaluate("window.innerHeight")
    return box["y"] + box["height"] - height


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_waiting_for_you_comes_first_on_every_width(
    browser: Browser, console: Console, base_url: str
) -> None:
    for label, viewport in (("phone", PHONE), ("desktop", DESKTOP)):
        page = new_page(browser, viewport)
        login(page, base_url, OPERATOR_TOKEN, "alice")
        expect(page.locator("table.waiting tbody tr")).to_have_count(4)
        assert _below_fold(page) <= 0, f"the first waiting row is below the fold at {label}"
        waiting = page.locator("#waiting").bounding_box()
        automation = page.locator("section.card", has_text="Automation").first.bounding_box()
        assert waiting and automation and waiting["y"] < automation["y"], label
        shot(page, f"{label}-overview-waiting-first", full_page=False)
        page.context.close()
