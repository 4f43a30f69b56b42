"""Labs of their own for the integration tests and benches: brought up by the project's own code in
a temporary folder, taken down afterwards."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from peakpack.lab import Lab


@contextmanager
def lab_up(**sizes: int) -> Iterator[Lab]:
    """A lab of its own in a temporary folder (`Lab.up`'s sizes), taken down afterwards."""
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (network namespaces, dockerd)")
    lab = Lab(Path(tempfile.mkdtemp(prefix="peakpack-lab-")))
    lab.up(log=lambda _: None, **sizes)
    try:
        yield lab
    finally:
        lab.down(log=lambda _: None)


def criu_daemons(lab: Lab) -> list[str]:
    """The lab's migration daemons still running (a page server or a lazy-pages daemon in a
    `peakpack-criu/` folder of one of its nodes), as `pgrep -af` lines: none once a migration is
    settled."""
    found = subprocess.run(["pgrep", "-af", "criu (page-server|lazy-pages) .*/peakpack-criu/"],
                           capture_output=True, text=True).stdout
    return [line for line in found.splitlines() if str(lab.dir) in line]
