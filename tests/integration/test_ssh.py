"""One command from the head node to a real lab node over SSH (`SshPool.run`): what it printed and
its exit status; a failure named with the command's last line; a command that outlives its timeout
is OutcomeUnknown (it may or may not have had its effect); callers cancelled before, during and
after a command; and the pooled connection still serves the next command after all of them."""

from __future__ import annotations

import asyncio

import pytest

from peakpack.lab import Lab
from peakpack.orchestrator.domain.config import load_inventory
from peakpack.orchestrator.domain.errors import NodeError, OutcomeUnknown
from peakpack.orchestrator.remote.ssh import SshPool

pytestmark = pytest.mark.integration


def test_a_command_runs_times_out_or_is_cancelled_and_the_pool_goes_on(clean_lab: Lab) -> None:
    pool = SshPool(load_inventory(clean_lab.inventory_path))

    async def scenario() -> None:
        try:
            done = await pool.run("node-1", ["sh", "-c", "echo out; echo err >&2; exit 3"], check=False)
            assert (done.exit_status, done.stdout, done.stderr) == (3, "out\n", "err\n")
            with pytest.raises(NodeError, match="failed: err"):
                await pool.run("node-1", ["sh", "-c", "echo err >&2; exit 3"])
            with pytest.raises(OutcomeUnknown, match=r"did not finish within 0\.5 s"):
                await pool.run("node-1", ["sleep", "5"], timeout=0.5)
            for delay in (0.0, 0.05, 0.2):  # cancelled before, while and after the command's output
                task = asyncio.ensure_future(pool.run("node-1", ["sleep", "0.1"]))
                await asyncio.sleep(delay)
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            assert (await pool.run("node-1", ["echo", "still"])).stdout == "still\n"
        finally:
            await pool.close()

    asyncio.run(scenario())
