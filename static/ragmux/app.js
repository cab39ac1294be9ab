// The dashboard's small amount of script: confirmations, and the upload area. Every form also
// works without it (the upload form then posts once, and the page reloads with the outcome).
"use strict";

// Django accepts at most DATA_UPLOAD_MAX_NUMBER_FILES (100) files in one request.
const UPLOAD_BATCH = 100;

document.addEventListener("submit", (event) => {
  const message = event.target.dataset.confirm;
  if (message && !window.confirm(message)) event.preventDefault();
});

// On a narrow screen the navigation folds under its Menu button (CSS shows the button only
// there and only once this has marked the sidebar foldable).
document.addEventListener("DOMContentLoaded", () => {
  const sidebar = document.querySelector(".sidebar");
  const toggle = sidebar && sidebar.querySelector(".menu-toggle");
  if (!toggle) return;
  const menu = document.getElementById(toggle.getAttribute("aria-controls"));
  sidebar.classList.add("foldable");
  toggle.addEventListener("click", () => {
    const open = toggle.getAttribute("aria-expanded") !== "true";
    toggle.setAttribute("aria-expanded", String(open));
    menu.classList.toggle("open", open);
  });
});

// A table's cells carry their column's header as data-label: on a phone, where each row is a
// card (app.css), the label is shown before the value.
function labelCells(root) {
  for (const table of root.querySelectorAll(".table-scroll table")) {
    const headers = [...table.querySelectorAll("thead tr:last-child th")].map((th) => th.innerText.trim());
    for (const row of table.querySelectorAll("tbody tr")) {
      [...row.children].forEach((cell, index) => {
        if (cell.tagName === "TD" && !cell.hasAttribute("data-label") && headers[index] !== undefined) {
          cell.dataset.label = headers[index];
        }
      });
    }
  }
}
document.addEventListener("DOMContentLoaded", () => labelCells(document));
document.addEventListener("htmx:afterSettle", () => labelCells(document));

function setUpUpload(form) {
  const zone = form.querySelector("[data-dropzone]");
  const input = form.querySelector("input[type=file]");
  const progress = form.querySelector("[data-upload-progress]");
  const results = form.querySelector("[data-upload-results]");
  const refused = results.querySelector("[data-upload-refused]");
  const accepted = results.querySelector("[data-upload-accepted]");
  const acceptedCount = results.querySelector("[data-upload-accepted-count]");
  const token = form.querySelector("input[name=csrfmiddlewaretoken]").value;
  const attributes = form.querySelector("[name=attributes]");

  // The server's list items, one per file: refusals in the open list, accepted files folded.
  function sort(html) {
    const template = document.createElement("template");
    template.innerHTML = html;
    for (const item of template.content.querySelectorAll("li")) {
      (item.hasAttribute("data-accepted") ? accepted : refused).append(item);
    }
    acceptedCount.textContent = accepted.children.length;
    results.hidden = false;
  }

  // "101 accepted, 1 duplicate": the accepted first, then each refusal, the most frequent first.
  function summary() {
    const counted = (items) => {
      const counts = new Map();
      for (const item of items) counts.set(item.dataset.verdict, (counts.get(item.dataset.verdict) || 0) + 1);
      return [...counts].sort((a, b) => b[1] - a[1]);
    };
    return [...counted(accepted.children), ...counted(refused.children)]
      .map(([verdict, count]) => `${count} ${verdict}`)
      .join(", ");
  }

  async function send(files) {
    const all = Array.from(files);
    if (!all.length) return;
    refused.replaceChildren();
    accepted.replaceChildren();
    for (let start = 0; start < all.length; start += UPLOAD_BATCH) {
      const batch = all.slice(start, start + UPLOAD_BATCH);
      progress.textContent = `Sending files ${start + 1}–${start + batch.length} of ${all.length}…`;
      const body = new FormData();
      batch.forEach((file) => body.append("files", file, file.name));
      if (attributes && attributes.value.trim()) body.append("attributes", attributes.value);
      let response;
      try {
        response = await fetch(form.action, {
          method: "POST",
          body,
          credentials: "same-origin",
          headers: { "X-CSRFToken": token, "HX-Request": "true" },
        });
      } catch (error) {
        progress.textContent = `The upload stopped: ${error.message}. Files from ${start + 1} on were not sent.`;
        return;
      }
      if (!response.ok) {
        progress.textContent = `The server refused files ${start + 1}–${start + batch.length} (HTTP ${response.status}).`;
        return;
      }
      // Server-rendered, escaped list items: one per file, saying what happened to it.
      sort(await response.text());
      document.body.dispatchEvent(new CustomEvent("documents-changed"));
    }
    progress.textContent = `${summary()} (${all.length} file${all.length === 1 ? "" : "s"} sent).`;
    input.value = "";
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    send(input.files);
  });
  zone.addEventListener("dragover", (event) => {
    event.preventDefault();
    zone.classList.add("dragging");
  });
  zone.addEventListener("dragleave", () => zone.classList.remove("dragging"));
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    zone.classList.remove("dragging");
    send(event.dataTransfer.files);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("form[data-upload]").forEach(setUpUpload);
});

