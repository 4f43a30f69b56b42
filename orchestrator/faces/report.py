"""`peakpack report`: history as pictures. Reads the same JSON rows `peakpack history --json`
prints, draws PNGs with matplotlib and ties them together in one self-contained HTML page (PNGs
inlined, also written beside it)."""

from __future__ import annotations

import base64
import html
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

Row = dict[str, Any]


@dataclass
class History:
    plans: list[Row] = field(default_factory=list)
    migrations: list[Row] = field(default_factory=list)
    power: list[Row] = field(default_factory=list)
    energy: list[Row] = field(default_factory=list)
    #: the savings ledger per day (`domain.savings.Ledger.rows("day")`) and its one-line headline
    savings: list[Row] = field(default_factory=list)
    savings_headline: str = ""


def _t(value: str) -> datetime:
    return datetime.fromisoformat(value)


def _figure(title: str, ylabel: str) -> tuple[Any, Any]:
    fig, ax = plt.subplots(figsize=(8, 3.2), dpi=100)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    return fig, ax


def _save(fig: Any, path: Path) -> str:
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path.name


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="grey")


def plot_nodes_on(h: History, out: Path) -> str:
    fig, ax = _figure("Nodes powered on", "nodes")
    points = sorted((_t(p["created_at"]), p["before"]["nodes_on"], p["after"]["nodes_on"]) for p in h.plans)
    if points:
        ax.step([p[0] for p in points], [p[1] for p in points], where="post", label="observed")
        ax.step([p[0] for p in points], [p[2] for p in points], where="post", label="planned", ls="--")
        ax.legend()
    else:
        _empty(ax, "no plans recorded")
    return _save(fig, out / "nodes_on.png")


MEASURED = ("rapl", "dcmi")


def _label(source: str) -> str:
    return f"{source} (measured)" if source in MEASURED else f"{source} (power curve, not measured)"


def plot_power(h: History, out: Path) -> str:
    """Each node's mean power over every stored interval, drawn across the interval (so a run of
    one epoch still shows its intervals); modelled intervals are dashed and labelled so."""
    fig, ax = _figure("Power per node: measured (solid) and modelled (dashed)", "W")
    colors: dict[str, Any] = {}
    labelled: set[str] = set()
    for e in sorted(h.energy, key=lambda e: (e.get("node") or "", e["start"])):
        start, end = _t(e["start"]), _t(e["end"])
        seconds = (end - start).total_seconds()
        if seconds <= 0 or not e.get("node") or e.get("container"):
            continue
        node, watts = e["node"], e["energy_j"] / seconds
        label = f"{node} {_label(e['source'])}"
        line = ax.plot([start, end], [watts, watts], ls="-" if e["source"] in MEASURED else "--", marker="|",
                       color=colors.get(node), label=None if label in labelled else label)[0]
        colors.setdefault(node, line.get_color())
        labelled.add(label)
    drawn = bool(labelled)
    model = sorted((_t(p["created_at"]), p["before"]["power_w"]) for p in h.plans)
    if model:
        ax.plot([m[0] for m in model], [m[1] for m in model], color="black", ls=":",
                label="cluster, planner's model at the observed load")
    if drawn or model:
        ax.legend(fontsize="x-small", ncol=2)
    else:
        _empty(ax, "no power data recorded")
    return _save(fig, out / "power.png")


def energy_split(h: History) -> dict[str, dict[str, float]]:
    """Node energy in kJ per source (rapl, dcmi, model), and of it the idle part, the containers'
    part and the residual (Kepler's split, where the row has one)."""
    split: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for e in h.energy:
        if not e.get("node") or e.get("container"):
            continue
        part = split[e["source"]]
        part["total"] += e["energy_j"] / 1000
        if e.get("idle_j") is not None and e.get("residual_j") is not None:
            part["idle"] += e["idle_j"] / 1000
            part["residual"] += e["residual_j"] / 1000
            part["containers"] += (e["energy_j"] - e["idle_j"] - e["residual_j"]) / 1000
        else:
            part["unsplit"] += e["energy_j"] / 1000
    return {k: dict(v) for k, v in split.items()}


def plot_energy(h: History, out: Path) -> str:
    fig, ax = _figure("Energy per node, by source", "kJ")
    totals: dict[str, Counter[str]] = defaultdict(Counter)
    for e in h.energy:
        if e.get("node") and not e.get("container"):
            totals[e["source"]][e["node"]] += e["energy_j"] / 1000
    nodes = sorted({n for c in totals.values() for n in c})
    if nodes:
        bottom = [0.0] * len(nodes)
        for source in sorted(totals, key=lambda s: (s not in MEASURED, s)):
            values = [totals[source][n] for n in nodes]
            ax.bar(nodes, values, bottom=bottom, label=_label(source), hatch=None if source in MEASURED else "//",
                   alpha=1.0 if source in MEASURED else 0.5)
            bottom = [b + v for b, v in zip(bottom, values)]
        ax.legend(fontsize="small")
    else:
        _empty(ax, "no energy recorded")
    return _save(fig, out / "energy.png")


