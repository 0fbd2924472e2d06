// Loads Plotly figures from the dashboard's JSON endpoints and keeps them current while a run
// trains: the htmx-polled status card carries the latest step, and charts are refetched only when
// it changes (not on every poll), so a long run costs one set of chart requests per step.
(function () {
  "use strict";
  const config = { responsive: true, displaylogo: false };

  async function load(div) {
    const url = div.dataset.chartUrl;
    const resp = await fetch(url, { credentials: "same-origin" });
    if (!resp.ok) { div.textContent = "chart failed to load (" + resp.status + ")"; return; }
    const fig = await resp.json();
    if (fig.exit_rounds) {  // heatmap: hover text from the compact exit-round matrix
      fig.data[0].text = fig.exit_rounds.map(function (row) {
        return row.map(function (e) {
          return e === null ? "" : (e === 0 ? "unresolved" : "exit after round " + e);
        });
      });
    }
    await Plotly.react(div, fig.data, fig.layout, config);
    div.dataset.loaded = "1";
    if (fig.prompt_ids && div.dataset.promptUrl && !div.dataset.clickBound) {
      div.dataset.clickBound = "1";
      div.on("plotly_click", function (ev) {
        const p = ev.points && ev.points[0];
        if (!p || p.z === null || p.z === undefined) return;
        const row = Array.isArray(p.pointIndex) ? p.pointIndex[0] : p.pointNumber[0];
        const ids = div._promptIds || fig.prompt_ids;
        window.location = div.dataset.promptUrl.replace(/\/0\/$/, "/" + ids[row] + "/");
      });
    }
    div._promptIds = fig.prompt_ids;
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

  function loadAll(root) {
    (root || document).querySelectorAll("[data-chart-url]").forEach(function (div) {
      load(div).catch(function (err) { div.textContent = "chart error: " + err; });
    });
  }
  window.dashboardLoadCharts = loadAll;

  document.addEventListener("DOMContentLoaded", function () {
    loadAll();
    // Step and status: an evaluation is recorded after its step, and the final one after the
    // last step, so a status change (running -> succeeded) refreshes the charts once more.
    let lastState = null;
    const card = document.getElementById("run-status");
    if (card) lastState = card.dataset.step + "/" + card.dataset.status;
    document.body.addEventListener("htmx:afterSettle", function () {
      const c = document.getElementById("run-status");
      if (!c) return;
      const state = c.dataset.step + "/" + c.dataset.status;
      if (state !== lastState) { lastState = state; loadAll(); }
    });
    // Compare page: re-plot when the x axis or metric changes.
    document.querySelectorAll("[data-chart-controls]").forEach(function (form) {
      form.addEventListener("change", function () {
        const div = document.getElementById(form.dataset.chartControls);
        const params = new URLSearchParams(new FormData(form));
        div.dataset.chartUrl = div.dataset.baseUrl + "&" + params.toString();
        load(div);
      });
    });
  });
})();
