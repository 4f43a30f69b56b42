"""Traffic between containers: bytes per client/server pair per conntrack read, and the reads
themselves (which node was measured when, and why one was not)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select

from peakpack.orchestrator.domain.records import PeerKind, TrafficRead, TrafficRecord

from ..base import Repo
from ..schema import TrafficReadRow, TrafficRow


class TrafficRepo(Repo):
    def add(self, reads: Sequence[TrafficRead], pairs: Sequence[TrafficRecord]) -> None:
        """One observation's reads and pair bytes, in one transaction."""
        for p in pairs:
            if p.c2s_bytes < 0 or p.s2c_bytes < 0:
                raise ValueError(f"traffic {p.client} -> {p.server}: negative bytes")
        with self._write() as s:
            s.add_all(TrafficReadRow(at=r.at, node=r.node, interval_s=r.interval_s, flows=r.flows,
                                     unaccounted=r.unaccounted, measured=r.measured, note=r.note) for r in reads)
            s.add_all(TrafficRow(at=p.at, interval_s=p.interval_s, counted_on=p.counted_on,
                                 client_kind=p.client_kind.value, client=p.client, client_node=p.client_node,
                                 server_kind=p.server_kind.value, server=p.server, server_node=p.server_node,
                                 c2s_bytes=p.c2s_bytes, s2c_bytes=p.s2c_bytes, flows=p.flows, how=p.how)
                      for p in pairs)

    def pairs(self, since: datetime | None = None) -> list[TrafficRecord]:
        """Pair bytes oldest first."""
        q = select(TrafficRow).order_by(TrafficRow.at, TrafficRow.id)
        if since is not None:
            q = q.where(TrafficRow.at >= since)
        with self._tx() as s:
            return [TrafficRecord(at=r.at, interval_s=r.interval_s, counted_on=r.counted_on,
                                  client_kind=PeerKind(r.client_kind), client=r.client, client_node=r.client_node,
                                  server_kind=PeerKind(r.server_kind), server=r.server, server_node=r.server_node,
                                  c2s_bytes=r.c2s_bytes, s2c_bytes=r.s2c_bytes, flows=r.flows, how=r.how)
                    for r in s.scalars(q)]

    def reads(self, since: datetime | None = None) -> list[TrafficRead]:
        """Reads oldest first."""
        q = select(TrafficReadRow).order_by(TrafficReadRow.at, TrafficReadRow.id)
        if since is not None:
            q = q.where(TrafficReadRow.at >= since)
        with self._tx() as s:
            return [TrafficRead(at=r.at, node=r.node, interval_s=r.interval_s, flows=r.flows,
                                unaccounted=r.unaccounted, measured=r.measured, note=r.note)
                    for r in s.scalars(q)]
