"""What every repository of the store shares: one engine, its sessions, and the lease token that
fences every write (`Database`); reads and writes as short transactions (`Repo`).

Every write is its own short transaction: the journal must be on disk before the action it
describes runs. A handle fenced with a lease token (`Database.fence`) refuses every write once
another controller has taken the lease (FencedError), in the write's own transaction.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import CursorResult, Engine, Result, Select, event, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from peakpack.orchestrator.domain.errors import FencedError

from .schema import ControllerLeaseRow


def now() -> datetime:
    return datetime.now(UTC)


def newest_ids(row_id: Any, key: Any, at: Any, since: datetime | None) -> Select[Any]:
    """(key, the newest row id) per `key` among the rows at or after `since`: the rows each
    container's next counter delta is taken against. Grouped by an expression, not the column:
    SQLite (without statistics) would otherwise walk the whole index of `key` to save a sort
    instead of reading the `at` range."""
    grouped = (key + "").label(key.key)
    recent = select(grouped, func.max(row_id).label("id"))
    if since is not None:
        recent = recent.where(at >= since)
    return recent.group_by(grouped)


def _no_write_in_a_read(session: Session, *_: Any) -> None:
    """Every write must go through Repo._write, the one place the fence is checked."""
    if session.new or session.dirty or session.deleted:
        raise RuntimeError("a write inside Repo._tx: use Repo._write so that it is fenced")


def _no_statement_write_in_a_read(state: Any) -> None:
    if state.is_insert or state.is_update or state.is_delete:
        raise RuntimeError("a write inside Repo._tx: use Repo._write so that it is fenced")



def rowcount(result: Result[Any]) -> int:
    """Rows an UPDATE or DELETE matched (SQLAlchemy types `execute` as a plain Result)."""
    return cast("CursorResult[Any]", result).rowcount

class Database:
    """One engine, its write and read sessions, and the lease token every write is fenced with."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sessions = sessionmaker(engine, expire_on_commit=False)
        self.reads = sessionmaker(engine, expire_on_commit=False)
        event.listen(self.reads, "before_flush", _no_write_in_a_read)
        event.listen(self.reads, "do_orm_execute", _no_statement_write_in_a_read)
        self.token: int | None = None

    def fence(self, token: int | None) -> None:
        """Bind every later write to lease `token` (None: unfenced, writes as before)."""
        self.token = token


class Repo:
    """A repository: the statements of one aggregate, over the shared `Database`."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @contextmanager
    def _tx(self) -> Iterator[Session]:
        """A read: never fenced (a standby or `peakpack history` reads while another leads)."""
        with self._db.reads.begin() as session:
            yield session

    @contextmanager
    def _write(self) -> Iterator[Session]:
        """A write transaction; on a fenced handle its first statement proves the lease is ours.

        The proof is a no-op UPDATE of the lease row that matches only while the row carries our
        token. Being a write, it takes the row's lock until commit (PostgreSQL: the row lock;
        SQLite: the database's write lock, and pysqlite's BEGIN comes right before it), and a
        take-over is an UPDATE of the same row: it cannot commit between this check and our write.
        """
        with self._db.sessions.begin() as session:
            token = self._db.token
            if token is not None:
                L = ControllerLeaseRow
                ours = update(L).where(L.id == 1, L.token == token).values(token=L.token)
                if rowcount(session.execute(ours)) != 1:
                    row = session.get(L, 1)
                    who = f"controller {row.holder}" if row is not None and row.holder else "another controller"
                    raise FencedError(f"{who} took over (lease token {row.token if row else '?'} > {token})")
            yield session
