"""The controller lease: one row whose token fences every write of the holder."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, or_, select, text, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from peakpack.orchestrator.domain.errors import StoreError
from peakpack.orchestrator.domain.records import (
    LeaseRecord,
)

from ..base import Repo, now, rowcount
from ..connect import SQLITE_BUSY_MS
from ..schema import (
    ControllerLeaseRow,
)

#: lease statements without a ttl of their own (who holds it, releasing it) give up after this
DEFAULT_TIMEOUT_S = 3.0
#: never shorter than this: a statement on a healthy database takes milliseconds
MIN_TIMEOUT_S = 0.5


class LeaseRepo(Repo):
    def _clock(self, s: Session) -> datetime:
        """Lease times come from one clock: the server's on PostgreSQL (the hosts' clocks may
        disagree), this host's on SQLite (every user of the file is on this host)."""
        server = s.scalar(select(func.now())) if self._db.engine.dialect.name == "postgresql" else None
        return now() if server is None else server.astimezone(UTC)

    @contextmanager
    def _lease_tx(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> Iterator[Session]:
        """Lease statements, each cut at `timeout_s` (a third of the lease: a renewal that waits
        longer could not keep it anyway): a busy, locked or unreachable database is a one-line
        StoreError, soon. PostgreSQL: statement and lock timeouts for this transaction; SQLite:
        the wait for another writer's lock, for this connection, put back afterwards."""
        ms = int(max(MIN_TIMEOUT_S, timeout_s) * 1000)
        try:
            with self._db.sessions.begin() as session:
                if self._db.engine.dialect.name == "postgresql":
                    session.execute(text(f"SET LOCAL statement_timeout = {ms}"))
                    session.execute(text(f"SET LOCAL lock_timeout = {ms}"))
                    yield session
                    return
                session.execute(text(f"PRAGMA busy_timeout = {ms}"))
                try:
                    yield session
                finally:
                    session.connection().exec_driver_sql(f"PRAGMA busy_timeout = {SQLITE_BUSY_MS}")
        except DBAPIError as exc:
            raise StoreError(f"--db: the controller lease is unreachable: {' '.join(str(exc.orig).split())}") from None

    def token(self) -> int | None:
        """The fencing token now (a read: it proves nothing past this instant)."""
        with self._lease_tx() as s:
            return s.scalar(select(ControllerLeaseRow.token).where(ControllerLeaseRow.id == 1))

    def acquire(self, owner: str, ttl_s: float, *, replacing: str | None = None) -> int | None:
        """Take the lease for `ttl_s` seconds: the new fencing token, or None while another
        holder's lease runs (`replacing`: a holder known to be dead, taken over at once).

        One conditional UPDATE decides: of two racing callers the database lets one update the
        row and makes the other re-read it (PostgreSQL re-checks the WHERE on the new row, SQLite
        serialises writers), so exactly one wins and the other gets None."""
        L = ControllerLeaseRow
        with self._lease_tx(ttl_s / 3) as s:
            t = self._clock(s)
            free = or_(L.holder.is_(None), L.holder == owner, L.expires_at <= t)
            if replacing is not None:
                free = or_(free, L.holder == replacing)
            taken = update(L).where(L.id == 1, free).values(
                token=L.token + 1, holder=owner, acquired_at=t, expires_at=t + timedelta(seconds=ttl_s))
            if rowcount(s.execute(taken)) != 1:
                return None
            return s.scalar(select(L.token).where(L.id == 1))

    def renew(self, owner: str, token: int, ttl_s: float) -> bool:
        """Extend our lease to now + `ttl_s`; False when another holder has taken it since."""
        L = ControllerLeaseRow
        with self._lease_tx(ttl_s / 3) as s:
            t = self._clock(s)
            mine = update(L).where(L.id == 1, L.token == token, L.holder == owner)
            return rowcount(s.execute(mine.values(expires_at=t + timedelta(seconds=ttl_s)))) == 1

    def release(self, owner: str, token: int) -> None:
        """Free the lease now (a standby takes it at its next poll); the token stays as it is."""
        L = ControllerLeaseRow
        with self._lease_tx() as s:
            t = self._clock(s)
            s.execute(update(L).where(L.id == 1, L.token == token, L.holder == owner)
                      .values(holder=None, expires_at=t))

    def holder(self) -> LeaseRecord | None:
        """The holder of an unexpired lease, or None when the store is free to take."""
        with self._lease_tx() as s:
            t = self._clock(s)
            row = s.get(ControllerLeaseRow, 1)
            if row is None or row.holder is None or row.acquired_at is None or row.expires_at <= t:
                return None
            return LeaseRecord(holder=row.holder, token=row.token, acquired_at=row.acquired_at,
                               expires_at=row.expires_at)
