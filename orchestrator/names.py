"""Names that reach a remote shell are validated first: commands are built with shlex.join, and
a name that docker itself would refuse (`x;rm -rf /`) never gets that far."""

from __future__ import annotations

import re

from orchestrator.errors import PeakpackError

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
