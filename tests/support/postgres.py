"""A throw-away PostgreSQL server for the store's contract tests: initdb into a temp folder,
listen on a Unix socket only, run as the `postgres` user (the server refuses to run as root)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from tests.support.procs import stat_fields

if TYPE_CHECKING:
    from peakpack.db.store import Store


def postgres_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def _as_postgres(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@contextmanager
def postgres_server() -> Iterator[str]:
    """Yield a SQLAlchemy URL of a fresh, empty database; stop and delete it afterwards."""
    bindir = postgres_bin()
    if bindir is None:
        raise RuntimeError("PostgreSQL is not installed (scripts/install-system-deps.sh installs it)")
    root = Path(tempfile.mkdtemp(prefix="peakpack-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
    try:
        subprocess.run(_as_postgres([str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "peakpack"]),
                       check=True, capture_output=True)
        subprocess.run(_as_postgres([str(bindir / "pg_ctl"), "-D", str(data), "-w", "-l", str(root / "log"),
                                     "-o", f"-k {sock} -c listen_addresses='' -c fsync=off", "start"]),
                       check=True, capture_output=True)
        try:
            yield f"postgresql://peakpack@/postgres?host={sock}"
        finally:
            subprocess.run(_as_postgres([str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"]),
                           capture_output=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def drop_schema(store: Store) -> None:
    """Empty a server for the next test: every table and alembic's version row."""
    from peakpack.db.schema import Base

    Base.metadata.drop_all(store.engine)
    with store.engine.begin() as c:
        c.exec_driver_sql("DROP TABLE alembic_version")


def server_pids(url: str) -> list[int]:
    """The processes of the server behind `url` (a `postgres_server` URL): the postmaster, from its
    pid file, and its children (the backends); to stop and resume it (SIGSTOP/SIGCONT)."""
    sock = Path(url.rpartition("host=")[2])
    postmaster = int((sock.parent / "data" / "postmaster.pid").read_text().split()[0])
    return [postmaster, *(pid for pid, fields in stat_fields() if int(fields[1]) == postmaster)]
