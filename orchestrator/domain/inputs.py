"""Operator input checked at the edge, each rule in one place and each failure one line naming
the field and the fix. Names that reach a remote shell are validated first: commands are built
with shlex.join, and a name that docker itself would refuse (`x;rm -rf /`) never gets that far.

Every number an operator gives (a flag, an inventory key, a snapshot field, a container label) has
`Bounds`: finite, within a range that is sane for the field, and small enough for every type it
reaches (the solver's int64 units, SQLite's and PostgreSQL's integers, `timedelta`). The CLI's
options, the inventory's schema (`config.py`) and the observer's labels all take their limits
from the constants below, so a limit is written once.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from .errors import PeakpackError

#: docker's own rule for container names (at least two characters)
CONTAINER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]+$")
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
#: useradd's rule (Debian's default NAME_REGEX), at most 32 characters
USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
#: a name is at most this long (docker allows more, but nothing longer fits a table or the store)
MAX_NAME = 200


def one_line(text: str) -> str:
    """`text` as one printable line: line breaks and other control characters shown escaped, and
    bytes that were not UTF-8 (surrogate escapes from argv or a file name) as \\x.. escapes."""
    safe = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in safe)


def _shown(value: Any) -> str:
    """A value quoted for an error line, cut short: what the operator typed, recognisably."""
    text = repr(value)
    return one_line(text if len(text) <= 80 else text[:77] + "...")


@dataclass(frozen=True)
class Bounds:
    """A number an operator gives: finite and within [lo, hi] (lo excluded when `lo_open`, hi when
    `hi_open`), an integer when `integer`. `unit` names it in the one-line error."""

    lo: float
    hi: float
    unit: str = ""
    integer: bool = False
    lo_open: bool = False
    hi_open: bool = False

    def describe(self) -> str:
        def show(x: float) -> str:
            return str(int(x)) if self.integer or float(x).is_integer() else f"{x:g}"

        low = f"more than {show(self.lo)}" if self.lo_open else show(self.lo)
        kind = "an integer" if self.integer else "a number"
        high = f"less than {show(self.hi)}" if self.hi_open else show(self.hi)
        return f"{kind} from {low} to {high}" + (f" {self.unit}" if self.unit else "")

    def check(self, value: Any, field: str, given: Any = None) -> Any:
        """`value` if it is within bounds, else PeakpackError naming `field` and the range (and
        `given`, what the operator wrote, when `value` was parsed from it)."""
        shown = _shown(value if given is None else given)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or (self.integer and isinstance(value, float) and not value.is_integer()):
            raise PeakpackError(f"{field}: {shown} is not {self.describe()}; give one")
        if not math.isfinite(value):
            raise PeakpackError(f"{field}: {shown} is not a finite number; give {self.describe()}")
        low = value <= self.lo if self.lo_open else value < self.lo
        if low or (value >= self.hi if self.hi_open else value > self.hi):
            raise PeakpackError(f"{field}: {shown} is out of range; give {self.describe()}")
        return int(value) if self.integer else float(value)

    def parse(self, text: Any, field: str) -> Any:
        """A command-line or label string (or a default already a number) -> the checked number."""
        if isinstance(text, (int, float)) and not isinstance(text, bool):
            return self.check(text, field)
        raw = str(text).strip()
        try:
            value: float = int(raw, 10) if self.integer else float(raw)
        except ValueError:
            raise PeakpackError(f"{field}: {_shown(text)} is not {self.describe()}; give one") from None
        return self.check(value, field, given=text)

    def pydantic(self) -> dict[str, Any]:
        """The same limits as pydantic `Field` keywords, for the inventory's schema."""
        return {"gt" if self.lo_open else "ge": self.lo, "lt" if self.hi_open else "le": self.hi}


