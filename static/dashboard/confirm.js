// Confirmations whose buttons say what they do. An element with data-confirm (a question) asks
// in the page's own dialog before it acts, with data-confirm-yes / data-confirm-no as the
// buttons' words ("Stop the run" / "Keep it running"): the browser's confirm() offers only
// OK / Cancel, and on a cancel button "Cancel" reads as "do it" while it means "don't".
// htmx elements ask through htmx:confirm; plain forms on submit.
(function () {
  "use strict";

  function ask(el, proceed) {
    const dialog = document.getElementById("confirm-dialog");
    if (!dialog || typeof dialog.showModal !== "function") {  // no <dialog>: the browser's own
      if (window.confirm(el.dataset.confirm)) proceed();
      return;
    }
    dialog.querySelector("[data-confirm-question]").textContent = el.dataset.confirm;
    dialog.querySelector("[data-confirm-detail]").textContent = el.dataset.confirmDetail || "";
    const yes = dialog.querySelector("[data-confirm-answer=yes]");
    const no = dialog.querySelector("[data-confirm-answer=no]");
    yes.textContent = el.dataset.confirmYes || "Yes";
    no.textContent = el.dataset.confirmNo || "No";
    dialog.returnValue = "";
    dialog.addEventListener("close", function onClose() {
      dialog.removeEventListener("close", onClose);
      if (dialog.returnValue === "yes") proceed();
    });
    dialog.showModal();
    no.focus();  // the safe answer is the default one
  }

  document.addEventListener("htmx:confirm", function (ev) {
    const el = ev.detail.elt;
    if (!el || !el.dataset || !el.dataset.confirm) return;
    ev.preventDefault();
    ask(el, function () { ev.detail.issueRequest(true); });
  });

  document.addEventListener("submit", function (ev) {
    const form = ev.target;
    if (!form.dataset || !form.dataset.confirm || form.dataset.confirmed) return;
    ev.preventDefault();
    ask(form, function () { form.dataset.confirmed = "1"; form.requestSubmit(ev.submitter); });
  });
})();
