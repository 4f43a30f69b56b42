"""Operator input checked at the edge, each rule in one place and each failure one line naming
the field and the fix. Names that reach a remote shell are validated first: commands are built
with shlex.join, and a name that docker itself would refuse (`x;rm -rf /`) never gets that far."""

from __future__ import annotations

import re
from datetime import timedelta

from .errors import PeakpackError

#: docker's own rule for container names (at least two characters)
CONTAINER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]+$")
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def container_name(name: str, field: str = "CONTAINER") -> str:
    if not CONTAINER_NAME.fullmatch(name or ""):
        raise PeakpackError(f"{field}: {name!r} is not a container name; use letters, digits, '_', '.', '-' "
                            "(2+ characters, starting with a letter or digit)")
    return name


def node_name(name: str, field: str = "NODE") -> str:
    if not NODE_NAME.fullmatch(name or ""):
        raise PeakpackError(f"{field}: {name!r} is not a node name; use letters, digits, '_', '.', '-'")
    return name


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str, flag: str = "duration") -> timedelta:
    """'30m', '2h', '7d' -> timedelta; anything else is a one-line error naming the flag."""
    m = _DURATION.match(text)
    if not m:
        raise PeakpackError(f"{flag}: {text!r} is not a duration; use a number and a unit, e.g. 30m, 2h, 7d")
    return timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])
