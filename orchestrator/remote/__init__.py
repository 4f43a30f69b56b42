"""Remote execution on the nodes, used by observation, migration, pinning and energy sampling
alike: `ssh` (asyncssh pool with pinned host keys, argv joined with shlex.join) is the one module
that imports asyncssh."""

from .shell import RemoteShell
from .ssh import CommandResult, SshPool

__all__ = ["CommandResult", "RemoteShell", "SshPool"]
