"""CRIU's side of a migration on a node (migrate/criu.py): the runc.conf block is appended after the
operator's lines and stripped again leaving the operator's bytes exactly as they were, on every
path (success, failure, a crash settled later, another migration's block beside it, the operator
editing the file meanwhile); the node's lock is exclusive; and preflight refuses in one line what
CRIU would fail on. The node script itself runs here for real, on a temporary /etc/criu."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from peakpack.migrate import criu
from peakpack.migrate.criu import NODE_SCRIPT, NodeCriu
from peakpack.migrate.runc_conf import blocks, handles_tcp, operator_options, option_of, with_block, without_block
from peakpack.migrate.spec import probe_addresses
from peakpack.orchestrator.domain.errors import FencedError, NodeError
from peakpack.orchestrator.remote.ssh import CommandResult
from tests.support.procs import stat_fields

OPERATOR = [
    b"",
    b"tcp-close\n",
    b"tcp-close",                                   # no line break at the end
    b"# the operator's\r\ntcp-established\r\n",      # CRLF
    b"tcp-close\n\n\n# trailing blank lines\n\n",
    b"tcp-close\n# caf\xe9 \xff not UTF-8\n",
    b"tcp-close\n# peakpack migration 3 begin (removed when the migration ends)\nport 1\n# peakpack migration 3 end\n",
]
LINES = ["images-dir /var/lib/docker/peakpack-criu/12/dump", "page-server", "address 10.0.0.2", "port 27012",
         "leave-stopped"]


@pytest.mark.parametrize("conf", OPERATOR)
def test_the_block_goes_after_the_operators_lines_and_comes_out_byte_for_byte(conf: bytes) -> None:
    armed = with_block(conf, 12, LINES)
    assert armed.startswith(conf.rstrip(b"\n") if not conf.endswith(b"\n") else conf)
    assert armed.decode(errors="replace").splitlines()[-len(LINES) - 1:-1] == LINES  # last: CRIU applies them in order
    assert 12 in blocks(armed) and operator_options(armed) == operator_options(conf)
    assert without_block(armed, 12) == conf
    assert with_block(armed, 12, LINES) == armed  # arming again (a retried step) changes nothing
    assert without_block(conf, 12) == conf         # stripping what is not there changes nothing


def test_two_migrations_blocks_come_out_in_any_order() -> None:
    conf = b"tcp-close"
    both = with_block(with_block(conf, 1, ["port 1"]), 2, ["port 2"])
    assert without_block(without_block(both, 1), 2) == conf
    assert without_block(without_block(both, 2), 1) == conf
    assert blocks(without_block(both, 1)) == [2] and blocks(without_block(both, 2)) == [1]


def test_an_operators_edit_while_armed_is_kept() -> None:
    armed = with_block(b"tcp-close\n", 5, LINES)
    edited = b"# added by the operator meanwhile\n" + armed + b"shell-job\n"
    assert without_block(edited, 5) == b"# added by the operator meanwhile\ntcp-close\nshell-job\n"
    # the block brought the line break the operator's last line lacked: lines added after it keep it
    assert without_block(with_block(b"tcp-close", 5, LINES) + b"shell-job\n", 5) == b"tcp-close\nshell-job\n"


def test_options_the_operator_sets_are_read_outside_the_blocks() -> None:
    conf = with_block(b"# comment\ntcp-close\n--leave-running\nimages-dir /x\n", 4, LINES)
    assert operator_options(conf) == {"tcp-close", "leave-running", "images-dir"}


@pytest.mark.parametrize(("line", "option"), [
    (b"images-dir=/x", "images-dir"),          # getopt_long's name=value
    (b"--images-dir /x", "images-dir"),
    (b"lazy-page", "lazy-pages"),              # an unambiguous abbreviation
    (b"network-lock nftables", "network-lock"),
    (b"  no-tcp-close  # a comment", "tcp-close"),  # a boolean's no- form names the option
    (b"tcp-estab", "tcp-established"),
    (b"leave-s", "leave-stopped"),
    (b"tls-c /etc/ca.pem", None),              # ambiguous (tls-cacert, tls-cacrl, tls-cert): CRIU fails
    (b"# images-dir /x", None), (b"", None), (b"no-such-option", None),
])
def test_a_line_sets_the_option_criu_would_read_from_it(line: bytes, option: str | None) -> None:
    assert option_of(line) == option


def test_the_operator_setting_ours_in_another_spelling_is_refused() -> None:
    for line in (b"images-dir=/x\n", b"lazy-page\n", b"network-lock nftables\n", b"tls\n"):
        why = criu.why_not_ready("node-1", criu.parse_preflight("node-1", preflight(CAP, conf=b"tcp-close\n" + line)))
        assert why is not None and "which peakpack sets per migration" in why, line
    assert handles_tcp(b"tcp-estab\n") and handles_tcp(b"--tcp-close\n") and not handles_tcp(b"tcp-\n")


# -- the node script's own lock and runc.conf handling, run for real on a temporary /etc/criu --------

class LocalNode:
    """An SshPool whose one node is this machine, with /etc/criu moved to a temporary folder."""

    def __init__(self, etc: Path) -> None:
        self.etc = etc

    async def run(self, node: str, argv: list[str], *, timeout: float = 120.0, check: bool = True,
                  input: str | None = None) -> CommandResult:
        argv = [a.replace("/etc/criu", str(self.etc)) if a == NODE_SCRIPT else a for a in argv]
        proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
        return CommandResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture()
def etc(tmp_path: Path) -> Path:
    folder = tmp_path / "criu"
    folder.mkdir()
    return folder


@pytest.mark.parametrize("conf", OPERATOR[1:])
def test_every_path_leaves_the_operators_file_as_it_was(etc: Path, conf: bytes) -> None:
    (etc / "runc.conf").write_bytes(conf)
    (etc / "runc.conf").chmod(0o640)
    node = NodeCriu(LocalNode(etc), "node-1", "/docker", 12, token=3)  # type: ignore[arg-type]
    asyncio.run(node.lock("source", 60))                      # the lease, then the block
    asyncio.run(node.arm("source", LINES))
    assert (etc / "runc.conf").read_bytes() == with_block(conf, 12, LINES)
    assert (etc / "peakpack.lock").read_text().startswith("12 source 3 ")
    asyncio.run(node.strip())                                 # after its dump: the block goes, the lease stays
    assert (etc / "runc.conf").read_bytes() == conf and (etc / "peakpack.lock").exists()
    assert oct((etc / "runc.conf").stat().st_mode & 0o777) == oct(0o640)
    asyncio.run(node.arm("source", LINES))                    # failure or crash: settling disarms it
    asyncio.run(node.disarm())
    asyncio.run(node.disarm())                                # and again, after a crash mid-way
    assert (etc / "runc.conf").read_bytes() == conf
    asyncio.run(node.unlock())                                # settled: the lease is a tombstone
    assert (etc / "peakpack.lock").read_text().endswith(" settled\n")
    assert (etc / "runc.conf").read_bytes() == conf


def test_a_symlinked_runc_conf_is_edited_where_it_points(etc: Path) -> None:
    (etc / "real.conf").write_bytes(b"tcp-close\n")
    (etc / "runc.conf").symlink_to("real.conf")
    node = NodeCriu(LocalNode(etc), "node-1", "/docker", 3)  # type: ignore[arg-type]
    asyncio.run(node.lock("target", 60))
    asyncio.run(node.arm("target", ["images-dir /x"]))
    assert (etc / "runc.conf").is_symlink() and b"images-dir /x" in (etc / "real.conf").read_bytes()
    asyncio.run(node.disarm())
    assert (etc / "real.conf").read_bytes() == b"tcp-close\n" and (etc / "runc.conf").is_symlink()


def test_the_lock_keeps_a_second_migration_out_and_only_its_holder_releases_it(etc: Path) -> None:
    (etc / "runc.conf").write_bytes(b"tcp-close\n")
    one = NodeCriu(LocalNode(etc), "node-1", "/docker", 1)  # type: ignore[arg-type]
    two = NodeCriu(LocalNode(etc), "node-1", "/docker", 2)  # type: ignore[arg-type]
    asyncio.run(one.lock("source", 60))
    asyncio.run(one.lock("source", 60))  # its own lease again: renewed
    with pytest.raises(NodeError, match="held by migration 1 source"):
        asyncio.run(two.lock("target", 60))
    with pytest.raises(NodeError, match="migration 2 holds no lease on this node"):
        asyncio.run(two.disarm())    # not its lease: it does nothing here
    asyncio.run(two.unlock())        # nor does it release another's
    assert (etc / "peakpack.lock").read_text().startswith("1 source 0 ")
    assert (etc / "runc.conf").read_bytes() == b"tcp-close\n"


def test_a_node_refuses_a_controller_whose_token_another_has_replaced(etc: Path) -> None:
    """The lease carries the store's fencing token: once the new leader has renewed it with a newer
    token, every step of the old one is refused on the node itself, whatever it believes."""
    (etc / "runc.conf").write_bytes(b"tcp-close\n")
    old = NodeCriu(LocalNode(etc), "node-1", "/docker", 4, token=5)  # type: ignore[arg-type]
    new = NodeCriu(LocalNode(etc), "node-1", "/docker", 4, token=6)  # type: ignore[arg-type]
    asyncio.run(old.lock("source", 60))
    asyncio.run(old.arm("source", LINES))
    asyncio.run(new.lock("source", 60))  # the take-over
    for step in (old.lock("source", 60), old.strip(), old.resume(1), old.abort("dport = :1"), old.make("dump"),
                 old.docker("start", "web", timeout=10), old.fence(), old.unlock()):
        with pytest.raises(FencedError, match="token 6, newer than ours"):
            asyncio.run(step)
    assert (etc / "runc.conf").read_bytes() == with_block(b"tcp-close\n", 4, LINES)  # untouched by the old one
    lease = asyncio.run(new.lease())
    assert lease is not None and (lease.migration, lease.role, lease.token, lease.stale) == (4, "source", 6, False)
    asyncio.run(new.disarm())
    asyncio.run(new.unlock())  # settled by the new leader: the old one comes back to a tombstone
    settled = asyncio.run(new.lease())
    assert settled is not None and settled.settled and not settled.stale
    for step in (old.lock("source", 60), old.resume(1), old.docker("start", "web", timeout=10)):
        with pytest.raises(FencedError, match="was settled here by the controller with token 6"):
            asyncio.run(step)
    other = NodeCriu(LocalNode(etc), "node-1", "/docker", 9, token=6)  # type: ignore[arg-type]
    with pytest.raises(NodeError, match="migration 9 holds no lease on this node"):
        asyncio.run(other.make("dump"))  # no step of a migration without its lease
    asyncio.run(other.lock("target", 60))  # a settled migration's node is free for the next one
    assert (etc / "peakpack.lock").read_text().startswith("9 target 6 ")


def test_a_lease_nobody_renewed_is_stale_and_says_so() -> None:
    lease = criu.NodeLease.parse("7 target 12 1000", now=1300)
    assert lease.stale and lease.describe() == "migration 7 target, token 12, expired 300 s ago"
    assert criu.NodeLease.parse("7 source", now=5).describe() == "migration 7 source, token 0, expired 5 s ago"
    why = criu.why_not_ready("node-2", criu.parse_preflight("node-2", preflight(CAP, lock="7 target 12 1000")
                                                          .replace("cap_eff", "now 1300\ncap_eff")))
    assert why is not None and "migration 7 target, token 12, expired 300 s ago" in why


def test_a_write_racing_an_operators_edit_is_redone_on_the_new_content(etc: Path) -> None:
    (etc / "runc.conf").write_bytes(b"tcp-close\n")
    local = LocalNode(etc)
    node = NodeCriu(local, "node-1", "/docker", 9)  # type: ignore[arg-type]
    edits = iter([b"tcp-close\nshell-job\n"])
    real = local.run

    async def edit_once_after_reading(node_name: str, argv: list[str], **kw: object) -> CommandResult:
        res = await real(node_name, argv, **kw)  # type: ignore[arg-type]
        if argv[-1] == "read" and (text := next(edits, None)) is not None:
            (etc / "runc.conf").write_bytes(text)  # the operator, between our read and our write
        return res

    asyncio.run(node.lock("source", 60))
    local.run = edit_once_after_reading  # type: ignore[method-assign]
    asyncio.run(node.arm("source", LINES))
    assert (etc / "runc.conf").read_bytes() == with_block(b"tcp-close\nshell-job\n", 9, LINES)


# -- preflight ---------------------------------------------------------------------------------------

def preflight(cap_eff: str, *procs: str, conf: bytes = b"tcp-close\n", lock: str = "", missing: str = "") -> str:
    lines = [f"cap_eff {cap_eff}", "pipe_max_size 1048576", f"lock {lock}",
             f"conf {base64.b64encode(conf).decode()}", f"missing {missing}".rstrip(), *procs, "rss_kb 266240"]
    return "\n".join(lines) + "\n"


NO_CAP, CAP = "000001fffeffffff", "000001ffffffffff"  # this machine's root; a real host's


@pytest.mark.parametrize("ids", ["1000 1000 1000 1000;1000 1000 1000 1000",   # --user 1000:1000
                                 "0 0 0 0;1000 1000 1000 1000",               # --user 0:1000: the gid alone
                                 "65534 65534 65534 65534;0 0 0 0"])           # memcached -u nobody
def test_a_process_not_root_is_refused_where_root_lacks_cap_sys_resource(ids: str) -> None:
    facts = criu.parse_preflight("node-1", preflight(NO_CAP, "proc 4242;0 0 0 0;0 0 0 0", f"proc 4250;{ids}"))
    why = criu.why_cannot_dump("mc", "node-1", facts)
    assert why is not None and why.count("\n") == 0
    assert why.startswith("mc: its process 4250 runs as uid") and "node-1 lacks CAP_SYS_RESOURCE" in why
    assert "run it as root:root" in why  # the fix
    assert facts.memory_mb == 260
    assert criu.why_cannot_dump("mc", "node-1", criu.parse_preflight("node-1", preflight(CAP, f"proc 4250;{ids}"))) \
        is None  # a real host's root may read anyone's rlimits


def test_a_zombie_among_the_processes_counts_no_memory() -> None:
    """The node's own preflight script, run here: a process that has exited and is not reaped yet
    has no VmRSS line, and it stopped the count (and the migration) with a shell error."""
    parent = subprocess.Popen(["sh", "-c", "sleep 0 & exec sleep 30"])  # sleep never reaps its child
    try:
        zombie = ""
        for _ in range(100):
            children = Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()
            if children and "State:\tZ" in Path(f"/proc/{children[0]}/status").read_text():
                zombie = children[0]
                break
            time.sleep(0.05)
        assert zombie, "the child did not become a zombie"
        done = subprocess.run(["sh", "-c", NODE_SCRIPT, "sh", "preflight", str(parent.pid)], capture_output=True,
                              text=True, timeout=120)
    finally:
        parent.kill()
        parent.wait()
    assert done.returncode == 0, done.stderr
    facts = criu.parse_preflight("node-1", done.stdout)
    assert f"proc {zombie};" in done.stdout and facts.memory_mb >= 0
    # this machine's kernel (reno is always built in) and its CRIU as scripts/build-criu.sh built it
    assert "reno" in facts.congestions and facts.criu_congestion


def _group_alive(group: int) -> list[int]:
    """The processes of process group `group` that run (zombies wait for their reaper only)."""
    return [pid for pid, fields in stat_fields() if fields[2] == str(group) and fields[0] != "Z"]


def test_stop_kills_a_daemon_with_its_whole_process_group(tmp_path: Path) -> None:
    """The node's own script, run here by `sh` as on a node (dash on Debian): `page-server` starts
    the daemon in a process group of its own under `timeout`, and `stop` kills that group. dash
    refused `kill -KILL -- -PGID`, so a settled migration's page server lived on until its timeout."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "criu"  # says it is ready on its status descriptor, then waits as a page server does
    fake.write_text("#!/bin/sh\nprintf '\\0' >&3\nexec sleep 60\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    folder = tmp_path / "peakpack-criu" / "7"
    folder.mkdir(parents=True)

    def node(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sh", "-c", NODE_SCRIPT, "sh", *args], capture_output=True, text=True, env=env,
                              timeout=60)

    started = node("page-server", str(folder), "127.0.0.1", "27999", "60")
    assert started.returncode == 0, started.stdout + started.stderr
    group = int((folder / "page-server.pid").read_text())
    try:
        assert len(_group_alive(group)) == 3  # timeout, the shell that notes its status, the daemon
        stopped = node("stop", str(folder))
        assert stopped.returncode == 0, stopped.stderr
        for _ in range(100):
            if not _group_alive(group):
                break
            time.sleep(0.05)
        assert _group_alive(group) == []
    finally:
        for pid in _group_alive(group):
            os.kill(pid, signal.SIGKILL)


def test_root_processes_dump_anywhere() -> None:
    facts = criu.parse_preflight("node-1", preflight(NO_CAP, "proc 1;0 0 0 0;0 0 0 0"))
    assert criu.why_cannot_dump("mc", "node-1", facts) is None


@pytest.mark.parametrize("text, expect", [
    (preflight(NO_CAP, conf=b"shell-job\n"), "does not say tcp-close"),
    (preflight(NO_CAP, conf=b"tcp-close\npage-server\n"), "sets page-server, which peakpack sets per migration"),
    (preflight(NO_CAP, conf=with_block(b"tcp-close\n", 7, ["port 1"])), "migration 7's block"),
    (preflight(NO_CAP, lock="7 source"), "peakpack.lock (migration 7 source, token 0"),
    (preflight(NO_CAP, missing="missing ss"), "ss missing"),
])
def test_a_node_that_cannot_take_part_is_refused_in_one_line(text: str, expect: str) -> None:
    why = criu.why_not_ready("node-2", criu.parse_preflight("node-2", text))
    assert why is not None and expect in why and why.startswith("node node-2: ") and "\n" not in why


def test_post_copy_needs_big_pipes_where_root_lacks_cap_sys_resource() -> None:
    small = criu.parse_preflight("node-1", preflight(NO_CAP))
    assert "fs.pipe-max-size = 4194304" in (criu.why_not_post_copy("node-1", small) or "")
    big = criu.parse_preflight("node-1", preflight(NO_CAP).replace("1048576", "4194304"))
    assert criu.why_not_post_copy("node-1", big) is None


def test_the_page_streams_congestion_control_is_asked_of_both_crius_or_said_to_be_the_nodes_own() -> None:
    both = [(n, criu.parse_preflight(n, preflight(CAP) + "congestion reno bbr cubic\ncriu_congestion yes\n"))
            for n in ("node-1", "node-2")]
    assert criu.why_no_congestion("cubic", both) is None
    assert criu.page_stream_congestion("cubic", both) == (["tcp-congestion cubic"], ", page streams over cubic")
    assert criu.page_stream_congestion("", both) == ([], "")  # "": each node's own, nothing said
    # a CRIU of another build would refuse an option it does not know: left out, and the journal says why
    old = [both[0], ("node-2", criu.parse_preflight("node-2", preflight(CAP) + "congestion reno cubic\n"))]
    lines, said = criu.page_stream_congestion("cubic", old)
    assert lines == [] and "(node-2: CRIU without --tcp-congestion; scripts/build-criu.sh builds one with it)" in said


def test_a_kernel_without_the_page_streams_congestion_control_is_refused_in_one_line() -> None:
    facts = criu.parse_preflight("node-2", preflight(CAP) + "congestion reno bbr\ncriu_congestion yes\n")
    why = criu.why_no_congestion("cubic", [("node-2", facts)])
    assert why == ("node node-2: its kernel has no TCP congestion control 'cubic' ([migration] "
                   "page_stream_congestion; it has reno bbr); load it (modprobe tcp_cubic), name one it has, or set "
                   '"" for each node\'s own')
    assert criu.why_no_congestion("", [("node-2", facts)]) is None


def test_garbage_is_the_nodes_error() -> None:
    with pytest.raises(NodeError, match="node-3"):
        criu.parse_preflight("node-3", "sh: 1: awk: not found\n")
    with pytest.raises(NodeError, match="node-3"):
        criu.parse_facts("node-3", "now=\n")


def test_facts_read_what_a_migration_left_on_a_node(tmp_path: Path, etc: Path) -> None:
    (etc / "runc.conf").write_bytes(b"tcp-close\n")
    work = tmp_path / "docker" / "peakpack-criu" / "6"
    (work / "dump").mkdir(parents=True)
    (work / "images").mkdir()
    ck = tmp_path / "docker" / "containers" / "abc" / "checkpoints" / "peakpack-6"
    ck.mkdir(parents=True)
    node = NodeCriu(LocalNode(etc), "node-1", str(tmp_path / "docker"), 6)  # type: ignore[arg-type]
    facts = asyncio.run(node.facts(str(ck), 0))
    assert not (facts.dump or facts.pages or facts.complete or facts.armed) and facts.lazy is criu.LazyPages.NONE
    (work / "dump" / "inventory.img").write_bytes(b"x")
    (ck / "descriptors.json").write_text("[]")
    (work / "images" / "pages-1.img").write_bytes(b"x")
    asyncio.run(node.lock("source", 60))
    facts = asyncio.run(node.facts(str(ck), 0))
    assert facts.dump and facts.pages and not facts.complete and facts.armed
    (work / "images" / "inventory.img").write_bytes(b"x")
    (work / "lazy-pages.log").write_text("...")
    (work / "lazy-pages.rc").write_text("0\n")
    facts = asyncio.run(node.facts(str(ck), 0))
    assert facts.complete and facts.lazy is criu.LazyPages.DONE
    (work / "lazy-pages.rc").write_text("1\n")
    assert asyncio.run(node.facts(str(ck), 0)).lazy is criu.LazyPages.CUT


def test_answering_names_the_addresses_that_accept_a_connection(etc: Path) -> None:
    listening, closed = socket.socket(), socket.socket()
    with listening, closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        closed.bind(("127.0.0.1", 0))  # bound, never listening: refused
        up, down = (f"127.0.0.1:{s.getsockname()[1]}" for s in (listening, closed))
        node = NodeCriu(LocalNode(etc), "node-1", "/docker", 1)  # type: ignore[arg-type]
        here = os.getpid()  # probed from this process's network namespace, as from a container's
        assert asyncio.run(node.answering(here, [up, down])) == {up}
        assert asyncio.run(node.answering(here, [])) == set()


def test_the_ports_to_probe_are_the_servers_behind_the_published_ones() -> None:
    d = {"HostConfig": {"PortBindings": {
        "80/tcp": [{"HostIp": "", "HostPort": "8080"}], "81/tcp": [{"HostIp": "10.0.0.2", "HostPort": "8081"}],
        "53/udp": [{"HostIp": "", "HostPort": "5353"}], "82/tcp": [{"HostIp": "0.0.0.0", "HostPort": "8082"}]}},
        "NetworkSettings": {"Networks": {"none": {"IPAddress": ""}, "app": {"IPAddress": "172.18.0.5"}}}}
    assert probe_addresses(d, ("8080/tcp", "8081/tcp", "5353/tcp")) == ("172.18.0.5:80", "172.18.0.5:81")
    assert probe_addresses(d, ()) == ()
    assert probe_addresses({**d, "NetworkSettings": {"Networks": {}}}, ("8080/tcp",)) == ()
