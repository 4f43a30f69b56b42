"""runc's CRIU configuration file, `/etc/criu/runc.conf`, read as CRIU reads it, and one
migration's block in it. Pure.

CRIU turns each line of the file into a command-line option (`tcp-close` is `--tcp-close`,
`images-dir /x` is `--images-dir /x`, `#` starts a comment) and parses them with getopt_long after
the options runc passes, so the file's settings win and the last line wins. getopt_long also takes
`name=value`, unambiguous abbreviations (`lazy-page` is `--lazy-pages`) and, for CRIU's boolean
options, a `no-` form (`no-tcp-close`). So what a line sets is found the same way here
(`option_of`), from the long options of CRIU 4.2 as scripts/build-criu.sh builds it
(`CRIU_OPTIONS`, criu/config.c): the operator's lines are judged by what CRIU would make of them,
not by their spelling.

A migration appends its own block after the operator's lines, between marker lines naming it, and
strips exactly that block again on every path, leaving the operator's bytes as they were.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

RUNC_CONF = "/etc/criu/runc.conf"
#: CRIU 4.2's boolean options, each also taking a `no-` form (criu/config.c, BOOL_OPT)
CRIU_BOOLEANS = (
    "restore-detached", "restore-sibling", "daemon", "tcp-established", "log-pid", "evasive-devices", "link-remap",
    "shell-job", "file-locks", "page-server", "track-mem", "auto-dedup", "force-irmap", "extra", "experimental",
    "skip-in-flight", "deprecated", "display-stats", "weak-sysctls", "tcp-close", "stream", "tls",
    "skip-file-rwx-check", "mntns-compat-mode", "unprivileged", "ghost-fiemap", "allow-uprobes",
)
#: CRIU 4.2's other long options (criu/config.c), and the one peakpack's patches add
CRIU_OTHERS = (
    "tree", "leave-stopped", "leave-running", "images-dir", "work-dir", "log-file", "join-ns", "root", "help",
    "close", "version", "pidfile", "veth-pair", "action-script", "address", "port", "prev-images-dir", "ms",
    "libdir", "cpu-cap", "ext-mount-map", "exec-cmd", "manage-cgroups", "cgroup-root", "inherit-fd", "feature",
    "skip-mnt", "enable-fs", "enable-external-sharing", "enable-external-masters", "freeze-cgroup", "ghost-limit",
    "irmap-scan-path", "lsm-profile", "timeout", "external", "empty-ns", "lazy-pages", "all", "cgroup-props",
    "cgroup-props-file", "cgroup-dump-controller", "status-fd", "verbosity", "ps-socket", "config",
    "no-default-config", "tls-cacert", "tls-cacrl", "tls-cert", "tls-key", "tls-no-cn-verify", "cgroup-yard",
    "pre-dump-mode", "file-validation", "lsm-mount-context", "network-lock",
    "tcp-congestion",  # scripts/criu-patches/0004 (peakpack's build)
)
CRIU_OPTIONS = frozenset(CRIU_OTHERS) | frozenset(CRIU_BOOLEANS) | frozenset(f"no-{b}" for b in CRIU_BOOLEANS)
#: options a migration's block sets: an operator's line setting one of them would change what
#: every checkpoint on the node does (and some, like lazy-pages, cannot be switched off again)
OURS = frozenset({"images-dir", "work-dir", "page-server", "address", "port", "lazy-pages", "leave-running",
                  "leave-stopped", "network-lock", "tls", "tls-cacert", "tls-cacrl", "tls-cert", "tls-key",
                  "tls-no-cn-verify"})
_BEGIN = "# peakpack migration {mid} begin (removed when the migration ends)"
_BEGIN_NL = "# peakpack migration {mid} begin (removed when the migration ends, with the line break before it)"
_END = "# peakpack migration {mid} end"
_BROUGHT_BREAK = b"with the line break before it"
_MARK = re.compile(rb"^# peakpack migration (\d+) (begin|end)\b")


def arguments(lines: Sequence[str]) -> list[str]:
    """runc.conf lines as CRIU command-line arguments (the page server and lazy-pages daemon peakpack
    starts take the same options as the dump runc runs)."""
    args: list[str] = []
    for line in lines:
        name, _, value = line.partition(" ")
        args += [f"--{name}", *([value] if value else [])]
    return args


def with_block(conf: bytes, migration_id: int, lines: Sequence[str]) -> bytes:
    """`conf` with this migration's block (replacing one it already has) after the operator's
    lines. A file not ending in a line break gets one before the block, and the begin marker says
    so, so that `without_block` gives back the operator's bytes exactly."""
    base = without_block(conf, migration_id)
    begin = _BEGIN if not base or base.endswith(b"\n") else "\n" + _BEGIN_NL
    block = "\n".join([begin.format(mid=migration_id), *lines, _END.format(mid=migration_id)]) + "\n"
    return base + block.encode()


