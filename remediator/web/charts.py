"""Server-side inline SVG charts: the browser needs no chart library and no network, and the
picture is in the page the moment it loads. Pure functions from numbers to markup; every label
is escaped and every bar carries a <title> so hovering shows the exact figure."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import date

from markupsafe import Markup, escape

from remediator.model.states import State
from remediator.store.records import DailyCount, Percentiles
from remediator.web.views import format_duration

# Okabe-Ito: tells kinds apart for the colour-blind too, and stays legible on white.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#555555", "#000000")
STEP_ORDER = (
    State.QUEUED,
    State.DETECTED,
    State.AWAITING_APPROVAL,
    State.QUARANTINED,
    State.HELD_BY_OPT_OUT,
    State.CHECKPOINTING,
    State.DRAINING,
    State.REPLACING,
    State.VERIFYING,
    State.HELD,
)
LEGEND_ROW = 16
FONT = 'font-family="system-ui, sans-serif" font-size="11" fill="#333"'


def _nice_max(value: int) -> int:
    """The smallest of 1, 2, 5 times 10^k at or above `value`, for round axis ticks."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if factor * step >= value:
                return factor * step
        step *= 10


def daily_by_kind(counts: Sequence[DailyCount], days: Sequence[date]) -> Markup:
    """Stacked bars: remediations per day, one colour per signal kind."""
    per_day: dict[date, dict[str, float]] = {d: {} for d in days}
    for c in counts:
        if c.day in per_day:
            per_day[c.day][c.signal_kind] = per_day[c.day].get(c.signal_kind, 0) + c.count
    return daily_stacked(
        per_day, days, "Remediations per day by signal kind", "no remediations in this window"
    )


def daily_outcomes(counts: Sequence[DailyCount], days: Sequence[date]) -> Markup:
    """Stacked bars: succeeded remediations per day, repaired (node returned) vs replaced."""
    per_day: dict[date, dict[str, float]] = {d: {} for d in days}
    for c in counts:
        if c.day in per_day:
            per_day[c.day][c.signal_kind] = per_day[c.day].get(c.signal_kind, 0) + c.count
    return daily_stacked(
        per_day, days, "Remediations per day by outcome", "no node repaired or replaced yet"
    )


