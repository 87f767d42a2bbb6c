"""Reads a policy directory into one frozen PolicySet, or refuses it whole.

Every problem is reported at once as `file:line: field.path: message`, lines taken from the YAML
node tree so a reviewer can jump straight to the spot. Unknown XID codes are warnings, not errors:
NVIDIA adds codes with new drivers, and a policy may rightly name one before our catalog does."""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from remediator.clock import utcnow
from remediator.errors import PolicyError
from remediator.policy.fallbacks import fallback_problems
from remediator.policy.repeats import repeat_problems
from remediator.policy.schema import GlobalSettings, Policy, PolicyFile
from remediator.policy.windows import POOL_WINDOW
from remediator.signals import xid
from remediator.signals.model import SignalKind

SETTINGS_FILE = "settings.yaml"
XidCheck = Callable[[int], bool]


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a policy was written: 1-based first and last line in `file`."""

    file: str
    first_line: int
    last_line: int


@dataclass(frozen=True)
class PolicySet:
    policies: tuple[Policy, ...]
    settings: GlobalSettings
    commit: str | None
    dirty: bool
    content_hash: str
    loaded_at: datetime
    source_dir: Path
    files: Mapping[str, str]  # file name → text as loaded
    origins: Mapping[str, Origin] = field(default_factory=dict)  # policy name → where
    warnings: tuple[str, ...] = ()

    def policy(self, name: str) -> Policy | None:
        return next((p for p in self.policies if p.name == name), None)

    def source_of(self, name: str) -> str | None:
        """The policy's YAML exactly as it was in the file when this set was loaded."""
        origin = self.origins.get(name)
        if origin is None:
            return None
        lines = self.files[origin.file].splitlines()
        return "\n".join(lines[origin.first_line - 1 : origin.last_line]) + "\n"


def policy_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_file() and p.suffix in (".yaml", ".yml"))


def content_hash(texts: Mapping[str, str]) -> str:
    digest = hashlib.sha256()
    for name in sorted(texts):
        digest.update(name.encode() + b"\0" + texts[name].encode() + b"\0")
    return digest.hexdigest()


def in_catalog(code: int) -> bool:
    return xid.lookup(code) is not None