def without_block(conf: bytes, migration_id: int) -> bytes:
    """`conf` without this migration's block: what the operator had, byte for byte. When the block
    brought the line break before it, that goes too if the block was last; if another migration's
    block follows, that one takes the line break over (and says so); lines the operator added after
    it keep it, since they need it."""
    out: list[bytes] = []
    lines = conf.splitlines(keepends=True)
    inside = owes_break = False
    for i, line in enumerate(lines):
        mark = _MARK.match(line)
        if mark and int(mark.group(1)) == migration_id:
            inside = mark.group(2) == b"begin"
            owes_break = owes_break or (inside and _BROUGHT_BREAK in line)
            continue
        if inside:
            continue
        if owes_break and i > 0:
            owes_break = False
            other = _MARK.match(line)
            if other and other.group(2) == b"begin" and _BROUGHT_BREAK not in line:
                line = _BEGIN_NL.format(mid=int(other.group(1))).encode() + b"\n"
        out.append(line)
    if owes_break and out and out[-1].endswith(b"\n"):
        out[-1] = out[-1][:-1]
    return b"".join(out)


def blocks(conf: bytes) -> list[int]:
    """The migrations whose blocks `conf` carries."""
    return sorted({int(m.group(1)) for line in conf.splitlines() if (m := _MARK.match(line))})

def option_of(line: bytes) -> str | None:
    """The CRIU option a runc.conf line sets, as CRIU's getopt_long resolves it (its `no-` form
    named by the option itself), or None for a comment, an empty line or a word CRIU would not take
    (unknown, or an ambiguous abbreviation: CRIU then fails every checkpoint, whoever's it is)."""
    words = line.decode(errors="replace").split()
    if not words or words[0].startswith("#"):
        return None
    name = words[0].removeprefix("--").partition("=")[0]
    if name in CRIU_OPTIONS:
        found = name
    else:
        matches = [o for o in CRIU_OPTIONS if o.startswith(name)] if name else []
        if len(matches) != 1:
            return None
        found = matches[0]
    return found.removeprefix("no-") if found.removeprefix("no-") in CRIU_BOOLEANS else found


def operator_options(conf: bytes) -> set[str]:
    """The options the operator's own lines set (comments and migrations' blocks left out)."""
    found: set[str] = set()
    inside = False
    for line in conf.splitlines():
        mark = _MARK.match(line)
        if mark:
            inside = mark.group(2) == b"begin"
            continue
        if not inside and (option := option_of(line)) is not None:
            found.add(option)
    return found


def tcp_lines(keep: bool) -> list[str]:
    """How one migration's dump and restore treat TCP connections, said in its own block whatever
    the node's file says: established ones restored on the target when the container's addresses
    move with it (`segment`), else closed (its clients reconnect); connections still in a listening
    socket's accept queue at the dump skipped (CRIU cannot dump them, and a busy server always has
    some: without this its dump fails; their clients get a reset and reconnect)."""
    return [*(["no-tcp-close", "tcp-established"] if keep else ["tcp-close", "no-tcp-established"]),
            "skip-in-flight"]


def handles_tcp(conf: bytes) -> bool:
    """Whether a CRIU config tells CRIU what to do with established TCP connections (in any of
    CRIU's spellings); without it a container with one cannot be checkpointed by Docker."""
    return bool(operator_options(conf) & {"tcp-close", "tcp-established"})