// A key shown once: copied to the clipboard in one click, and the page says so.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-copy]");
  if (!button) return;
  const id = button.dataset.copy;
  const said = document.querySelector(`[data-copied="${id}"]`);
  try {
    await navigator.clipboard.writeText(document.getElementById(id).textContent.trim());
    said.textContent = "Copied to the clipboard.";
  } catch (error) {
    said.textContent = "The browser refused the clipboard: select the key and copy it.";
  }
});

// The overview's small charts, drawn with uPlot from the numbers the page carries; the totals
// beside them are text, so nothing is lost where the script does not run.
function drawCharts() {
  const data = document.getElementById("usage-charts");
  if (!data || typeof uPlot === "undefined") return;
  const ranges = JSON.parse(data.textContent);
  document.querySelectorAll("[data-chart]").forEach((box) => {
    const range = ranges[box.dataset.chart];
    const options = {
      width: 220,
      height: 70,
      legend: { show: false },
      cursor: { show: false },
      // From zero, so a quiet range reads as quiet; an empty one still needs a height.
      scales: { y: { range: (u, min, max) => [0, max > 0 ? max : 1] } },
      axes: [{ show: false }, { show: false }],
      series: [{}, { stroke: "#2563eb", fill: "rgba(37, 99, 235, 0.15)", width: 1.5, points: { show: false } }],
    };
    new uPlot(options, [range.x, range[box.dataset.series]], box);
  });
}

document.addEventListener("DOMContentLoaded", drawCharts);

// An evaluation set's nDCG@10 across its finished runs, in the order they finished, each named
// under its point. The runs table beside it holds the same figures as text.
function drawEvaluationChart() {
  const data = document.getElementById("evaluation-history");
  const box = document.querySelector("[data-evaluation-chart]");
  if (!data || !box || typeof uPlot === "undefined") return;
  const history = JSON.parse(data.textContent);
  const runs = history.labels.map((label, index) => index + 1);
  const options = {
    width: Math.min(box.clientWidth || 640, 900),
    height: 240,
    scales: { x: { time: false, range: [0.5, runs.length + 0.5] }, y: { range: [0, 1] } },
    axes: [
      { incrs: [1], values: (u, ticks) => ticks.map((tick) => history.labels[tick - 1] ?? "") },
      {},
    ],
    series: [
      { label: "Run", value: (u, run) => (run == null ? "—" : history.labels[run - 1] ?? "") },
      { label: "nDCG@10", stroke: "#2563eb", width: 2, points: { show: true, size: 8 } },
    ],
  };
  new uPlot(options, [runs, history.ndcg], box);
}

document.addEventListener("DOMContentLoaded", drawEvaluationChart);

