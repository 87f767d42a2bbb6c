"""A backtest report as text (a terminal), Markdown (a pull-request comment) or JSON (machines,
and the console's upload)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from remediator.backtest.compare import Item, Report

SHOWN = 50  # items per list in text and Markdown; JSON has them all


def to_json(report: Report) -> dict[str, Any]:
    return {
        "cluster": report.cluster,
        "since": report.since.isoformat(),
        "until": report.until.isoformat(),
        "baseline": {
            "name": report.baseline_name,
            "remediations": len(report.baseline.opened),
            "holds": len(report.baseline.held),
            "cycles": report.baseline.cycles,
            "readings": report.baseline.readings,
        },
        "proposed": {
            "name": report.proposed_name,
            "remediations": len(report.proposed.opened),
            "holds": len(report.proposed.held),
            "cycles": report.proposed.cycles,
            "readings": report.proposed.readings,
        },
        "history": {"remediations": report.history_count},
        "added": [i.to_json() for i in report.added],
        "removed": [i.to_json() for i in report.removed],
        "changed": [i.to_json() for i in report.changed],
        "mismatches": [i.to_json() for i in report.mismatches],
        "holds": {
            "added": [i.to_json() for i in report.holds_added],
            "removed": [i.to_json() for i in report.holds_removed],
        },
        "breaker": {
            "baseline": [
                {"time": t.at.isoformat(), "reason": t.reason} for t in report.trips_baseline
            ],
            "proposed": [
                {"time": t.at.isoformat(), "reason": t.reason} for t in report.trips_proposed
            ],
            "changed": report.trips_changed,
        },
        "out_of_service": report.out_of_service(),
        "per_policy": report.per_policy(),
        "per_node": report.per_node(),
        "days": report.days(),
    }


def to_json_text(report: Report) -> str:
    return json.dumps(to_json(report), indent=2)


def _summary(report: Report) -> list[str]:
    oos = report.out_of_service()
    where = f"cluster {report.cluster}, " if report.cluster else ""
    read, also = report.baseline, report.proposed
    proposed_read = (
        f" (the proposed replay: {also.readings} in {also.cycles})"
        if (also.readings, also.cycles) != (read.readings, read.cycles)
        else ""
    )
    return [
        f"{where}window {report.since.isoformat()} to {report.until.isoformat()}",
        f"record: {read.readings} readings in {read.cycles} cycles read{proposed_read}",
        f"baseline ({report.baseline_name}): {len(report.baseline.opened)} remediations, "
        f"{len(report.baseline.held)} held decisions, {len(report.baseline.trips)} breaker trips",
        f"proposed ({report.proposed_name}): {len(report.proposed.opened)} remediations, "
        f"{len(report.proposed.held)} held decisions, {len(report.proposed.trips)} breaker trips",
        f"differences: {len(report.added)} added, {len(report.removed)} removed, "
        f"{len(report.changed)} changed; holds {len(report.holds_added)} added, "
        f"{len(report.holds_removed)} removed",
        f"nodes out of service: {len(oos['baseline'])} → {len(oos['proposed'])} "
        f"(+{len(oos['added'])} -{len(oos['removed'])})",
        f"history: {report.history_count} remediations, {len(report.mismatches)} not reproduced "
        "by the baseline replay"
        + (" (do not trust this backtest until they are explained)" if report.mismatches else ""),
    ]


def to_text(report: Report) -> str:
    lines = _summary(report)
    for title, items in _sections(report):
        if not items:
            continue
        lines.append("")
        lines.append(f"{title} ({len(items)}):")
        for item in items[:SHOWN]:
            lines.append(f"  {item.at.isoformat()}  {item.node}  {item.policy}  {item.detail}")
        if len(items) > SHOWN:
            lines.append(f"  … and {len(items) - SHOWN} more (--format json lists all)")
    trips = _trips(report)
    if trips:
        lines.append("")
        lines.extend(trips)
    return "\n".join(lines) + "\n"


def to_markdown(report: Report) -> str:
    lines = ["### Policy backtest", ""]
    lines.extend(f"- {line}" for line in _summary(report))
    per_policy = report.per_policy()
    if per_policy:
        lines += ["", "| policy | added | removed | changed | holds added | holds removed |"]
        lines.append("| --- | ---: | ---: | ---: | ---: | ---: |")
        for policy, counts in per_policy.items():
            lines.append(
                f"| {_cell(policy)} | {counts.get('added', 0)} | {counts.get('removed', 0)} | "
                f"{counts.get('changed', 0)} | {counts.get('holds_added', 0)} | "
                f"{counts.get('holds_removed', 0)} |"
            )
    for title, items in _sections(report):
        if not items:
            continue
        lines += ["", f"<details><summary>{title} ({len(items)})</summary>", ""]
        lines += ["| time | node | policy | detail |", "| --- | --- | --- | --- |"]
        for item in items[:SHOWN]:
            lines.append(
                f"| {item.at.isoformat()} | {_cell(item.node)} | {_cell(item.policy)} | "
                f"{_cell(item.detail)} |"
            )
        if len(items) > SHOWN:
            lines.append(f"| … | {len(items) - SHOWN} more | | |")
        lines += ["", "</details>"]
    trips = _trips(report)
    if trips:
        lines += ["", *(f"- {t}" for t in trips)]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _sections(report: Report) -> list[tuple[str, Sequence[Item]]]:
    return [
        ("Added remediations", report.added),
        ("Removed remediations", report.removed),
        ("Changed remediations", report.changed),
        ("Budget holds added", report.holds_added),
        ("Budget holds removed", report.holds_removed),
        ("Mismatches with history", report.mismatches),
    ]


def _trips(report: Report) -> list[str]:
    if not report.trips_changed:
        return []
    lines = ["Breaker trips change:"]
    for name, trips in (("baseline", report.trips_baseline), ("proposed", report.trips_proposed)):
        shown = ", ".join(t.at.isoformat() for t in trips) or "none"
        lines.append(f"{name}: {shown}")
    return lines
