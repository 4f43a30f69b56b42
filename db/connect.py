"""Opening a store's database: the URL (SQLite by default, in the user's data dir, WAL mode; any
SQLAlchemy URL, PostgreSQL unchanged), one engine per URL, and the schema brought to Alembic's
head on open, one process at a time, so an upgraded peakpack migrates an old store in place."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError, ProgrammingError

from peakpack.orchestrator.domain.errors import StoreError
from peakpack.orchestrator.domain.inputs import one_line


def default_url() -> str:
    from platformdirs import user_data_dir  # lazy: start-up speed of commands that name --db

    folder = Path(user_data_dir("peakpack"))
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'peakpack.db'}"


#: PostgreSQL advisory lock key that serialises schema upgrades ("peak")
_SCHEMA_LOCK = 0x7065616B

#: A database that stops answering must not hold a controller past its lease: libpq gives up
#: connecting after CONNECT_TIMEOUT_S, TCP keepalives notice a silent server within ~15 s, and the
#: server cuts any statement at STATEMENT_TIMEOUT_S (the lease's own statements, `repos/lease.py`,
#: are cut at a third of the lease). A server that stops answering altogether cannot enforce its
#: timeouts: `orchestrator/act/leadership.py` counts the lease lost by the clock, whatever a call
#: still waits for.
CONNECT_TIMEOUT_S = 5
STATEMENT_TIMEOUT_S = 60
POSTGRES_CONNECT = {
    "connect_timeout": CONNECT_TIMEOUT_S,
    "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3,
    "options": f"-c statement_timeout={STATEMENT_TIMEOUT_S * 1000}",
}
#: SQLite waits this long for another writer's lock before a statement fails (PRAGMA busy_timeout)
SQLITE_BUSY_MS = 10000


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


USAGE = "use sqlite:///FILE or postgresql://USER@HOST/DB"


def _sqlite_file(database: str) -> None:
    """A SQLite store's file: in an existing folder, and not a folder. Whether an existing file
    is a database SQLite itself says when the store opens it (`Store.open`: one line); the file is
    never opened here: closing any descriptor of it would drop the locks this process's SQLite
    connections hold on it (POSIX), and another process could then corrupt it."""
    path = Path(database).expanduser()
    if not path.resolve().parent.is_dir():
        raise StoreError(f"--db: folder {one_line(str(path.resolve().parent))} does not exist; create it or choose "
                         "another path")
    if path.is_dir():
        raise StoreError(f"--db: {one_line(str(path))} is a folder; name a file in it, e.g. {path / 'peakpack.db'}")


def parse_url(url: str) -> URL:
    """A store URL of a database peakpack knows (SQLite or PostgreSQL), or a one-line StoreError."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise StoreError(f"--db: {one_line(repr(url))} is not a database URL; {USAGE}") from None
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise StoreError(f"--db: {one_line(repr(parsed.get_backend_name()))} is not a store peakpack knows; {USAGE}")
    return parsed


def engine_for(url: str) -> Engine:
    """The engine of a store URL, after checking what can be checked without connecting: the
    scheme, and for SQLite that the file is a database (or new) in an existing folder."""
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            _sqlite_file(parsed.database)
        engine = create_engine(url, connect_args={"timeout": 10})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if parsed.drivername == "postgresql":
        url = parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    try:
        return create_engine(url, pool_pre_ping=True, connect_args=POSTGRES_CONNECT)
    except (ModuleNotFoundError, NoSuchModuleError) as exc:
        raise StoreError(f"--db: the driver for {parsed.drivername} is missing ({one_line(str(exc))}); "
                         "install peakpack[postgres]") from None


def _head_revision() -> str:
    """The newest revision of db/revisions, read from the scripts without importing alembic
    (the revision no other one names as its down_revision)."""
    revisions: dict[str, str | None] = {}
    for script in Path(__file__).with_name("revisions").joinpath("versions").glob("*.py"):
        found = dict(re.findall(r"^(revision|down_revision)\s*=\s*['\"]?(\w+)['\"]?", script.read_text(), re.M))
        revisions[found["revision"]] = None if found.get("down_revision") == "None" else found.get("down_revision")
    heads = set(revisions) - set(revisions.values())
    if len(heads) != 1:
        raise StoreError(f"db/revisions: {len(heads)} heads ({sorted(heads)}); merge them into one")
    return heads.pop()


def _at_head(engine: Engine) -> bool:
    """Whether the database is already at the newest revision: then opening it skips alembic
    (half a second of imports on every CLI command)."""
    try:
        with engine.connect() as conn:
            return conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar() == _head_revision()
    except (OperationalError, ProgrammingError):  # no version table yet (postgres: Programming)
        return False


def upgrade(engine: Engine) -> None:
    """Bring the schema to head, one process at a time: two controllers started together on a
    new database would otherwise both create the tables, and one would fail."""
    if _at_head(engine):
        return
    from alembic import command  # lazy: half a second of imports, needed only to upgrade
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).with_name("revisions")))
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":  # the write lock before alembic reads the version
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        elif engine.dialect.name == "postgresql":  # released when this transaction ends
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_SCHEMA_LOCK})")
            conn.exec_driver_sql("SET LOCAL statement_timeout = 0")  # an index on a year of rows takes time
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