def load_policy_dir(
    directory: Path,
    *,
    known_xid: XidCheck = in_catalog,
    loaded_at: datetime | None = None,
) -> PolicySet:
    """Raise PolicyError listing every problem; nothing is half-loaded."""
    directory = Path(directory)
    if not directory.is_dir():
        raise PolicyError([f"{directory}: not a directory"])
    problems: list[str] = []
    warnings: list[str] = []
    texts: dict[str, str] = {}
    policies: list[Policy] = []
    origins: dict[str, Origin] = {}
    first_seen: dict[str, str] = {}
    fallback_at: dict[str, str] = {}
    repeat_at: dict[str, list[str]] = {}
    window_at: dict[str, str] = {}
    settings = GlobalSettings()
    for path in policy_files(directory):
        name = path.name
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{name}:1: file: cannot read: {exc}")
            continue
        texts[name] = text
        parsed = parse_yaml(name, text, problems)
        if parsed is None:
            continue
        node, data = parsed
        if name == SETTINGS_FILE:
            loaded = validate_model(GlobalSettings, name, node, data, problems)
            if isinstance(loaded, GlobalSettings):
                settings = loaded
            continue
        envelope = validate_model(PolicyFile, name, node, data, problems)
        if not isinstance(envelope, PolicyFile):
            continue
        for index, raw in enumerate(envelope.policies):
            where = f"policies[{index}]"
            line = _line_of(node, ("policies", index, "name"))
            # Names are checked before validation so a broken policy still claims its name.
            raw_name = raw.get("name") if isinstance(raw, dict) else None
            if isinstance(raw_name, str):
                if raw_name in first_seen:
                    problems.append(
                        f"{name}:{line}: {where}.name: duplicate policy name {raw_name!r} "
                        f"(first defined at {first_seen[raw_name]})"
                    )
                first_seen.setdefault(raw_name, f"{name}:{line}")
            policy = validate_model(Policy, name, node, data, problems, ("policies", index))
            if not isinstance(policy, Policy):
                continue
            policies.append(policy)
            at = _line_of(node, ("policies", index, "on_failure"))
            fallback_at[policy.name] = f"{name}:{at}: {where}.on_failure"
            of = policy.match.repeat.of if policy.match.repeat is not None else None
            repeat_at[policy.name] = [
                f"{name}:{_line_of(node, ('policies', index, 'match', 'repeat', 'of', i))}: "
                f"{where}.match.repeat.of[{i}]"
                for i in range(len(of or ()))
            ]
            at = _line_of(node, ("policies", index, "when", "window"))
            window_at[policy.name] = f"{name}:{at}: {where}.when.window"
            item = _child(node, ("policies", index))
            if item is not None:
                origins[policy.name] = Origin(
                    name, item.start_mark.line + 1, _last_line(item, text)
                )
            if policy.match.kind is SignalKind.XID:
                for i, code in enumerate(policy.match.codes or ()):
                    if not known_xid(code):
                        at = _line_of(node, ("policies", index, "match", "codes", i))
                        warnings.append(
                            f"{name}:{at}: {where}.match.codes[{i}]: XID {code} is not in the "
                            "catalog"
                        )
    problems.extend(fallback_problems(policies, fallback_at))
    problems.extend(repeat_problems(policies, repeat_at))
    problems.extend(when_problems(policies, settings, window_at))
    if not texts:
        problems.append(f"{directory}: no policy files (*.yaml)")
    if problems:
        raise PolicyError(problems)
    commit, dirty = git_revision(directory)
    return PolicySet(
        policies=tuple(policies),
        settings=settings,
        commit=commit,
        dirty=dirty,
        content_hash=content_hash(texts),
        loaded_at=loaded_at or utcnow(),
        source_dir=directory.resolve(),
        files=texts,
        origins=origins,
        warnings=tuple(warnings),
    )


def when_problems(
    policies: Sequence[Policy], settings: GlobalSettings, window_at: Mapping[str, str]
) -> list[str]:
    """A planned ladder's `window` must be `pool` or a window settings.yaml defines."""
    problems = []
    for policy in policies:
        wanted = policy.when.window if policy.when is not None else None
        if wanted is None or wanted == POOL_WINDOW or wanted in settings.windows:
            continue
        known = ", ".join(sorted(settings.windows)) or "none defined"
        problems.append(
            f"{window_at[policy.name]}: no maintenance window {wanted!r} in {SETTINGS_FILE} "
            f"(windows: {known}; or {POOL_WINDOW!r} for the node's pool's windows)"
        )
    return problems


