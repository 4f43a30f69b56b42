"""The node's QoS guard (qos/guard/), its pure parts: what it parses from the kernel, how it
decides to cap best-effort CPU and give it back, whom it stops on memory pressure, migration holds,
its settings; and that its archive stays what a node can run (the standard library only, and the
settings' one declaration) with the settings peakpack writes for it."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from peakpack.migrate import hold
from peakpack.orchestrator.domain import guard as settings_module
from peakpack.orchestrator.domain.config import _Qos
from peakpack.orchestrator.domain.guard import INVENTORY_KEYS, GuardSettings, parse_guard_json
from peakpack.qos import guard
from peakpack.qos.guard import decide, events, parse
from peakpack.qos.guard.decide import CpuSuppress, MemoryGuard, Seen, choose_victims, split_quota
from peakpack.qos.report import digest, guard_archive

S = GuardSettings()


def test_the_guard_imports_nothing_but_the_standard_library() -> None:
    """It runs on nodes that need not have peakpack (or anything else) installed: its modules
    import the standard library, each other, and the one module that declares its settings, which
    imports the standard library only."""
    files = [*Path(guard.__file__).parent.glob("*.py"), Path(settings_module.__file__)]
    for path in files:
        tree = ast.parse(path.read_text())
        names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module.split(".")[0] for n in ast.walk(tree)
                  if isinstance(n, ast.ImportFrom) and n.module and not n.level
                  and n.module != "peakpack.orchestrator.domain.guard"
                  and not n.module.startswith("peakpack.qos.guard")}
        assert names <= set(sys.stdlib_module_names) | {"__future__"}, path


def test_the_guard_archive_runs_by_itself(tmp_path: Path) -> None:
    """Written alone into an empty folder, as peakpack copies it to a node, and run with nothing
    but the standard library; it names its build by the archive's digest."""
    archive = tmp_path / "guard.pyz"
    archive.write_bytes(guard_archive())
    env = {"PATH": os.environ["PATH"]}
    proc = subprocess.run([sys.executable, "-S", str(archive), "report", "--state-dir", str(tmp_path / "qos")],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["running"] is False and doc["events"] == [] and doc["version"] == digest(guard_archive())
    assert guard_archive() == guard_archive()  # the same bytes every time: the digest names the build


def test_the_inventory_checks_the_guards_own_ranges() -> None:
    """guard.json is written from the inventory's [qos]: its keys are declared once
    (`domain/qos.GuardSettings`), with the ranges both the inventory and the guard check."""
    for key, spec in INVENTORY_KEYS.items():
        lo, hi = spec.metadata["range"]
        step = 1 if spec.metadata["integer"] else 1e-9
        _Qos(**{key: lo}), _Qos(**{key: hi})
        for outside in (lo - step, hi + step):
            with pytest.raises(ValidationError):
                _Qos(**{key: outside})
        assert parse_guard_json({key: hi + step}, "guard.json")[1], key


def test_the_migrators_hold_is_what_the_guard_honours(tmp_path: Path) -> None:
    """migrate/hold.py writes the marker with a shell command on the node; the guard reads it."""
    assert hold.QOS_DIR == f'"${{PEAKPACK_QOS_DIR:-{guard.DEFAULT_STATE_DIR}}}"'
    marker = json.dumps({"until": 2_000_000_000, "migration": 7})
    script = f'd={hold.QOS_DIR}/holds; mkdir -p "$d" && printf "%s\\n" "$2" > "$d/$1.new" && mv -f "$d/$1.new" "$d/$1"'
    subprocess.run(["sh", "-c", script, "sh", "web", marker], check=True, env={"PEAKPACK_QOS_DIR": str(tmp_path)})
    text = (tmp_path / "holds" / "web").read_text()
    assert parse.hold_active(text, mtime=0.0, now=1_999_999_999.0, ttl=900)
    assert not parse.hold_active(text, mtime=0.0, now=2_000_000_001.0, ttl=900)


def test_a_hold_without_until_lasts_its_ttl_from_when_it_was_written() -> None:
    assert parse.hold_active("", mtime=1000.0, now=1899.0, ttl=900)
    assert not parse.hold_active("not json", mtime=1000.0, now=1901.0, ttl=900)


# -- parsing --------------------------------------------------------------------------------------

def test_psi_totals_are_read_from_some_and_full() -> None:
    text = ("some avg10=1.50 avg60=0.80 avg300=0.20 total=123456\n"
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=789\n")
    assert parse.parse_psi(text) == {"some": 123456, "full": 789}
    assert parse.parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n") == {"some": 5}


@pytest.mark.parametrize("text", [None, "", "garbage", "some total=x\n"])
def test_psi_that_is_off_or_absent_reads_as_none(text: str | None) -> None:
    """A kernel booted with psi=0 fails the read (EOPNOTSUPP): the guard gets None and falls back."""
    assert parse.parse_psi(text) is None


def test_schedstat_gives_the_run_queue_wait() -> None:
    assert parse.schedstat_wait_ns("2893719 160330 12\n") == 160330
    assert parse.schedstat_wait_ns(None) is None and parse.schedstat_wait_ns("1") is None


def test_wait_deltas_count_new_threads_whole_and_forget_exited_ones() -> None:
    before = {"10": 1_000, "11": 5_000, "12": 9_000}
    now = {"10": 1_500, "11": 5_000, "13": 700, "12": 300}  # 12: a reused tid, a newer thread
    assert parse.wait_delta(before, now) == 500 + 0 + 700 + 300
    assert parse.wait_delta({}, {}) == 0


def test_mountinfo_finds_v1_controllers_and_the_hybrid_cgroup2_mount() -> None:
    text = "\n".join([
        "30 23 0:26 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate",
        "31 23 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct",
        "32 23 0:28 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory",
        "33 23 0:29 /sub /elsewhere rw - cgroup cgroup rw,pids",
    ])
    mounts = parse.parse_mountinfo(text)
    assert mounts.v2 == "/sys/fs/cgroup/unified"
    assert mounts.v1 == {"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
                         "memory": "/sys/fs/cgroup/memory"}


def test_proc_cgroup_gives_each_controllers_path_and_the_v2_one() -> None:
    text = "12:cpu,cpuacct:/pp01-n1/abc\n5:memory:/pp01-n1/abc\n1:name=systemd:/x\n0::/pp01-n1/abc\n"
    v1, v2 = parse.parse_proc_cgroup(text)
    assert v1["cpu"] == v1["cpuacct"] == v1["memory"] == "/pp01-n1/abc" and v2 == "/pp01-n1/abc"
    assert parse.parse_proc_cgroup("0::/init.scope\n") == ({}, "/init.scope")


@pytest.mark.parametrize("labels, expected", [
    ({}, ("ls", None)),
    ({"peakpack.qos": "be"}, ("be", None)),
    ({"peakpack.qos": "ls"}, ("ls", None)),
    ({"peakpack.qos": "BE"}, ("ls", "label peakpack.qos='BE': use ls or be; treated as ls")),
    ({"peakpack.qos": "batch"}, ("ls", "label peakpack.qos='batch': use ls or be; treated as ls")),
])
def test_a_bad_qos_label_is_latency_sensitive_and_said(labels: dict[str, str], expected: tuple) -> None:
    assert parse.qos_class(labels) == expected


def test_the_quota_docker_gave_is_the_ceiling() -> None:
    assert parse.ceiling_us({"NanoCpus": 500_000_000}) == 50_000
    assert parse.ceiling_us({"CpuQuota": 20_000, "CpuPeriod": 50_000}) == 40_000
    assert parse.ceiling_us({"CpuQuota": -1}) is None and parse.ceiling_us({}) is None


def test_settings_refuse_each_bad_key_in_one_line_and_keep_the_rest() -> None:
    settings, errors = parse_guard_json({"cpu_watermark": 0.5, "bogus": 1, "stall_watermark": "10%",
                                             "breaches_to_act": 1.5, "cpus": 2, "node": "node-1"}, "guard.json")
    assert (settings.cpu_watermark, settings.cpus, settings.node) == (0.5, 2.0, "node-1")
    assert settings.stall_watermark == S.stall_watermark and settings.breaches_to_act == S.breaches_to_act
    assert len(errors) == 3 and all("\n" not in e for e in errors)
    assert errors[0].startswith("guard.json: unknown key 'bogus'; known keys: ")
    assert errors[1] == "guard.json: stall_watermark = '10%'; use a number in 0.001..1 (default 0.1 in use)"
    assert errors[2] == "guard.json: breaches_to_act = 1.5; use a whole number in 1..60 (default 2 in use)"
    assert parse_guard_json([1], "g.json")[1] == ['g.json: not a JSON object; write {"key": value, ...}, '
                                                      'defaults in use']


# -- deciding: CPU --------------------------------------------------------------------------------

def ls(cores: float = 0.05, stall: float | None = 0.0, name: str = "web") -> Seen:
    return Seen(name, "ls", cores, stall)


def be(name: str, cores: float, *, quota: int | None = None, throttled: bool = False, held: bool = False,
       ceiling: int | None = None, priority: int = 0, working_set: int = 0) -> Seen:
    return Seen(name, "be", cores, None, "psi", throttled, quota, ceiling, working_set, priority, held)


def test_water_filling_gives_the_rest_to_whoever_presses() -> None:
    quotas = split_quota([be("small", 0.1), be("hog", 0.9, throttled=True)], allowed=0.6)
    assert quotas["small"] == int((0.1 * 1.2 + 0.02) * guard.PERIOD_US)
    assert quotas["hog"] == int((0.6 - 0.14) * guard.PERIOD_US)
    assert split_quota([be("a", 1.0, throttled=True), be("b", 1.0, throttled=True)], 0.6) == {"a": 30000, "b": 30000}
    assert split_quota([be("capped", 1.0, throttled=True, ceiling=10_000)], 0.6) == {"capped": 10_000}


def run(machine: CpuSuppress, checks: list[tuple[list[Seen], float]],
        s: GuardSettings = S) -> list[decide.Decision | None]:
    return [machine.step(seen, node, 1.0, s, now=float(i)) for i, (seen, node) in enumerate(checks)]


def test_best_effort_is_capped_after_two_breaches_in_a_row_koordinator_style() -> None:
    hot = ([ls(0.05, stall=0.2), be("hog1", 0.5), be("hog2", 0.5)], 1.05)
    machine = CpuSuppress()
    first, second = run(machine, [hot, hot])
    assert first is None  # one breach is not yet a reason (Crane's avoidance)
    assert second is not None and second.kind == "cpu_suppress"
    assert machine.allowed == pytest.approx(0.65 - 0.05)  # capacity x 65% - latency-sensitive use
    assert set(second.quotas) == {"hog1", "hog2"} and second.facts["first_breach_ts"] == 0.0
    assert "node CPU 1.05 > 80% of 1" in second.reason and "web stalled 20% (psi)" in second.reason


def test_a_single_breach_between_clear_checks_does_nothing() -> None:
    hot = ([ls(stall=0.3), be("hog", 0.9)], 0.95)
    calm = ([ls(stall=0.0), be("hog", 0.3)], 0.35)
    assert run(CpuSuppress(), [hot, calm, hot, calm]) == [None] * 4


def test_stall_is_not_blamed_on_best_effort_that_does_not_use_the_cpu() -> None:
    """The weak spot of tightening on stall: a stall caused by something else (another node on the
    same cores, a daemon) must not starve an idle best-effort container."""
    stalled_idle = ([ls(0.1, stall=0.5), be("batch", 0.01)], 0.11)
    machine = CpuSuppress()
    assert run(machine, [stalled_idle] * 5) == [None] * 5 and machine.allowed is None


def test_a_stall_that_persists_tightens_the_cap_by_at_most_stall_steps_under_the_formula() -> None:
    """Each breached check under the cap may take one step (10% of capacity) while the stall
    persists, at most `stall_steps` under Koordinator's formula: a stall best-effort did not cause
    costs it at most that."""
    stuck = ([ls(0.05, stall=0.3), be("hog", 0.5, throttled=True, quota=50_000)], 0.55)
    for steps in (1, 3):
        machine = CpuSuppress()
        decisions = run(machine, [stuck] * 8, GuardSettings(stall_steps=steps))
        assert machine.allowed == pytest.approx(0.6 - 0.1 * steps)
        assert decisions[-1] is None or "not tightening further" in decisions[-1].reason
    never = CpuSuppress()
    run(never, [stuck] * 5, GuardSettings(stall_steps=0))
    assert never.allowed == pytest.approx(0.6)  # usage only, as Koordinator


def test_the_cap_comes_back_one_step_per_clear_check_and_stays_while_best_effort_presses() -> None:
    machine = CpuSuppress()
    run(machine, [([ls(0.2, stall=0.3), be("hog", 0.9)], 1.1)] * 2)
    assert machine.allowed == pytest.approx(0.45)
    decisions, quota = [], 45_000
    for i in range(5):  # each check the hog uses all it may: it presses against its cap
        seen = [ls(0.0, stall=0.0), be("hog", quota / guard.PERIOD_US, throttled=True, quota=quota)]
        decisions.append(machine.step(seen, quota / guard.PERIOD_US, 1.0, S, now=10.0 + i))
        quota = decisions[-1].quotas["hog"] if decisions[-1] else quota
    assert decisions[0] is None  # one clear check: nothing yet
    assert [d.reason for d in decisions[1:] if d] == ["clear: giving back"] * 2
    assert machine.allowed == pytest.approx(0.65)  # back up to the formula, not beyond: it still presses


def test_the_cap_is_lifted_when_best_effort_stops_pressing_or_no_latency_sensitive_is_left() -> None:
    for clear in (([ls(stall=0.0), be("hog", 0.05, quota=40_000)], 0.1),  # uses far less than its cap
                  ([be("hog", 0.9, throttled=True, quota=40_000)], 0.9)):  # nobody left to protect
        machine = CpuSuppress()
        run(machine, [([ls(stall=0.3), be("hog", 0.9)], 0.95)] * 2)
        decisions = run(machine, [clear] * 2)
        assert machine.allowed is None
        assert decisions[-1] is not None and decisions[-1].kind == "cpu_restore"
        assert decisions[-1].quotas == {"hog": None}  # unlimited again (its ceiling: none)


def test_best_effort_that_waits_for_cpu_still_presses_and_keeps_its_cap() -> None:
    """Kept on fewer CPUs, best-effort may use less than its quota and still want more: its own
    stall says so, and lifting the cap then would only bring the latency-sensitive stall back."""
    machine = CpuSuppress()
    run(machine, [([ls(stall=0.3), be("hog", 0.9)], 0.95)] * 2)
    waiting = Seen("hog", "be", 0.2, 0.6, quota_us=55_000)  # uses 0.2 of 0.55, waits 60% of the time
    run(machine, [([ls(stall=0.0), waiting], 0.25)] * 4)
    assert machine.allowed == pytest.approx(0.65 - 0.05)  # not lifted: the formula's cap stays


def test_a_held_container_is_never_capped_and_counts_as_latency_sensitive_use() -> None:
    hot = ([ls(0.05, stall=0.3), be("moving", 0.4, held=True), be("hog", 0.6)], 1.05)
    machine = CpuSuppress()
    decision = run(machine, [hot, hot])[-1]
    assert decision is not None and set(decision.quotas) == {"hog"}
    assert machine.allowed == pytest.approx(0.65 - 0.45)
    only_held = ([ls(stall=0.5), be("moving", 0.9, held=True)], 0.95)
    assert run(CpuSuppress(), [only_held] * 3) == [None] * 3


def test_a_restore_gives_back_dockers_own_quota() -> None:
    machine = CpuSuppress()
    run(machine, [([ls(stall=0.3), be("hog", 0.5, ceiling=50_000)], 0.95)] * 2)
    decision = run(machine, [([ls(stall=0.0), be("hog", 0.01, quota=20_000, ceiling=50_000)], 0.05)] * 2)[-1]
    assert decision is not None and decision.quotas == {"hog": 50_000}


def test_cpu_lists_parse_and_print_as_the_kernel_writes_them() -> None:
    assert parse.parse_cpus("0-2,5\n") == [0, 1, 2, 5] and parse.parse_cpus("") == []
    assert parse.format_cpus([5, 0, 2, 1]) == "0-2,5" and parse.format_cpus([3]) == "3"


def test_capped_best_effort_is_kept_off_at_least_one_cpu_koordinators_cpuset_policy() -> None:
    assert parse.be_cpus([0], 0.6) is None  # one CPU: nothing to keep free
    assert parse.be_cpus([0, 1], 0.6) == [1]
    assert parse.be_cpus([0, 1], 1.3) == [1]  # never all of them
    assert parse.be_cpus(list(range(16)), 5.2) == [10, 11, 12, 13, 14, 15]
    machine = CpuSuppress()
    hot = [ls(stall=0.3), be("hog", 0.9)]
    suppress = [machine.step(hot, 0.95, 1.0, S, float(i), node_cpus=[0, 1]) for i in range(2)][-1]
    assert suppress is not None and suppress.cpus == [1]
    calm = [ls(stall=0.0), be("hog", 0.01, quota=55_000)]
    restore = [machine.step(calm, 0.05, 1.0, S, float(i), node_cpus=[0, 1]) for i in range(2, 4)][-1]
    assert restore is not None and restore.kind == "cpu_restore" and restore.cpus is None


# -- deciding: memory -----------------------------------------------------------------------------

MiB = 1 << 20


def test_the_lowest_priority_then_largest_best_effort_container_is_stopped_first() -> None:
    cands = [be("big", 0, working_set=300 * MiB), be("small", 0, working_set=50 * MiB),
             be("precious", 0, working_set=900 * MiB, priority=5)]
    assert choose_victims(cands, 100 * MiB) == ("big",)
    assert choose_victims(cands, 320 * MiB) == ("big", "small")
    assert choose_victims(cands, -5) == ("big",)  # at least one


def test_memory_under_the_watermark_stops_best_effort_never_latency_sensitive() -> None:
    seen = [ls(name="db"), be("grow", 0.1, working_set=280 * MiB)]
    d = MemoryGuard().step(seen, 512 * MiB, 40 * MiB, 0.0, S, now=0.0)
    assert d is not None and d.kind == "mem_evict" and d.victims == ("grow",)
    assert d.reason == "available 40 MiB < 10% of 512 MiB"
    nobody = MemoryGuard().step([ls(name="db"), be("moving", 0, held=True)], 512 * MiB, 40 * MiB, 0.0, S, 0.0)
    assert nobody is not None and nobody.kind == "mem_no_victim" and nobody.victims == ()


def test_memory_pressure_full_acts_after_two_checks_and_then_cools_down() -> None:
    guard_ = MemoryGuard()
    seen = [be("cache", 0, working_set=100 * MiB)]
    assert guard_.step(seen, 512 * MiB, 300 * MiB, 0.4, S, now=0.0) is None
    d = guard_.step(seen, 512 * MiB, 300 * MiB, 0.4, S, now=1.0)
    assert d is not None and d.victims == ("cache",) and "memory.pressure full 40% for 2 checks" in d.reason
    assert guard_.step(seen, 512 * MiB, 10 * MiB, 0.4, S, now=2.0) is None  # 3 s cooldown
    assert guard_.step(seen, 512 * MiB, 10 * MiB, 0.4, S, now=4.5) is not None


def test_events_after_a_seq_and_a_lost_stretch_after_rotation(tmp_path: Path) -> None:
    log = events.EventLog(str(tmp_path), "node-1", max_bytes=4096)
    for i in range(150):
        log.emit("cpu_adjust", reason=f"step {i}")
    assert log.seq == 150 and (tmp_path / "events.jsonl.1").exists()
    newest, lost = events.events_after(str(tmp_path), 145)
    assert [e["seq"] for e in newest] == [146, 147, 148, 149, 150] and not lost
    everything, lost = events.events_after(str(tmp_path), 0)
    assert lost and everything[0]["seq"] > 1  # the oldest were rotated away: the reader is told
    again = events.EventLog(str(tmp_path), "node-1", max_bytes=4096)  # a restarted guard goes on counting
    assert again.seq == 150 and again.log_id == log.log_id
