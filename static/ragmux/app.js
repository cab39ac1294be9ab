// The dashboard's small amount of script: confirmations, and the upload area. Every form also
// works without it (the upload form then posts once, and the page reloads with the outcome).
"use strict";

// Django accepts at most DATA_UPLOAD_MAX_NUMBER_FILES (100) files in one request.
const UPLOAD_BATCH = 100;

document.addEventListener("submit", (event) => {
  const message = event.target.dataset.confirm;
  if (message && !window.confirm(message)) event.preventDefault();
});

function setUpUpload(form) {
  const zone = form.querySelector("[data-dropzone]");
  const input = form.querySelector("input[type=file]");
  const progress = form.querySelector("[data-upload-progress]");
  const results = form.querySelector("[data-upload-results]");
  const token = form.querySelector("input[name=csrfmiddlewaretoken]").value;

  async function send(files) {
    const all = Array.from(files);
    if (!all.length) return;
    for (let start = 0; start < all.length; start += UPLOAD_BATCH) {
      const batch = all.slice(start, start + UPLOAD_BATCH);
      progress.textContent = `Sending files ${start + 1}–${start + batch.length} of ${all.length}…`;
      const body = new FormData();
      batch.forEach((file) => body.append("files", file, file.name));
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
      results.insertAdjacentHTML("beforeend", await response.text());
      document.body.dispatchEvent(new CustomEvent("documents-changed"));
    }
    progress.textContent = `Sent ${all.length} file${all.length === 1 ? "" : "s"}.`;
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
