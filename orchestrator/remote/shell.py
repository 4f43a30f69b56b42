"""`RemoteShell`: the synchronous facade for the CLI and the controller over the SSH pool and the
nodes' Engine APIs. It owns an event loop in a background thread, so callers can also run many
commands concurrently with `gather`."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Coroutine, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from ..domain.model import Inventory
from .ssh import CommandResult, SshPool

if TYPE_CHECKING:
    from .docker_api import EnginePool

T = TypeVar("T")


class RemoteShell:
    """Synchronous access to an SshPool running on its own event loop thread, and to the nodes'
    Engine APIs (`engines`) for the callers that need them."""

    def __init__(self, inventory: Inventory, **kw: Any) -> None:
        self.inventory = inventory
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="peakpack-ssh", daemon=True)
        self._thread.start()
        self.pool = SshPool(inventory, **kw)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def run(self, node: str, argv: Sequence[str], **kw: Any) -> CommandResult:
        return self.call(self.pool.run(node, argv, **kw))

    def gather(self, calls: Sequence[Awaitable[T]]) -> list[T | BaseException]:
        async def all_of() -> list[T | BaseException]:
            return await asyncio.gather(*calls, return_exceptions=True)

        return self.call(all_of())

    @cached_property
    def engines(self) -> EnginePool:
        from .docker_api import EnginePool  # lazy: the docker SDK loads only for callers that use it

        return EnginePool(self.inventory)

    def forget(self, node: str) -> None:
        self.loop.call_soon_threadsafe(self.pool.forget, node)
        if "engines" in self.__dict__:
            self.engines.forget(node)

    def close(self) -> None:
        if "engines" in self.__dict__:
            self.engines.close()
        if self.loop.is_running():
            self.call(self.pool.close(), timeout=10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)

    def __enter__(self) -> RemoteShell:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
