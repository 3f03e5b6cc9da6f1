// Live updates: every few seconds, the numbers of the page's tables with a data-api attribute are read again
// from the console's JSON API, and the rate plots are reloaded. Nothing is fetched from elsewhere.
"use strict";

function show(cell, value) {
  if (typeof value === "boolean") { cell.textContent = value ? "on" : "off"; return; }
  if (typeof value === "number" && cell.dataset.field.endsWith("_per_minute")) { cell.textContent = value.toFixed(1); return; }
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

async function refresh() {
  for (const table of document.querySelectorAll("[data-api]")) {
    try {
      const response = await fetch(table.dataset.api, { headers: { Accept: "application/json" } });
      if (!response.ok) continue;
      const doc = await response.json();
      if (Array.isArray(doc)) {
        for (const queue of doc) {
          const row = table.querySelector('tr[data-queue="' + CSS.escape(queue.name) + '"]');
          if (row) fill(row, queue);
        }
      } else {
        fill(table, doc);
      }
    } catch (error) {
      // The console or Redis is away for a moment: keep the last numbers and try again.
    }
  }
  for (const plot of document.querySelectorAll("img.live-plot")) {
    plot.src = plot.src.split("?")[0] + "?t=" + Date.now();
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const every = Number(document.body.dataset.refreshMs) || 2000;
  setInterval(refresh, every);
});
