"""The active policy set, kept across edits: a broken edit is reported and the last good set stays
in force, so a typo in a pull request never leaves the controller without policies."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from remediator.clock import Clock
from remediator.errors import PolicyError
from remediator.policy.loader import (
    PolicySet,
    XidCheck,
    content_hash,
    git_revision,
    in_catalog,
    load_policy_dir,
    policy_files,
)

Fingerprint = tuple[tuple[str, int, int], ...]


class PolicyStore:
    def __init__(self, directory: Path, clock: Clock, known_xid: XidCheck = in_catalog) -> None:
        self.directory = Path(directory)
        self.active: PolicySet | None = None
        self.last_error: PolicyError | None = None
        self._clock = clock
        self._known_xid = known_xid
        self._fingerprint: Fingerprint | None = None

    def reload_if_changed(self) -> bool:
        """Stat the files (cheap, every tick); read and validate only when one changed. True when
        a different set became active."""
        try:
            fingerprint = self._stat()
        except OSError as exc:
            # The same outage is one error, not a new one every tick; forgetting the fingerprint
            # makes the directory's return re-check the set and clear the error.
            problem = f"{self.directory}: {exc}"
            if self.last_error is None or self.last_error.problems != [problem]:
                self.last_error = PolicyError([problem])
            self._fingerprint = None
            return False
        if fingerprint == self._fingerprint:
            return False
        self._fingerprint = fingerprint
        if self.active is not None and self._hash_now() == self.active.content_hash:
            commit, dirty = git_revision(self.directory)
            self.active = dataclasses.replace(self.active, commit=commit, dirty=dirty)
            self.last_error = None
            return False
        try:
            loaded = load_policy_dir(
                self.directory, known_xid=self._known_xid, loaded_at=self._clock.now()
            )
        except PolicyError as exc:
            self.last_error = exc
            return False
        self.active = loaded
        self.last_error = None
        return True

    def _stat(self) -> Fingerprint:
        return tuple(
            (p.name, st.st_mtime_ns, st.st_size)
            for p in policy_files(self.directory)
            for st in (p.stat(),)
        )

    def _hash_now(self) -> str | None:
        try:
            texts = {p.name: p.read_text(encoding="utf-8") for p in policy_files(self.directory)}
        except (OSError, UnicodeDecodeError):
            return None
        return content_hash(texts)