#: `--metrics-port`, `[nodes.ssh] port`, `[nodes.bmc] port`
PORT = Bounds(1, 65535, integer=True)
#: `--http-port`: 0 picks a free port
ANY_PORT = Bounds(0, 65535, integer=True)
#: a stored plan's id: PostgreSQL's `integer`, which the store's ids are
ID = Bounds(1, 2**31 - 1, integer=True)
#: a node's CPUs (today's largest machines have a few thousand)
NODE_CPUS = Bounds(1, 16384, "CPUs", integer=True)
#: a node's memory (1 PiB); MB, an integer
NODE_MEMORY_MB = Bounds(1, 2**30, "MB", integer=True)
#: a container's CPU demand (cores) and memory (MB): never more than a node can have
CORES = Bounds(0, NODE_CPUS.hi, "cores")
MEMORY_MB = Bounds(0, NODE_MEMORY_MB.hi, "MB")
#: watts of one node (a megawatt is no server)
WATTS = Bounds(0, 1e6, "W")
#: a span of time an operator sets (grace, boot, expiry, forecast window): up to ten years
SECONDS = Bounds(0, 10 * 365 * 86400, "s")
POSITIVE_SECONDS = Bounds(0, SECONDS.hi, "s", lo_open=True)
#: one epoch: a second to a day
EPOCH_SECONDS = Bounds(1, 86400, "s", integer=True)
#: how often `serve` reads the conntrack tables between epochs (0: at observations only)
TRAFFIC_READ_SECONDS = Bounds(0, 86400, "s", integer=True)
#: the solver's wall-clock safety net per plan
SOLVER_SECONDS = Bounds(0.1, 3600, "s")
#: the solver's work per plan, in CP-SAT's deterministic seconds
SOLVER_WORK = Bounds(0.01, 3600, "deterministic s")
#: connecting to a node, and its keepalive interval: a tenth of a second to ten minutes
REMOTE_SECONDS = Bounds(0.1, 600, "s")
#: how long `[migration] on_moved` may run before it is killed
HOOK_SECONDS = Bounds(0.1, 3600, "s")
#: attempts to connect to a node before it counts as unreachable
CONNECT_ATTEMPTS = Bounds(1, 10, integer=True)
#: the lease: at least a second, at most an hour
LEASE_SECONDS = Bounds(1, 3600, "s")
#: a share of a node (CPU or memory cap)
SHARE = Bounds(0, 1, lo_open=True)
#: counts an operator sets (budgets, spare nodes, solver workers)
COUNT = Bounds(0, 1_000_000, integer=True)
#: `simulate --cap`: the planner policies' CPU cap (below 5% nothing fits)
SIM_CAP = Bounds(0.05, 1)
#: days a store keeps rows
DAYS = Bounds(1, 36500, "days", integer=True)
#: a lab: nodes (their addresses share one /24) and each node's own disk
LAB_NODES = Bounds(1, 40, "nodes", integer=True)
LAB_DISK_GB = Bounds(1, 1024, "GiB", integer=True)
#: a lab node's memory: dockerd and its containers need 128 MB at least
LAB_MEMORY_MB = Bounds(128, NODE_MEMORY_MB.hi, "MB", integer=True)


def container_name(name: str, field: str = "CONTAINER") -> str:
    if not CONTAINER_NAME.fullmatch(name or "") or len(name) > MAX_NAME:
        raise PeakpackError(f"{field}: {_shown(name)} is not a container name; use letters, digits, '_', '.', '-' "
                            f"(2 to {MAX_NAME} characters, starting with a letter or digit)")
    return name


def node_name(name: str, field: str = "NODE") -> str:
    if not NODE_NAME.fullmatch(name or "") or len(name) > MAX_NAME:
        raise PeakpackError(f"{field}: {_shown(name)} is not a node name; use letters, digits, '_', '.', '-' "
                            f"(at most {MAX_NAME} characters)")
    return name


#: a compose project name as compose keeps it (it lower-cases and strips everything else)
COMPOSE_PROJECT = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
#: compose's rule for service names
COMPOSE_SERVICE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: the longest path a node's kernel takes (PATH_MAX)
MAX_PATH = 4096


def compose_project(name: str, field: str = "--project-name") -> str:
    if not COMPOSE_PROJECT.fullmatch(name or "") or len(name) > MAX_NAME:
        raise PeakpackError(f"{field}: {_shown(name)} is not a compose project name; use lower-case letters, digits, "
                            f"'_', '-' (at most {MAX_NAME} characters, starting with a letter or digit)")
    return name


def compose_service(name: str, field: str = "SERVICE") -> str:
    if not COMPOSE_SERVICE.fullmatch(name or "") or len(name) > MAX_NAME:
        raise PeakpackError(f"{field}: {_shown(name)} is not a compose service name; use letters, digits, '_', '.', "
                            f"'-' (at most {MAX_NAME} characters)")
    return name


def node_path(value: str, field: str) -> str:
    """An absolute path as it is on the nodes (not read here: it need not exist on this machine)."""
    if not value.startswith("/") or len(value) > MAX_PATH or one_line(value) != value:
        raise PeakpackError(f"{field}: {_shown(value)} is not an absolute path; give the path as it is on every node")
    return value


def user_name(name: str, field: str = "--user") -> str:
    if not USER_NAME.fullmatch(name or ""):
        raise PeakpackError(f"{field}: {_shown(name)} is not a user name; use lower-case letters, digits, '_', '-' "
                            "(up to 32 characters, starting with a letter or '_')")
    return name


