"""The inline SVG charts: well-formed, scaled to the data, labels escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import date, timedelta

from remediator.store.records import DailyCount, Percentiles
from remediator.web import charts

SVG = "{http://www.w3.org/2000/svg}"
DAYS = [date(2026, 3, 1) + timedelta(days=i) for i in range(7)]


def _bars(svg: str) -> list[ET.Element]:
    root = ET.fromstring(svg)
    return [r for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]


def test_nice_max_rounds_up_to_1_2_5() -> None:
    assert [charts._nice_max(v) for v in (1, 2, 3, 6, 11, 240)] == [1, 2, 5, 10, 20, 500]


def test_daily_bars_stack_per_kind() -> None:
    counts = [
        DailyCount(DAYS[0], "xid", 4),
        DailyCount(DAYS[0], "thermal", 1),
        DailyCount(DAYS[3], "xid", 2),
        DailyCount(date(2020, 1, 1), "xid", 99),  # outside the window: not drawn
    ]
    svg = str(charts.daily_by_kind(counts, DAYS))
    bars = _bars(svg)
    titles = sorted(b.find(f"{SVG}title").text or "" for b in bars)  # type: ignore[union-attr]
    assert titles == ["2026-03-01 thermal: 1", "2026-03-01 xid: 4", "2026-03-04 xid: 2"]
    heights = {b.find(f"{SVG}title").text: float(b.get("height", 0)) for b in bars}  # type: ignore[union-attr]
    assert heights["2026-03-01 xid: 4"] == 2 * heights["2026-03-04 xid: 2"]
    assert ">5</text>" in svg  # the axis tops out at the next round number above 5


def test_daily_bars_escape_kind_names_and_say_when_empty() -> None:
    svg = str(charts.daily_by_kind([DailyCount(DAYS[1], "<b>&", 1)], DAYS))
    assert "<b>" not in svg and "&lt;b&gt;&amp;" in svg
    ET.fromstring(svg)
    assert "no remediations in this window" in str(charts.daily_by_kind([], DAYS))


def test_repair_times_in_flow_order_with_overall_last() -> None:
    svg = str(
        charts.repair_times(
            Percentiles(10, 400.0, 900.0),
            {
                "draining": Percentiles(10, 100.0, 300.0),
                "quarantined": Percentiles(10, 2.0, 4.0),
                "custom": Percentiles(1, 5.0, 5.0),
            },
        )
    )
    root = ET.fromstring(svg)
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("text-anchor") == "end"]
    assert labels == ["quarantined", "draining", "custom", "detection → healthy"]
    widths = {
        (r.find(f"{SVG}title").text or "").split(" (")[0]: float(r.get("width", 0))  # type: ignore[union-attr]
        for r in _bars(svg)
    }
    assert widths["detection → healthy p90 900s"] > widths["detection → healthy median 400s"]
    assert widths["draining p90 300s"] == widths["detection → healthy p90 900s"] / 3
    assert "median 6m 40s · p90 15m" in svg
    assert "no finished remediations yet" in str(charts.repair_times(None, {}))


def test_legend_keys_do_not_overlap_long_kind_names() -> None:
    kinds = ["infiniband", "node_condition", "nvlink", "thermal", "xid"]
    svg = str(charts.daily_by_kind([DailyCount(DAYS[0], k, 1) for k in kinds], DAYS))
    root = ET.fromstring(svg)
    keys = [r for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is None]
    labels = [t for t in root.iter(f"{SVG}text") if t.text in kinds]
    assert [t.text for t in labels] == kinds
    for label, next_key in zip(labels, keys[1:], strict=False):
        label_end = float(label.get("x", 0)) + 6 * len(label.text or "")
        assert float(next_key.get("x", 0)) > label_end, label.text


def test_legends_wrap_inside_the_chart_and_name_every_series() -> None:
    """Policy names are long: seven of them laid out on one line ran past the 720 px viewBox,
    so the biggest series had no legend entry a reader could see."""
    names = [f"xid-{n}-a-rather-long-policy-name" for n in range(7)]
    values = {DAYS[0]: {name: float(i + 1) for i, name in enumerate(names)}}
    root = ET.fromstring(str(charts.daily_stacked(values, DAYS, "GPU-hours", "none")))
    width = float(root.get("viewBox", "").split()[2])
    height = float(root.get("viewBox", "").split()[3])
    keys = {t.text: t for t in root.iter(f"{SVG}text") if t.text in names}
    assert set(keys) == set(names)
    for name, text in keys.items():
        # About 7 px a character at the legend's size.
        assert float(text.get("x", 0)) + 7 * len(name) <= width, name
    rows = sorted({float(t.get("y", 0)) for t in keys.values()})
    assert len(rows) > 1
    bars = _bars(str(charts.daily_stacked(values, DAYS, "GPU-hours", "none")))
    assert min(float(b.get("y", 0)) for b in bars) > rows[-1]  # the plot starts below the keys
    assert all(float(b.get("y", 0)) + float(b.get("height", 0)) <= height for b in bars)
