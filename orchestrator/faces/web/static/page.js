// The page's live part: energy charts (uPlot, served from the package) and a refresh every few
// seconds. Everything else is rendered by the server, so the page works without this script.
"use strict";

const REFRESH_MS = 5000;
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
const charts = {};

function chartData(group) {
  const labels = Object.keys(group.series);
  return { labels, data: [group.t, ...labels.map((l) => group.series[l])] };
}

function draw(el, group) {
  const { labels, data } = chartData(group);
  const key = el.dataset.series;
  const old = charts[key];
  if (old && old.labels.join("\n") === labels.join("\n")) {
    old.plot.setData(data);
    return;
  }
  if (old) old.plot.destroy();
  el.textContent = labels.length ? "" : "No energy recorded in this period.";
  if (!labels.length) { delete charts[key]; return; }
  const opts = {
    width: Math.max(400, Math.min(1100, el.clientWidth || 900)),
    height: 260,
    series: [{}, ...labels.map((label, i) => ({
      label, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: true,
      value: (u, v) => (v == null ? "-" : v.toFixed(3) + " Wh"),
    }))],
    axes: [{}, { label: "Wh" }],
  };
  charts[key] = { labels, plot: new uPlot(opts, data, el) };
}

function drawAll(state) {
  document.querySelectorAll(".chart[data-series]").forEach((el) => draw(el, state.energy[el.dataset.series]));
}

function editing() {
  // an operator typing a token into an approve form must not lose it to a refresh
  return Array.from(document.querySelectorAll("#tables input")).some(
    (i) => i === document.activeElement || (i.type !== "checkbox" && i.value) || i.checked);
}

async function refresh() {
  try {
    const state = await (await fetch("/api/state", { cache: "no-store" })).json();
    drawAll(state);
    if (!editing()) {
      document.getElementById("tables").innerHTML = await (await fetch("/tables", { cache: "no-store" })).text();
    }
    document.getElementById("savings").textContent = state.savings.headline;
    const stamp = document.getElementById("refreshed");
    stamp.dataset.generated = state.generated_at;
    stamp.textContent = "Refreshed " + state.generated_at.slice(0, 19).replace("T", " ") + " UTC.";
  } catch (e) {
    document.getElementById("refreshed").textContent = "Refresh failed: " + e;
  }
}

refresh();
setInterval(refresh, REFRESH_MS);