// A select with data-filters offers, in each select it names (ids, space-separated), only the
// options whose data-fits is its value (the rerank connections and routes that fit the chosen
// backend); the server checks it again.
function filterOptions(select) {
  for (const id of select.dataset.filters.split(" ")) {
    const target = document.getElementById(id);
    if (!target) continue;
    for (const option of target.options) {
      if (!option.dataset.fits) continue;
      const fits = option.dataset.fits === select.value;
      option.hidden = !fits;
      option.disabled = !fits;
      if (!fits && option.selected) target.value = "";
    }
  }
}

document.addEventListener("change", (event) => {
  if (event.target.matches("select[data-filters]")) filterOptions(event.target);
});

// The connection form: the provider types (GET /admin/api/provider-types, rendered into the page)
// say which fields apply to each type, and a preset fills in its service's base URL. "Test before
// saving" tries the typed connection through POST /admin/api/models/test; the typed key goes
// there and nowhere else. Without the script every field shows and the form still saves.
function setUpConnectionForm(form) {
  const types = JSON.parse(document.getElementById("provider-types").textContent);
  const byType = Object.fromEntries(types.map((type) => [type.type, type]));
  const select = form.querySelector("#id_provider_type");
  const presetBox = form.querySelector("[data-presets]");
  const preset = presetBox.querySelector("select");
  const baseUrl = form.querySelector("#id_base_url");
  const model = form.querySelector("#id_model_name");
  const editable = ["base_url", "dimensions", "api_version", "api_key"];

  function showFields() {
    const type = byType[select.value];
    if (!type) return;
    for (const name of editable) {
      const input = form.querySelector(`#id_${name}`);
      if (input) input.closest(".field").hidden = !type.fields.includes(name);
    }
    baseUrl.placeholder = type.default_base_url || (type.base_url_required ? "required" : "");
    preset.replaceChildren(preset.options[0]);
    for (const item of type.presets) {
      const option = new Option(`${item.label} (${item.base_url})`, item.name);
      option.selected = baseUrl.value === item.base_url;
      preset.add(option);
    }
    presetBox.hidden = type.presets.length === 0;
  }

  preset.addEventListener("change", () => {
    const item = (byType[select.value].presets || []).find((p) => p.name === preset.value);
    if (!item) return;
    baseUrl.value = item.base_url;
    model.placeholder = item.example_model;
  });
  select.addEventListener("change", showFields);
  showFields();

  const button = form.querySelector("[data-trial]");
  const said = form.querySelector("[data-trial-result]");
  const token = form.querySelector("input[name=csrfmiddlewaretoken]").value;
  button.hidden = false;
  button.addEventListener("click", async () => {
    const type = byType[select.value];
    const body = { provider_type: select.value, model_name: model.value.trim() };
    for (const name of editable) {
      const input = form.querySelector(`#id_${name}`);
      if (type.fields.includes(name) && input.value.trim()) body[name] = input.value.trim();
    }
    if (body.dimensions) body.dimensions = Number(body.dimensions);
    if (form.dataset.connectionId) body.connection_id = Number(form.dataset.connectionId);
    said.className = "trial-result";
    said.textContent = "Testing…";
    button.disabled = true;
    try {
      const response = await fetch("/admin/api/models/test", {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRFToken": token },
        body: JSON.stringify(body),
      });
      const answer = await response.json();
      if (response.ok) {
        said.classList.add(answer.ok ? "trial-ok" : "trial-failed");
        said.textContent = `${answer.ok ? "Works" : "Failed"}: ${answer.summary}`;
      } else {
        said.classList.add("trial-failed");
        said.textContent = `Not tested: ${answer.error.message}`;
      }
    } catch (error) {
      said.classList.add("trial-failed");
      said.textContent = `Not tested: ${error.message}`;
    } finally {
      button.disabled = false;
    }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const form = document.querySelector("form[data-connection-form]");
  if (form) setUpConnectionForm(form);
});