def git_revision(directory: Path) -> tuple[str | None, bool]:
    """HEAD of the checkout holding `directory`, and whether that directory has local changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if head.returncode != 0:
            return None, False
        status = subprocess.run(
            ["git", "status", "--porcelain", "--", "."],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None, False
    return head.stdout.strip(), bool(status.stdout.strip())


def parse_yaml(name: str, text: str, problems: list[str]) -> tuple[yaml.Node, Any] | None:
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            problems.append(f"{name}:1: file: empty document")
            return None
        duplicates = _duplicate_keys(node)
        for line, path, key in duplicates:
            problems.append(f"{name}:{line}: {_dotted(path)}: duplicate key {key!r}")
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        message = exc.problem or exc.context or "invalid YAML"
        if exc.context and exc.problem and exc.context_mark is not None:
            message += f" ({exc.context} at line {exc.context_mark.line + 1})"
        problems.append(f"{name}:{line}: yaml: {message}")
        return None
    except yaml.YAMLError as exc:
        problems.append(f"{name}:1: yaml: {exc}")
        return None
    finally:
        loader.dispose()
    return node, data


def validate_model(
    model: type[BaseModel],
    name: str,
    node: yaml.Node,
    data: Any,
    problems: list[str],
    at: tuple[int | str, ...] = (),
) -> BaseModel | None:
    """Validate `data` (or the part of it at path `at`), adding one problem per error."""
    part = data
    for segment in at:
        part = part[segment]
    try:
        return model.model_validate(part)
    except ValidationError as exc:
        found = []
        for error in exc.errors():
            path = _data_path(data, (*at, *error["loc"]))
            line = _line_of(node, path)
            found.append((line, f"{name}:{line}: {_dotted(path) or '(top)'}: {_message(error)}"))
        problems.extend(text for _, text in sorted(found, key=lambda item: item[0]))
        return None


def _message(error: Mapping[str, Any]) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "required field missing"
    context = error.get("ctx") or {}
    field = str(context.get("discriminator", "")).strip("'")
    if kind == "union_tag_invalid":
        return f"unknown {field} {context['tag']!r} (expected one of {context['expected_tags']})"
    if kind == "union_tag_not_found":
        return f"required field missing: {field}"
    message = str(error["msg"])
    return message.removeprefix("Value error, ")


def _data_path(data: Any, loc: Sequence[int | str]) -> tuple[int | str, ...]:
    """Pydantic's location minus the segments it adds itself (discriminator tags such as
    `drain` in `actions.0.drain.timeout`), so the path names what is written in the file."""
    path: list[int | str] = []
    current = data
    for segment in loc:
        if isinstance(current, dict):
            if segment in current:
                path.append(segment)
                current = current[segment]
            elif current.get("action") == segment:
                continue
            else:
                path.append(segment)
                current = None
        elif isinstance(current, list) and isinstance(segment, int) and segment < len(current):
            path.append(segment)
            current = current[segment]
        else:
            path.append(segment)
            current = None
    return tuple(path)


def _dotted(path: Sequence[int | str]) -> str:
    out = ""
    for segment in path:
        out += f"[{segment}]" if isinstance(segment, int) else (f".{segment}" if out else segment)
    return out


def _child(node: yaml.Node, path: Sequence[int | str]) -> yaml.Node | None:
    current: yaml.Node | None = node
    for segment in path:
        current = _step(current, segment)[1] if current is not None else None
    return current


def _step(node: yaml.Node, segment: int | str) -> tuple[yaml.Node | None, yaml.Node | None]:
    """(key node, value node) for one path segment."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == str(segment):
                return key, value
    if (
        isinstance(node, yaml.SequenceNode)
        and isinstance(segment, int)
        and 0 <= segment < len(node.value)
    ):
        item: yaml.Node = node.value[segment]
        return item, item
    return None, None


def _line_of(node: yaml.Node, path: Sequence[int | str]) -> int:
    """The line of the deepest part of `path` present in the file (1-based): the key itself when
    it is there, else the mapping that lacks it."""
    current = node
    line = node.start_mark.line + 1
    for segment in path:
        key, value = _step(current, segment)
        if key is None or value is None:
            break
        line = key.start_mark.line + 1
        current = value
    return line


def _last_line(node: yaml.Node, text: str) -> int:
    """A block node's end mark sits at the start of the next item: step back over blank lines."""
    lines = text.splitlines()
    mark = node.end_mark
    ends_before = mark.line >= len(lines) or not lines[mark.line][: mark.column].strip()
    end = min(mark.line if ends_before else mark.line + 1, len(lines))
    while end > node.start_mark.line + 1 and not lines[end - 1].strip():
        end -= 1
    return end


def _duplicate_keys(
    node: yaml.Node, path: tuple[int | str, ...] = ()
) -> list[tuple[int, tuple[int | str, ...], str]]:
    """YAML loaders keep the last of two equal keys silently; in a reviewed policy that hides a
    mistake, so it is an error here."""
    found: list[tuple[int, tuple[int | str, ...], str]] = []
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                if key.value in seen:
                    found.append((key.start_mark.line + 1, (*path, key.value), key.value))
                seen.add(key.value)
                found.extend(_duplicate_keys(value, (*path, key.value)))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            found.extend(_duplicate_keys(item, (*path, index)))
    return found
