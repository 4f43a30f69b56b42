"""Opening a store's database: the URL (SQLite by default, in the user's data dir, WAL mode; any
SQLAlchemy URL, PostgreSQL unchanged), one engine per URL, and the schema brought to Alembic's
head on open, one process at a time, so an upgraded peakpack migrates an old store in place."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError, ProgrammingError

from peakpack.orchestrator.domain.errors import StoreError


def default_url() -> str:
    from platformdirs import user_data_dir  # lazy: start-up speed of commands that name --db

    folder = Path(user_data_dir("peakpack"))
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'peakpack.db'}"


#: PostgreSQL advisory lock key that serialises schema upgrades ("peak")
_SCHEMA_LOCK = 0x7065616B


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def engine_for(url: str) -> Engine:
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StoreError(
            f"--db: {url!r} is not a database URL; use sqlite:///FILE or postgresql://USER@HOST/DB"
        ) from None
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            folder = Path(parsed.database).expanduser().resolve().parent
            if not folder.is_dir():
                raise StoreError(f"--db: folder {folder} does not exist; create it or choose another path")
        engine = create_engine(url, connect_args={"timeout": 10})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        url = parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    try:
        return create_engine(url, pool_pre_ping=True)
    except ModuleNotFoundError as exc:
        raise StoreError(f"--db: the driver for {parsed.drivername} is missing ({exc.name}); "
                         "install peakpack[postgres]") from None


def _head_revision() -> str:
    """The newest revision of db/migrations, read from the scripts without importing alembic
    (the revision no other one names as its down_revision)."""
    revisions: dict[str, str | None] = {}
    for script in Path(__file__).with_name("migrations").joinpath("versions").glob("*.py"):
        found = dict(re.findall(r"^(revision|down_revision)\s*=\s*['\"]?(\w+)['\"]?", script.read_text(), re.M))
        revisions[found["revision"]] = None if found.get("down_revision") == "None" else found.get("down_revision")
    heads = set(revisions) - set(revisions.values())
    if len(heads) != 1:
        raise StoreError(f"db/migrations: {len(heads)} heads ({sorted(heads)}); merge them into one")
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
    cfg.set_main_option("script_location", str(Path(__file__).with_name("migrations")))
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":  # the write lock before alembic reads the version
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        elif engine.dialect.name == "postgresql":  # released when this transaction ends
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_SCHEMA_LOCK})")
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