def plot_migrations(h: History, out: Path) -> str:
    fig, ax = _figure("Migrations per epoch", "migrations")
    epochs = sorted((_t(p["created_at"]), p.get("migrations", 0)) for p in h.plans)
    states = Counter(m["state"] for m in h.migrations)
    if epochs:
        ax.bar([e[0] for e in epochs], [e[1] for e in epochs], width=0.0005)
        ax.set_xlabel(", ".join(f"{k}: {v}" for k, v in sorted(states.items())) or "none executed")
    else:
        _empty(ax, "no plans recorded")
    return _save(fig, out / "migrations.png")


def plot_downtime(h: History, out: Path) -> str:
    fig, ax = _figure("Downtime (frozen time) of migrations", "migrations")
    frozen = [m["frozen_ms"] for m in h.migrations if m.get("frozen_ms") is not None]
    if frozen:
        ax.hist(frozen, bins=min(20, max(5, len(frozen))))
        ax.set_xlabel("frozen ms")
    else:
        _empty(ax, "no completed migrations")
    return _save(fig, out / "downtime.png")


def _table(rows: list[Row], keys: list[str]) -> str:
    if not rows:
        return "<p><em>none</em></p>"
    head = "".join(f"<th>{html.escape(k)}</th>" for k in keys)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(r.get(k, '')))}</td>" for k in keys) + "</tr>" for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _img(path: Path) -> str:
    """Inline the PNG so the page can be mailed or archived as one file; the PNGs stay beside it."""
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<p><img src="data:image/png;base64,{data}" alt="{html.escape(path.stem)}"></p>'


def write_report(h: History, out: Path, title: str = "peakpack report") -> Path:
    out.mkdir(parents=True, exist_ok=True)
    images = [f(h, out) for f in (plot_nodes_on, plot_power, plot_energy, plot_migrations, plot_downtime)]
    split = energy_split(h)
    measured_kj = sum(v["total"] for k, v in split.items() if k in MEASURED)
    modelled_kj = sum(v["total"] for k, v in split.items() if k not in MEASURED)
    split_rows = [{"source": _label(k), **{c: f"{v.get(c, 0.0):.1f}" for c in
                                           ("total", "idle", "containers", "residual", "unsplit")}}
                  for k, v in sorted(split.items())]
    frozen = sorted(m["frozen_ms"] for m in h.migrations if m.get("frozen_ms") is not None)
    median = f"{frozen[len(frozen) // 2]:.0f} ms" if frozen else "n/a"
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:900px;margin:2em auto}}
table{{border-collapse:collapse;font-size:small}}td,th{{border:1px solid #ccc;padding:2px 6px}}
.kpi{{display:inline-block;margin-right:2em;font-size:1.3em}}</style></head><body>
<h1>{html.escape(title)}</h1>
<p><span class="kpi">{len(h.plans)} plans</span><span class="kpi">{len(h.migrations)} migrations</span>
<span class="kpi">median downtime {median}</span><span class="kpi">{measured_kj:.1f} kJ measured</span>
<span class="kpi">{modelled_kj:.1f} kJ modelled</span>
<span class="kpi">{len(h.power)} power events</span></p>
<p id="savings"><strong>{html.escape(h.savings_headline)}</strong></p>
{''.join(_img(out / name) for name in images)}
<h2>Energy by source (kJ)</h2>
<p>Measured energy comes from RAPL counters or the BMC (DCMI); modelled energy is the node's power
curve at its measured load and is never counted as measured. Idle is the curve's idle power over the
interval; containers share the rest by their cgroup CPU time; the residual is active energy no
container's CPU time accounts for.</p>
{_table(split_rows, ["source", "total", "idle", "containers", "residual", "unsplit"])}
<h2>Energy saved, per day (kJ, measured counters only)</h2>
<p>Saved: each node switched off draws nothing of the idle power its own counter measured right
before it went off, for as long as it stays off. Spent: the measured energy of the migrations and
wakes that made it possible. RAPL counts the CPU package, DCMI the wall: the two are never added.
A cost that could not be measured is counted apart with its model figure, never in the net.</p>
{_table([{**r, **{k: f"{r[k] / 1000:.1f}" for k in ("saved_j", "spent_j", "net_j", "model_spent_j")}}
         for r in h.savings], ["period", "source", "saved_j", "spent_j", "net_j", "unmeasured_costs", "model_spent_j"])}
<h2>Recent migrations</h2>
{_table(h.migrations[-20:], ["container", "source", "target", "state", "frozen_ms", "started_at"])}
<h2>Power events</h2>
{_table(h.power[-20:], ["node", "action", "state", "at"])}
</body></html>
"""
    index = out / "index.html"
    index.write_text(page)
    return index
