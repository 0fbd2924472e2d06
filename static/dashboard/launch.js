// The launch form's helpers (a file, not an inline script: the Content-Security-Policy allows
// only this server's script files).
// Optimiser steps per training step, recomputed as B, the mini-batch size or the epochs change.
(function () {
  const out = document.getElementById("optimizer-steps-value");
  const ids = ["id_batch_size", "id_ppo_mini_batch_size", "id_ppo_epochs"];
  const inputs = ids.map(function (id) { return document.getElementById(id); });
  if (!out || inputs.some(function (i) { return !i; })) return;
  const update = function () {
    const [b, mini, epochs] = inputs.map(function (i) { return parseInt(i.value, 10); });
    if (!(b > 0) || !(epochs > 0) || !(mini >= 0)) { out.textContent = "?"; return; }
    out.textContent = epochs * Math.ceil(b / (mini || b));
  };
  inputs.forEach(function (i) { i.addEventListener("input", update); });
})();
// The learning rate follows the model while the user has not typed one of their own: the
// built-in tiny model trains at 2e-4, the paper's 1e-6 is for 1.5B-7B models.
(function () {
  const lr = document.getElementById("id_lr"), model = document.getElementById("id_model");
  if (!lr || !model || !lr.dataset.lrByModel) return;
  const byModel = JSON.parse(lr.dataset.lrByModel);
  const proposed = function (m) { return (m in byModel) ? byModel[m] : byModel[""]; };
  model.addEventListener("change", function () {
    const known = Object.values(byModel).map(Number);
    if (known.includes(Number(lr.value))) lr.value = proposed(model.value.trim());
  });
})();
