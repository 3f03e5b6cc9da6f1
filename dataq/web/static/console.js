// Live updates: every few seconds, the numbers of the page's tables with a data-api attribute are read again
// from the console's JSON API, and the rate plots are reloaded. Nothing is fetched from elsewhere.
// "/" focuses the search box, as on most sites with one.
"use strict";

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  if (seconds < 120) return Math.max(0, seconds).toFixed(0) + " s";
  if (seconds < 7200) return (seconds / 60).toFixed(0) + " min";
  if (seconds < 172800) return (seconds / 3600).toFixed(1) + " h";
  return (seconds / 86400).toFixed(1) + " d";
}

function byteRate(perSecond) {
  // As the page's own filter (plot.byte_rate) says it.
  const scales = [[1e9, "GB"], [1e6, "MB"], [1e3, "kB"], [1, "B"]];
  const [scale, unit] = scales.find(([s]) => perSecond >= s) || scales[scales.length - 1];
  return (perSecond / scale).toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 }) + " " + unit + "/s";
}

function showState(cell, state) {
  // A state as the template draws it: its words in a span coloured by its severity.
  const span = document.createElement("span");
  span.className = "state state-" + state.severity;
  span.title = state.alert || "";
  span.textContent = state.words;
  cell.replaceChildren(span);
  const row = cell.closest("tr");
  if (row && !row.dataset.activity) row.className = "severity-" + state.severity;
}

function show(cell, value) {
  const field = cell.dataset.field;
  if (field === "state") { showState(cell, value); return; }
  if (field === "conditions") {
    const wrong = value.filter((c) => c.severity !== "ok").map((c) => c.detail);
    cell.textContent = wrong.length ? wrong.join("; ") : "-";
    return;
  }
  if (field === "done_bytes_per_second") { cell.textContent = byteRate(value); return; }
  if (field.endsWith("_seconds")) { cell.textContent = duration(value); return; }
  if (typeof value === "boolean") { cell.textContent = value ? "on" : "off"; return; }
  if (typeof value === "number" && field.endsWith("_per_minute")) { cell.textContent = value.toFixed(1); return; }
  if (Array.isArray(value)) {
    cell.textContent = value.length ? value.map((u) => u.destination + " (" + u.error + ")").join("; ") : "-";
    return;
  }
  cell.textContent = String(value);
}

function fill(container, doc) {
  const flat = Object.assign({}, doc, doc.rates || {});
  for (const cell of container.querySelectorAll("[data-field]")) {
    if (cell.dataset.field in flat) show(cell, flat[cell.dataset.field]);
  }
}

function fillQueue(table, queue) {
  const selector = 'tr[data-queue="' + CSS.escape(queue.name) + '"]';
  const row = table.querySelector(selector + ":not([data-activity])");
  if (row) fill(row, queue);
  for (const activity of queue.activities || []) {
    const line = table.querySelector(selector + '[data-activity="' + CSS.escape(activity.name) + '"]');
    if (line) fill(line, activity);
  }
}

async function refresh() {
  for (const table of document.querySelectorAll("[data-api]")) {
    try {
      const response = await fetch(table.dataset.api, { headers: { Accept: "application/json" } });
      if (!response.ok) continue;
      const doc = await response.json();
      if (Array.isArray(doc)) {
        for (const queue of doc) fillQueue(table, queue);
      } else {
        fill(table, doc);
      }
    } catch (error) {
      // The console or Redis is away for a moment: keep the last numbers and try again.
    }
  }
  for (const plot of document.querySelectorAll("img.live-plot")) {
    const url = new URL(plot.src);  // its view and span kept, a fresh copy asked for
    url.searchParams.set("t", String(Date.now()));
    plot.src = url.toString();
  }
}

document.addEventListener("keydown", (event) => {
  const search = document.getElementById("search");
  const typing = event.target instanceof HTMLInputElement || event.target instanceof HTMLTextAreaElement;
  if (event.key === "/" && search && !typing) {
    event.preventDefault();
    search.focus();
  }
});

document.addEventListener("DOMContentLoaded", () => {
  const every = Number(document.body.dataset.refreshMs) || 2000;
  setInterval(refresh, every);
});
