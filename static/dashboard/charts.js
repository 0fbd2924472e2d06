// Loads Plotly figures from the dashboard's JSON endpoints and keeps them current while a run
// trains: the htmx-polled status card carries the latest step, and charts are refetched only when
// it changes (not on every poll), so a long run costs one set of chart requests per step.
//
// Chart controls (a form with data-chart-controls="id1 id2") re-plot the named charts with the
// form's values as query parameters; with data-url-state the page URL keeps them too, so the
// view can be shared as a link.
(function () {
  "use strict";
  const config = { responsive: true, displaylogo: false };

  function heatmapHover(fig) {
    // Hover text from the compact per-cell matrices: appearances, unresolved ones, exit round.
    const binned = fig.bin_size > 1;
    return fig.counts.map(function (row, r) {
      return row.map(function (n, c) {
        if (!n) return "";
        const u = fig.unresolved[r][c], z = fig.data[0].z[r][c];
        if (binned) {
          return "mean " + z + " samples per prompt and step over " + n +
            (n === 1 ? " appearance" : " appearances") +
            (fig.eliminates ? "<br>" + u + " unresolved (" + Math.round(100 * u / n) + "%)" : "");
        }
        const head = (fig.texts[r] ? fig.texts[r] + "<br>" : "") + "samples: " + z +
          (n > 1 ? " (mean of " + n + " steps)" : "") + "<br>";
        if (!fig.eliminates) return head + "one round, no exit rule";
        if (u === 0) return head + "exit after round " + fig.exit_rounds[r][c];
        return head + (n > 1 ? "unresolved in " + u + " of " + n + " steps" : "unresolved");
      });
    });
  }

  async function load(div) {
    const url = div.dataset.chartUrl;
    // Controls changed in quick succession start overlapping requests, which can come back in
    // any order: only the latest request of a chart may draw it.
    const seq = (div._requests = (div._requests || 0) + 1);
    const resp = await fetch(url, { credentials: "same-origin" });
    if (seq !== div._requests) return;
    if (!resp.ok) {
      const why = (await resp.text()).replace(/<[^>]*>/g, " ").replace(/\s+/g, " ").trim();
      div.textContent = "chart failed to load (" + resp.status + "): " + why.slice(0, 300);
      return;
    }
    const fig = await resp.json();
    if (seq !== div._requests) return;
    if (fig.counts) fig.data[0].text = heatmapHover(fig);
    await Plotly.react(div, fig.data, fig.layout, config);
    div.dataset.loaded = "1";
    div._fig = fig;
    if (fig.row_ranges && !div.dataset.clickBound) {  // heatmap
      div.dataset.clickBound = "1";
      div.on("plotly_click", function (ev) {
        const p = ev.points && ev.points[0];
        const f = div._fig;
        if (!p || p.z === null || p.z === undefined) return;
        const row = Array.isArray(p.pointIndex) ? p.pointIndex[0] : p.pointNumber[0];
        if (f.bin_size > 1) {  // a bin: zoom into its rows at full resolution
          const range = f.row_ranges[row];
          zoomRows(div, range[0] + "-" + range[1]);
        } else if (div.dataset.promptUrl) {
          window.location = div.dataset.promptUrl.replace(/\/0\/$/, "/" + f.prompt_ids[row] + "/");
        }
      });
    }
    if (fig.prompt_url && !div.dataset.clickBound) {  // compare scatter: open run A's history
      div.dataset.clickBound = "1";
      div.on("plotly_click", function (ev) {
        const p = ev.points && ev.points[0];
        if (p && p.customdata !== undefined) {
          window.location = fig.prompt_url.replace(/\/0\/$/, "/" + p.customdata + "/");
        }
      });
    }
  }

  function loadAll(root, onlyNew) {
    (root || document).querySelectorAll("[data-chart-url]").forEach(function (div) {
      if (onlyNew && div.dataset.loaded) return;
      load(div).catch(function (err) { div.textContent = "chart error: " + err; });
    });
  }
  window.dashboardLoadCharts = loadAll;

  function controlParams(form) {
    const params = new URLSearchParams();
    new FormData(form).forEach(function (value, key) { if (value !== "") params.set(key, value); });
    return params;
  }

  function applyControls(form) {
    const params = controlParams(form);
    form.dataset.chartControls.split(/\s+/).forEach(function (id) {
      const div = document.getElementById(id);
      if (!div) return;
      const url = new URL(div.dataset.baseUrl, window.location.href);
      params.forEach(function (value, key) { url.searchParams.set(key, value); });
      new URLSearchParams(div.dataset.fixedParams || "").forEach(function (value, key) {
        url.searchParams.set(key, value);
      });
      div.dataset.chartUrl = url.pathname + url.search;
      load(div).catch(function (err) { div.textContent = "chart error: " + err; });
    });
    if (form.hasAttribute("data-url-state")) {
      const page = new URL(window.location.href);
      Array.from(form.elements).forEach(function (el) { if (el.name) page.searchParams.delete(el.name); });
      params.forEach(function (value, key) { page.searchParams.set(key, value); });
      window.history.replaceState(null, "", page.pathname + page.search + page.hash);
    }
  }

  function zoomRows(div, range) {
    const form = document.querySelector("[data-chart-controls~='" + div.id + "']");
    if (!form || !form.elements.rows) return;
    form.elements.rows.value = range;
    applyControls(form);
  }

  document.addEventListener("DOMContentLoaded", function () {
    loadAll();
    // Step and status: an evaluation is recorded after its step, and the final one after the
    // last step, so a status change (running -> succeeded) refreshes the charts once more.
    let lastState = null;
    const card = document.getElementById("run-status");
    if (card) lastState = card.dataset.step + "/" + card.dataset.status;
    document.body.addEventListener("htmx:afterSettle", function (ev) {
      // Fragments swapped in (the estimate panel once it finishes) bring their own charts.
      loadAll(ev.target, true);
      const c = document.getElementById("run-status");
      if (!c) return;
      const state = c.dataset.step + "/" + c.dataset.status;
      if (state !== lastState) { lastState = state; loadAll(); }
    });
    // Report page: PNG and SVG downloads drawn by plotly in the browser (works offline).
    document.querySelectorAll("[data-download-chart]").forEach(function (button) {
      button.addEventListener("click", function () {
        const div = document.getElementById(button.dataset.downloadChart);
        if (!div || !div.dataset.loaded) return;
        Plotly.downloadImage(div, { format: button.dataset.format, filename: button.dataset.filename,
                                    width: div.clientWidth || 900, height: div.clientHeight || 440,
                                    scale: button.dataset.format === "png" ? 2 : 1 });
      });
    });
    // Chart controls (compare, heatmap): re-plot when a control changes.
    document.querySelectorAll("[data-chart-controls]").forEach(function (form) {
      form.addEventListener("change", function () { applyControls(form); });
      form.addEventListener("submit", function (ev) { ev.preventDefault(); applyControls(form); });
      form.querySelectorAll("[data-reset]").forEach(function (button) {
        button.addEventListener("click", function () {
          button.dataset.reset.split(/\s+/).forEach(function (name) {
            if (form.elements[name]) form.elements[name].value = "";
          });
          applyControls(form);
        });
      });
    });
  });
})();
