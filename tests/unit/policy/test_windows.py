"""Maintenance windows in settings.yaml: read by APScheduler's CronTrigger in their own time
zone, a bad one a `file:line` problem with the last good settings kept, openings found purely."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from remediator.clock import FakeClock
from remediator.errors import PolicyError
from remediator.policy.loader import load_policy_dir
from remediator.policy.watcher import PolicyStore
from remediator.policy.windows import MaintenanceWindow, first_opening, openings, pool_windows

POLICY = """\
policies:
  - name: host-maintenance
    description: the cloud announced host maintenance
    why: drain at the job's checkpoint, not under it
    match: {kind: maintenance, labels: {code: system-reboot}}
    when: {before_deadline: 2h, at_checkpoint: true, window: pool}
    actions:
      - action: cordon
      - action: checkpoint
      - action: drain
"""

SETTINGS = """\
max_concurrent: 3
windows:
  nightly:
    start: "0 2 * * *"
    duration: 4h
    timezone: Europe/Berlin
    pools: [gpu-a, gpu-b]
  weekend:
    start: "0 0 * * sat"
    duration: 2d
    pools: [gpu-b]
planned: {max_concurrent: 4, per_pool: 2}
"""


def write(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


def problems_of(directory: Path) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        load_policy_dir(directory)
    return caught.value.problems


def test_windows_load_and_are_assigned_per_pool(tmp_path: Path) -> None:
    loaded = load_policy_dir(write(tmp_path, {"a.yaml": POLICY, "settings.yaml": SETTINGS}))
    windows = loaded.settings.windows
    assert sorted(windows) == ["nightly", "weekend"]
    assert windows["nightly"].duration == timedelta(hours=4)
    assert pool_windows(windows, "gpu-b") == ["nightly", "weekend"]
    assert pool_windows(windows, "gpu-a") == ["nightly"]
    assert pool_windows(windows, "cpu") == []
    assert pool_windows(windows, None) == []
    assert loaded.settings.planned.max_concurrent == 4
    policy = loaded.policy("host-maintenance")
    assert policy is not None and policy.when is not None
    assert policy.when.before_deadline == timedelta(hours=2) and policy.when.at_checkpoint


@pytest.mark.parametrize(
    ("line", "replacement", "problem"),
    [
        (
            '    start: "0 2 * * *"',
            '    start: "0 25 * * *"',
            "settings.yaml:3: windows.nightly: Value error, start '0 25 * * *': ",
        ),
        (
            '    start: "0 2 * * *"',
            '    start: "every night"',
            "settings.yaml:3: windows.nightly: Value error, start 'every night': expected five",
        ),
        (
            "    timezone: Europe/Berlin",
            "    timezone: Mars/Olympus",
            "settings.yaml:6: windows.nightly.timezone: unknown time zone 'Mars/Olympus'",
        ),
        (
            "    duration: 4h",
            "    duration: 8d",
            "settings.yaml:5: windows.nightly.duration: duration must be between 1m and 7d",
        ),
        (
            "    pools: [gpu-a, gpu-b]",
            "    pools: [gpu-a, gpu-a]",
            "settings.yaml:7: windows.nightly.pools: a pool is listed twice",
        ),
        (
            "  nightly:",
            "  pool:",
            "settings.yaml:2: windows: 'pool' means the node's own pool's windows",
        ),
    ],
)
def test_a_bad_window_is_a_file_line_problem(
    tmp_path: Path, line: str, replacement: str, problem: str
) -> None:
    assert line in SETTINGS
    bad = SETTINGS.replace(line, replacement)
    found = problems_of(write(tmp_path, {"a.yaml": POLICY, "settings.yaml": bad}))
    assert len(found) == 1, found
    assert found[0].replace("Value error, ", "").startswith(problem.replace("Value error, ", ""))


def test_a_policy_naming_an_unknown_window_is_refused_at_its_line(tmp_path: Path) -> None:
    policy = POLICY.replace("window: pool", "window: monthly")
    found = problems_of(write(tmp_path, {"a.yaml": policy, "settings.yaml": SETTINGS}))
    assert found == [
        "a.yaml:6: policies[0].when.window: no maintenance window 'monthly' in settings.yaml "
        "(windows: nightly, weekend; or 'pool' for the node's pool's windows)"
    ]
    named = policy.replace("window: monthly", "window: weekend")
    assert load_policy_dir(write(tmp_path, {"a.yaml": named})).policies


def test_the_last_good_windows_stay_after_a_bad_edit(tmp_path: Path) -> None:
    directory = write(tmp_path, {"a.yaml": POLICY, "settings.yaml": SETTINGS})
    store = PolicyStore(directory, FakeClock())
    assert store.reload_if_changed() is True
    good = store.active
    (directory / "settings.yaml").write_text(SETTINGS.replace("0 2 * * *", "61 2 * * *"))
    assert store.reload_if_changed() is False
    assert store.active is good
    assert good is not None and good.settings.windows["nightly"].start == "0 2 * * *"
    assert store.last_error is not None
    assert store.last_error.problems[0].startswith("settings.yaml:3: windows.nightly: ")


def nightly(zone: str = "Europe/Berlin") -> MaintenanceWindow:
    return MaintenanceWindow.model_validate(
        {"start": "0 2 * * *", "duration": "4h", "timezone": zone, "pools": ["gpu-a"]}
    )


def test_an_opening_is_read_in_the_windows_own_time_zone() -> None:
    # 02:00 in Berlin is 01:00 UTC in winter and 00:00 UTC in summer.
    winter = first_opening("nightly", nightly(), datetime(2026, 1, 10, 12, tzinfo=UTC))
    assert winter is not None
    assert winter.start == datetime(2026, 1, 11, 1, tzinfo=UTC)
    assert winter.end == datetime(2026, 1, 11, 5, tzinfo=UTC)
    summer = first_opening("nightly", nightly(), datetime(2026, 7, 10, 12, tzinfo=UTC))
    assert summer is not None and summer.start == datetime(2026, 7, 11, 0, tzinfo=UTC)


def test_an_opening_already_open_is_the_current_one() -> None:
    inside = datetime(2026, 1, 11, 3, tzinfo=UTC)
    current = first_opening("nightly", nightly(), inside)
    assert current is not None and current.contains(inside)
    assert current.start == datetime(2026, 1, 11, 1, tzinfo=UTC)
    # At its very end it is closed: the next night's is the first.
    closing = first_opening("nightly", nightly(), datetime(2026, 1, 11, 5, tzinfo=UTC))
    assert closing is not None and closing.start == datetime(2026, 1, 12, 1, tzinfo=UTC)


def test_openings_between_two_moments() -> None:
    windows = {"nightly": nightly("UTC")}
    found = openings(
        windows,
        ["nightly"],
        datetime(2026, 1, 10, 3, tzinfo=UTC),
        datetime(2026, 1, 12, 2, tzinfo=UTC),
    )
    assert [o.start.day for o in found] == [10, 11, 12]


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        (
            "match: {kind: maintenance, labels: {code: system-reboot}}",
            "match: {kind: xid, codes: [79]}",
            "a.yaml:2: policies[0]: when: plans around an announced event: match kind maintenance",
        ),
        (
            "      - action: drain\n",
            "      - action: drain\n      - action: reboot\n        via: maintenance\n"
            "      - action: diagnose\n      - action: uncordon\n    approval: required\n",
            "a.yaml:2: policies[0]: when: and approval: required: a planned moment cannot wait",
        ),
        (
            "    when: {before_deadline: 2h, at_checkpoint: true, window: pool}\n",
            "",
            "a.yaml:2: policies[0]: reboot via: maintenance starts an announced event: it needs",
        ),
        (
            "before_deadline: 2h,",
            "before_deadline: 2,",
            "a.yaml:6: policies[0].when.before_deadline: invalid duration 2",
        ),
    ],
)
def test_bad_planned_fields_are_file_line_problems(
    tmp_path: Path, old: str, new: str, problem: str
) -> None:
    policy = POLICY
    if "approval" not in new and "when" in old:
        # The third case: a ladder with `reboot via: maintenance` and no `when:`.
        policy = POLICY.replace(
            "      - action: drain\n",
            "      - action: drain\n      - action: reboot\n        via: maintenance\n"
            "      - action: diagnose\n      - action: uncordon\n",
        )
    assert old in policy
    found = problems_of(write(tmp_path, {"a.yaml": policy.replace(old, new)}))
    assert len(found) == 1, found
    assert found[0].startswith(problem), found