def host(value: str, field: str) -> str:
    """An IP address or a host name (what a node's address, a BMC or a listening address is)."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        if not HOSTNAME.match(value or ""):
            raise PeakpackError(f"{field}: {_shown(value)} is neither an IP address nor a host name") from None
    return value


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
#: `--since` and friends reach back at most a century
MAX_DURATION = Bounds(0, 100 * 366 * 86400, "s")


def parse_duration(text: str, flag: str = "duration") -> timedelta:
    """'30m', '2h', '7d' -> timedelta (at most a century); anything else is a one-line error naming
    the flag."""
    m = _DURATION.match(text)
    if not m:
        raise PeakpackError(f"{flag}: {_shown(text)} is not a duration; use a number and a unit, e.g. 30m, 2h, 7d")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if not math.isfinite(seconds) or seconds > MAX_DURATION.hi:
        raise PeakpackError(f"{flag}: {_shown(text)} is longer than a century; give a shorter duration, e.g. 30d")
    return timedelta(seconds=seconds)


def aware_time(text: Any, field: str) -> datetime:
    """An ISO 8601 instant with its time zone ('2026-11-23T10:00:00Z'); a time without one could
    be any of 26 hours, so it is refused rather than guessed."""
    try:
        when = datetime.fromisoformat(str(text))
    except ValueError:
        raise PeakpackError(f"{field}: {_shown(text)} is not an ISO 8601 time; give e.g. "
                            "2026-11-23T10:00:00Z") from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise PeakpackError(f"{field}: {_shown(text)} has no time zone; add one, e.g. Z or +01:00")
    return when


def output_file(path: Path, field: str) -> Path:
    """A file a command will write: not a folder, in a folder that exists."""
    if path.is_dir():
        raise PeakpackError(f"{field}: {one_line(str(path))} is a folder; name a file in it")
    if not path.absolute().parent.is_dir():
        raise PeakpackError(f"{field}: folder {one_line(str(path.absolute().parent))} does not exist; create it "
                            "or choose another path")
    return path


def folder(path: Path, field: str) -> Path:
    """A folder a command reads or creates: it, or the nearest of its parents that exists, is a
    folder (a file there would make creating it fail half-way)."""
    for p in (path.absolute(), *path.absolute().parents):
        if p.exists():
            if not p.is_dir():
                raise PeakpackError(f"{field}: {one_line(str(p))} is a file, not a folder; choose another path")
            return path
    return path


#: an inventory, a snapshot, a trace: far below this; a device or a runaway file is refused
MAX_TEXT_BYTES = 256 * 1024**2


def read_text(path: Path, field: str) -> str:
    """A text file an operator names, as UTF-8: one line naming the field when it cannot be read, is
    a folder or a device, is too large, or is not UTF-8 text."""
    try:
        if path.exists() and not path.is_file():
            kind = "a folder" if path.is_dir() else "not a regular file"
            raise PeakpackError(f"{field}: {one_line(str(path))} is {kind}; give a file")
        with path.open("rb") as f:
            data = f.read(MAX_TEXT_BYTES + 1)
    except OSError as exc:
        raise PeakpackError(f"{field}: cannot read {one_line(str(path))}: {exc.strerror}") from None
    if len(data) > MAX_TEXT_BYTES:
        raise PeakpackError(f"{field}: {one_line(str(path))} is larger than {MAX_TEXT_BYTES // 1024**2} MiB; "
                            "give the file itself, not a device or an archive")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PeakpackError(f"{field}: {one_line(str(path))} is not UTF-8 text (byte {exc.start}); "
                            "save it as UTF-8") from None


# -- container labels ------------------------------------------------------------------------------

#: labels peakpack reads from a container
CPU_LABEL = "peakpack.cpu"
MEMORY_LABEL = "peakpack.memory_mb"
CLASS_LABEL = "peakpack.class"
GROUP_LABEL = "peakpack.group"
CLASSES = ("devil", "turtle")


@dataclass(frozen=True)
class Labels:
    """What a container's peakpack labels declare, checked: `problems` lists every label that is
    not valid (that label is then ignored, and the container is planned as immovable, so a typo
    never moves or overpacks it), one line each with the fix."""

    cpu: float | None = None
    memory_mb: float | None = None
    cls: str = "turtle"
    group: str | None = None
    problems: tuple[str, ...] = ()


def container_labels(labels: Mapping[str, Any]) -> Labels:
    """The peakpack labels of one container, each checked like an operator's number or name."""
    problems: list[str] = []
    values: dict[str, Any] = {}
    for key, bounds in ((CPU_LABEL, CORES), (MEMORY_LABEL, MEMORY_MB)):
        if key in labels:
            try:
                values[key] = bounds.parse(labels[key], f"label {key}")
            except PeakpackError as exc:
                problems.append(str(exc))
    cls = labels.get(CLASS_LABEL, "turtle")
    if cls not in CLASSES:
        problems.append(f"label {CLASS_LABEL}: {_shown(cls)} is not a class; use devil or turtle")
        cls = "turtle"
    group = labels.get(GROUP_LABEL)
    if group is not None and (not isinstance(group, str) or not NODE_NAME.fullmatch(group) or len(group) > MAX_NAME):
        problems.append(f"label {GROUP_LABEL}: {_shown(group)} is not a group name; use letters, digits, "
                        "'_', '.', '-'")
        group = None
    return Labels(values.get(CPU_LABEL), values.get(MEMORY_LABEL), cls, group, tuple(problems))
