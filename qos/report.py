"""What a node's QoS guard says, and what peakpack would install there: reading only (observation
uses it; `deploy.py` installs). `report_argv` is the one command the controller runs at each
observation to learn what the guard did since: its events after the last one stored, whether it
runs, and which build (`GuardReport.outdated` against `guard_source` and `guard_json`)."""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from peakpack.orchestrator.domain.errors import NodeError
from peakpack.orchestrator.domain.model import NodeSpec
from peakpack.orchestrator.domain.qos import GuardSettings

from .guard import DEFAULT_STATE_DIR

GUARD_FILE = Path(__file__).with_name("guard.py")
#: the node's guard folder, as a shell word (the lab sets $PEAKPACK_QOS_DIR per node)
STATE_DIR = f'"${{PEAKPACK_QOS_DIR:-{DEFAULT_STATE_DIR}}}"'

def guard_source() -> str:
    return GUARD_FILE.read_text()


def sha256(text: str) -> str:
    """The sha256 of a file as it is written on the node (UTF-8), in hex, as `sha256sum` prints it."""
    return hashlib.sha256(text.encode()).hexdigest()


def digest(text: str) -> str:
    """How the guard names a build of a file (its `file_digest`): 16 hex digits of its sha256."""
    return sha256(text)[:16]


def guard_json(spec: NodeSpec, settings: GuardSettings) -> str:
    """The node's guard.json: the inventory's `[qos]`, and the node's name, CPUs and memory as
    declared (the guard's capacity and memory limit)."""
    return json.dumps({**settings.by_key(), "cpus": spec.cpus, "memory_mb": spec.memory_mb, "node": spec.name},
                      indent=1, sort_keys=True) + "\n"


def report_argv(after: tuple[str, int] | None) -> list[str]:
    """The guard's report (one JSON document) with its events after `after` (log, seq); `{}` when
    no guard is installed."""
    log, seq = after or ("", 0)
    run = (f'd={STATE_DIR}; [ -f "$d/guard.py" ] || {{ echo "{{}}"; exit 0; }}; '
           f'exec python3 "$d/guard.py" report --state-dir "$d" --after {int(seq)} --log {shlex.quote(log)}')
    return ["sh", "-c", run]


@dataclass(frozen=True)
class GuardReport:
    """What a node's guard said at one observation (`guard.py report`)."""

    installed: bool
    running: bool = False
    version: str | None = None           # of guard.py on the node
    running_version: str | None = None   # of the guard process that runs
    settings: str | None = None          # digest of its guard.json
    log: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    lost: bool = False                   # events between the last stored and these were rotated away
    state: dict[str, Any] | None = None

    @classmethod
    def parse(cls, node: str, text: str) -> GuardReport:
        try:
            doc = json.loads(text)
        except ValueError:
            raise NodeError(node, f"the QoS guard's report is not JSON: {text[:80]!r}") from None
        if not isinstance(doc, dict) or not doc:
            return cls(installed=False)
        return cls(True, bool(doc.get("running")), doc.get("version"), doc.get("running_version"),
                   doc.get("settings"), str(doc.get("log") or ""), list(doc.get("events") or []),
                   bool(doc.get("lost")), doc.get("state"))

    def outdated(self, spec: NodeSpec, settings: GuardSettings) -> str | None:
        """Why this node's guard must be (re)installed; None: it runs, as peakpack would install it."""
        if not self.installed:
            return "no guard installed"
        if not self.running:
            return "the guard does not run"
        if self.running_version != digest(guard_source()):
            return f"the guard runs build {self.running_version}, this peakpack has {digest(guard_source())}"
        if self.settings != digest(guard_json(spec, settings)):
            return "its guard.json differs from the inventory's [qos]"
        return None
