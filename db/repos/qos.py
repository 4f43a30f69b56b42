"""QoS events: what each node's guard did (read from its event log at every observation) and what
the controller did about it. Events are keyed by (node, log, seq), so storing a batch twice adds
nothing the second time."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, select, tuple_

from peakpack.orchestrator.domain.records import QosEventRecord

from ..base import Repo, now
from ..schema import QosEventRow

#: the log of the controller's own events (the guards' logs are random hex ids)
CONTROLLER_LOG = "controller"


def _record(r: QosEventRow) -> QosEventRecord:
    return QosEventRecord(node=r.node, log=r.log, seq=r.seq, at=r.at, kind=r.kind, container=r.container,
                          reason=r.reason, detail=json.loads(r.detail_json) if r.detail_json else None, id=r.id)


class QosRepo(Repo):
    def add(self, events: Sequence[QosEventRecord]) -> int:
        if not events:
            return 0
        E = QosEventRow
        keys = {(e.node, e.log, e.seq) for e in events}
        with self._write() as s:
            seen = {tuple(r) for r in s.execute(select(E.node, E.log, E.seq)
                                                .where(tuple_(E.node, E.log, E.seq).in_(keys)))}
            new = []
            for e in events:  # a seq twice in one batch: the first
                if (e.node, e.log, e.seq) not in seen:
                    seen.add((e.node, e.log, e.seq))
                    new.append(e)
            s.add_all(E(node=e.node, log=e.log, seq=e.seq, at=e.at, kind=e.kind, container=e.container,
                        reason=e.reason, detail_json=json.dumps(e.detail) if e.detail else None) for e in new)
        return len(new)

    def record(self, node: str, kind: str, container: str | None, reason: str) -> None:
        E = QosEventRow
        with self._write() as s:
            last = s.scalar(select(func.max(E.seq)).where(E.node == node, E.log == CONTROLLER_LOG)) or 0
            s.add(E(node=node, log=CONTROLLER_LOG, seq=last + 1, at=now(), kind=kind, container=container,
                    reason=reason))

    def last_seq(self) -> dict[str, tuple[str, int]]:
        """node -> (its guard's log read last, the newest seq of that log): where to read on."""
        E = QosEventRow
        newest = (select(E.node, func.max(E.id).label("id")).where(E.log != CONTROLLER_LOG).group_by(E.node)
                  .subquery())
        with self._tx() as s:
            logs = {r.node: r.log for r in s.scalars(select(E).join(newest, E.id == newest.c.id))}
            return {node: (log, int(s.scalar(select(func.max(E.seq)).where(E.node == node, E.log == log)) or 0))
                    for node, log in logs.items()}

    def newest_id(self) -> int:
        """The newest event's row id (0: none): what a controller counts from."""
        with self._tx() as s:
            return int(s.scalar(select(func.max(QosEventRow.id))) or 0)

    def events(self, since: datetime | None = None, *, after_id: int | None = None,
               kinds: Sequence[str] = ()) -> list[QosEventRecord]:
        """Events oldest first (by when they happened), optionally only newer rows than `after_id`
        or of some kinds."""
        q = select(QosEventRow).order_by(QosEventRow.at, QosEventRow.id)
        if since is not None:
            q = q.where(QosEventRow.at >= since)
        if after_id is not None:
            q = q.where(QosEventRow.id > after_id)
        if kinds:
            q = q.where(QosEventRow.kind.in_(kinds))
        with self._tx() as s:
            return [_record(r) for r in s.scalars(q)]
