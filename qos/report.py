"""What a node's QoS guard says, and what peakpack would install there: reading only (observation
uses it; `deploy.py` installs). `report_argv` is the one command the controller runs at each
observation to learn what the guard did since: its events after the last one stored, whether it
runs, and which build (`GuardReport.outdated` against `guard_archive` and `guard_json`).

The guard goes to a node as one file, `guard.pyz`: a zipapp of `qos/guard/` with the module that
declares its settings (`orchestrator/domain/guard.py`, standard library only) and the package
`__init__`s above them, built here byte for byte the same every time (fixed dates, sorted, stored
uncompressed), so its digest names the build."""

from __future__ import annotations

import hashlib
import io
import json
import shlex
import zipfile
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from peakpack.orchestrator.domain.errors import NodeError
from peakpack.orchestrator.domain.guard import GuardSettings
from peakpack.orchestrator.domain.model import NodeSpec

from .guard import DEFAULT_STATE_DIR

#: the node's guard folder, as a shell word (the lab sets $PEAKPACK_QOS_DIR per node)
STATE_DIR = f'"${{PEAKPACK_QOS_DIR:-{DEFAULT_STATE_DIR}}}"'
#: the guard's archive on the node, in that folder
ARCHIVE = "guard.pyz"
#: `peakpack/` as imported (in a checkout, through its links to the card's folders; in a wheel, itself)
PACKAGE = Path(__file__).parents[1]
#: what the archive holds besides the guard's own modules: the settings and the `__init__`s above
ARCHIVED = ("__init__.py", "orchestrator/__init__.py", "orchestrator/domain/__init__.py",
            "orchestrator/domain/guard.py", "qos/__init__.py")


@cache
def guard_archive() -> bytes:
    """`guard.pyz`: `python3 guard.pyz COMMAND` runs `peakpack.qos.guard.commands.main`."""
    files = {f"peakpack/{name}": PACKAGE / name for name in ARCHIVED}
    files.update({f"peakpack/qos/guard/{p.name}": p for p in sorted((PACKAGE / "qos/guard").glob("*.py"))})
    files["__main__.py"] = PACKAGE / "qos/guard/__main__.py"
    out = io.BytesIO()
    out.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            archive.writestr(info, files[name].read_bytes())
    return out.getvalue()


def sha256(data: bytes | str) -> str:
    """The sha256 of a file as it is written on the node (text as UTF-8), in hex, as `sha256sum`
    prints it."""
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def digest(data: bytes | str) -> str:
    """How the guard names a build of a file (its `file_digest`): 16 hex digits of its sha256."""
    return sha256(data)[:16]


def guard_json(spec: NodeSpec, settings: GuardSettings) -> str:
    """The node's guard.json: the inventory's `[qos]`, and the node's name, CPUs and memory as
    declared (the guard's capacity and memory limit)."""
    return json.dumps({**settings.by_key(), "cpus": spec.cpus, "memory_mb": spec.memory_mb, "node": spec.name},
                      indent=1, sort_keys=True) + "\n"


def report_argv(after: tuple[str, int] | None) -> list[str]:
    """The guard's report (one JSON document) with its events after `after` (log, seq); `{}` when
    no guard is installed."""
    log, seq = after or ("", 0)
    run = (f'd={STATE_DIR}; [ -f "$d/{ARCHIVE}" ] || {{ echo "{{}}"; exit 0; }}; '
           f'exec python3 "$d/{ARCHIVE}" report --state-dir "$d" --after {int(seq)} --log {shlex.quote(log)}')
    return ["sh", "-c", run]


@dataclass(frozen=True)
class GuardReport:
    """What a node's guard said at one observation (`guard.pyz report`)."""

    installed: bool
    running: bool = False
    version: str | None = None           # of guard.pyz on the node
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
        if self.running_version != digest(guard_archive()):
            return f"the guard runs build {self.running_version}, this peakpack has {digest(guard_archive())}"
        if self.settings != digest(guard_json(spec, settings)):
            return "its guard.json differs from the inventory's [qos]"
        return None
