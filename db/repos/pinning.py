"""Which cpuset each container was pinned to, and when."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from ..base import Repo, now
from ..schema import (
    PinningRow,
)


class PinningRepo(Repo):
    def record(self, node: str, container: str, cpuset: str) -> None:
        with self._write() as s:
            s.add(PinningRow(node=node, container=container, cpuset=cpuset, at=now()))

    def history(self, node: str | None = None) -> list[dict[str, Any]]:
        q = select(PinningRow).order_by(PinningRow.id)
        if node is not None:
            q = q.where(PinningRow.node == node)
        with self._tx() as s:
            return [{"node": r.node, "container": r.container, "cpuset": r.cpuset, "at": r.at.isoformat()}
                    for r in s.scalars(q)]
