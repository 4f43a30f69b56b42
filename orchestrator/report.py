"""`peakpack report`: history as pictures. Reads the same JSON rows `peakpack history --json`
prints, draws PNGs with matplotlib and ties them together in one self-contained HTML page (PNGs inlined, also written beside it)."""

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
import matplotlib.pyplot as plt  # noqa: E402

Row = dict[str, Any]


@dataclass
class History:
    plans: list[Row] = field(default_factory=list)
    migrations: list[Row] = field(default_factory=list)
    power: list[Row] = field(default_factory=list)
    energy: list[Row] = field(default_factory=list)


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


def plot_power(h: History, out: Path) -> str:
    fig, ax = _figure("Power: measured (per node, stacked) and modelled", "W")
    per_node: dict[str, list[tuple[datetime, float]]] = defaultdict(list)
    for e in h.energy:
        start, end = _t(e["start"]), _t(e["end"])
        seconds = (end - start).total_seconds()
        if seconds > 0 and e.get("node"):
            per_node[e["node"]].append((end, e["energy_j"] / seconds))
    if per_node:
        times = sorted({t for series in per_node.values() for t, _ in series})
        stacks = []
        for node in sorted(per_node):
            values = dict(per_node[node])
            stacks.append([values.get(t, 0.0) for t in times])
        ax.stackplot(times, *stacks, labels=sorted(per_node), alpha=0.7)
    model = sorted((_t(p["created_at"]), p["before"]["power_w"]) for p in h.plans)
    if model:
        ax.plot([m[0] for m in model], [m[1] for m in model], color="black", label="model (observed load)")
    if per_node or model:
        ax.legend(fontsize="small", ncol=3)
    else:
        _empty(ax, "no power data recorded")
    return _save(fig, out / "power.png")


def plot_energy(h: History, out: Path) -> str:
    fig, ax = _figure("Energy per node", "kJ")
    totals: Counter[str] = Counter()
    for e in h.energy:
        if e.get("node"):
            totals[e["node"]] += e["energy_j"] / 1000
    if totals:
        nodes = sorted(totals)
        ax.bar(nodes, [totals[n] for n in nodes])
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
    total_kj = sum(e["energy_j"] for e in h.energy if e.get("node")) / 1000
    frozen = sorted(m["frozen_ms"] for m in h.migrations if m.get("frozen_ms") is not None)
    median = f"{frozen[len(frozen) // 2]:.0f} ms" if frozen else "n/a"
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:900px;margin:2em auto}}
table{{border-collapse:collapse;font-size:small}}td,th{{border:1px solid #ccc;padding:2px 6px}}
.kpi{{display:inline-block;margin-right:2em;font-size:1.3em}}</style></head><body>
<h1>{html.escape(title)}</h1>
<p><span class="kpi">{len(h.plans)} plans</span><span class="kpi">{len(h.migrations)} migrations</span>
<span class="kpi">median downtime {median}</span><span class="kpi">{total_kj:.1f} kJ measured</span>
<span class="kpi">{len(h.power)} power events</span></p>
{''.join(_img(out / name) for name in images)}
<h2>Recent migrations</h2>
{_table(h.migrations[-20:], ["container", "source", "target", "state", "frozen_ms", "started_at"])}
<h2>Power events</h2>
{_table(h.power[-20:], ["node", "action", "state", "at"])}
</body></html>
"""
    index = out / "index.html"
    index.write_text(page)
    return index