def daily_stacked(
    values: Mapping[date, Mapping[str, float]],
    days: Sequence[date],
    label: str,
    empty: str,
    unit: str = "",
) -> Markup:
    """Stacked bars per day, one colour per series (signal kind, policy, …)."""
    width, height, left, right, top, bottom = 720, 230, 40, 10, 34, 24
    kinds = sorted({k for v in values.values() for k in v})
    colour = {kind: PALETTE[i % len(PALETTE)] for i, kind in enumerate(kinds)}
    keys = _legend(kinds, left, width - right)
    # Each extra row of keys pushes the plot down rather than squeezing it.
    extra = (max((y for _, _, y in keys), default=0) // LEGEND_ROW) * LEGEND_ROW
    top += extra
    height += extra
    per_day = {d: dict(values.get(d, {})) for d in days}
    peak = _nice_max(math.ceil(max((sum(v.values()) for v in per_day.values()), default=0)) or 1)
    plot_w, plot_h = width - left - right, height - top - bottom
    slot = plot_w / max(len(days), 1)
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for kind, key_x, key_y in keys:
        parts.append(
            f'<rect x="{key_x}" y="{key_y + 6}" width="10" height="10" fill="{colour[kind]}"/>'
            f'<text x="{key_x + 14}" y="{key_y + 15}" {FONT}>{escape(kind)}</text>'
        )
    for fraction in (0, 0.5, 1):
        tick_y = top + plot_h * (1 - fraction)
        parts.append(
            f'<line x1="{left}" x2="{width - right}" y1="{tick_y:.1f}" y2="{tick_y:.1f}" '
            'stroke="#ddd"/>'
            f'<text x="{left - 6}" y="{tick_y + 4:.1f}" text-anchor="end" {FONT}>'
            f"{peak * fraction:g}</text>"
        )
    label_every = max(1, len(days) // 10)
    for i, day in enumerate(days):
        x = left + i * slot + slot * 0.15
        bar_w = slot * 0.7
        y: float = top + plot_h
        for kind in kinds:
            n = per_day[day].get(kind, 0)
            if not n:
                continue
            h = plot_h * n / peak
            y -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
                f'fill="{colour[kind]}"><title>{day.isoformat()} {escape(kind)}: '
                f"{n:g}{unit}</title></rect>"
            )
        if i % label_every == 0 or i == len(days) - 1:
            parts.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{height - 6}" text-anchor="middle" {FONT}>'
                f"{day.strftime('%m-%d')}</text>"
            )
    if not kinds:
        parts.append(
            f'<text x="{width / 2}" y="{top + plot_h / 2}" text-anchor="middle" {FONT}>'
            f"{escape(empty)}</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def _legend(kinds: Sequence[str], left: int, right_edge: int) -> list[tuple[str, int, int]]:
    """Where each series' key goes (name, x, y offset): left to right, wrapping to a new row
    before a key would run past the chart's right edge, so every series is named in view."""
    placed: list[tuple[str, int, int]] = []
    x, y = left, 0
    for kind in kinds:
        # Each key as wide as its label (about 7 px a character at this size).
        wide = 14 + 7 * len(kind)
        if x > left and x + wide > right_edge:
            x, y = left, y + LEGEND_ROW
        placed.append((kind, x, y))
        x += wide + 18
    return placed


def repair_times(overall: Percentiles | None, by_step: Mapping[str, Percentiles]) -> Markup:
    """Horizontal bars per step: the solid bar is the median, the pale one reaches the p90."""
    known = [s.value for s in STEP_ORDER if s.value in by_step]
    rows: list[tuple[str, Percentiles]] = [(step, by_step[step]) for step in known]
    rows += [(step, by_step[step]) for step in sorted(by_step) if step not in known]
    if overall is not None:
        rows.append(("detection → healthy", overall))
    width, left, right, row_h, top = 720, 170, 190, 26, 8
    height = top + row_h * max(len(rows), 1) + 8
    longest = max((p.p90_seconds for _, p in rows), default=0.0) or 1.0
    plot_w = width - left - right
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="Time to repair by step, median and p90" xmlns="http://www.w3.org/2000/svg">'
    ]
    for i, (step, stats) in enumerate(rows):
        y = top + i * row_h
        p90_w = plot_w * stats.p90_seconds / longest
        med_w = plot_w * stats.median_seconds / longest
        weight = ' font-weight="600"' if step == "detection → healthy" else ""
        summary = (
            f"median {format_duration(stats.median_seconds)} · "
            f"p90 {format_duration(stats.p90_seconds)} · n={stats.count}"
        )
        parts.append(
            f'<text x="{left - 8}" y="{y + 16}" text-anchor="end" {FONT}{weight}>'
            f"{escape(step)}</text>"
            f'<rect x="{left}" y="{y + 4}" width="{max(p90_w, 1):.1f}" height="16" '
            f'fill="#9ecae1"><title>{escape(step)} p90 {stats.p90_seconds:.0f}s '
            f"(n={stats.count})</title></rect>"
            f'<rect x="{left}" y="{y + 4}" width="{max(med_w, 1):.1f}" height="16" '
            f'fill="#08519c"><title>{escape(step)} median {stats.median_seconds:.0f}s '
            f"(n={stats.count})</title></rect>"
            f'<text x="{left + max(p90_w, 1) + 6:.1f}" y="{y + 16}" {FONT}>{summary}</text>'
        )
    if not rows:
        parts.append(
            f'<text x="{width / 2}" y="{top + 14}" text-anchor="middle" {FONT}>'
            "no finished remediations yet</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
