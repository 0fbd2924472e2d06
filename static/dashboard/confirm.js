// Confirmations whose buttons say what they do. An element with data-confirm (a question) asks
// in the page's own dialog before it acts, with data-confirm-yes / data-confirm-no as the
// buttons' words ("Stop the run" / "Keep it running"): the browser's confirm() offers only
// OK / Cancel, and on a cancel button "Cancel" reads as "do it" while it means "don't".
// htmx elements ask through htmx:confirm; plain forms on submit.
//
// The action survives the page's polls. The run page swaps its status card every couple of
// seconds and the runs list its table, so the element the user clicked has often left the page
// by the time they answer, and htmx silently drops a request whose element is no longer in the
// page (a confirmed cancel was lost that way). So on "yes" the action is looked up again in the
// current page by its stable identity, data-confirm-key (else its id), and done by the element
// found there. Holding the polls while a dialog is open was the other choice; it would have to
// catch every way an element is replaced (a poll, a response already in flight, an out-of-band
// swap, whatever a future page adds) and would freeze the page the user is deciding about,
// while looking up by key holds for any swap. When the element is gone (the run finished, or
// was stopped from elsewhere, while the dialog was open), the dialog says that nothing was sent
// (data-confirm-gone) rather than doing nothing without a word.
(function () {
  "use strict";

  const GONE = "Nothing was sent: this action is no longer offered on the page " +
               "(what it acts on changed while you were deciding).";

  function keyOf(el) {
    return el.dataset.confirmKey || el.id || "";
  }

  // The element that does the action now: the one clicked if still in the page, else the one
  // with its key (a poll brought a fresh copy), else null.
  function current(el) {
    if (el.isConnected) return el;
    const key = keyOf(el);
    if (!key) return null;
    const quoted = CSS.escape(key);
    return document.querySelector("[data-confirm-key=" + quoted + "]") ||
           document.getElementById(key);
  }

  function dialogParts() {
    const dialog = document.getElementById("confirm-dialog");
    if (!dialog || typeof dialog.showModal !== "function") return null;
    return {
      dialog: dialog,
      question: dialog.querySelector("[data-confirm-question]"),
      detail: dialog.querySelector("[data-confirm-detail]"),
      yes: dialog.querySelector("[data-confirm-answer=yes]"),
      no: dialog.querySelector("[data-confirm-answer=no]"),
    };
  }

  function tell(text) {  // a notice in the same dialog: one button, no action behind it
    const d = dialogParts();
    if (!d) { window.alert(text); return; }
    d.question.textContent = text;
    d.detail.textContent = "";
    d.yes.textContent = "OK";
    d.no.hidden = true;
    d.dialog.dataset.mode = "notice";
    d.dialog.returnValue = "";
    d.dialog.showModal();
    d.yes.focus();
  }

  function ask(el, proceed) {
    const d = dialogParts();
    if (!d) {  // no <dialog>: the browser's own
      if (window.confirm(el.dataset.confirm)) {
        const now = current(el);
        if (now) proceed(now); else window.alert(el.dataset.confirmGone || GONE);
      }
      return;
    }
    d.question.textContent = el.dataset.confirm;
    d.detail.textContent = el.dataset.confirmDetail || "";
    d.yes.textContent = el.dataset.confirmYes || "Yes";
    d.no.textContent = el.dataset.confirmNo || "No";
    d.no.hidden = false;
    d.dialog.dataset.mode = "confirm";
    d.dialog.returnValue = "";
    d.dialog.addEventListener("close", function onClose() {
      d.dialog.removeEventListener("close", onClose);
      if (d.dialog.returnValue !== "yes") return;
      const now = current(el);
      if (now) proceed(now); else tell(el.dataset.confirmGone || GONE);
    });
    d.dialog.showModal();
    d.no.focus();  // the safe answer is the default one
  }

  // Elements whose next htmx:confirm is the re-issue of an answered "yes" (on a fresh copy).
  const answered = new WeakSet();

  document.addEventListener("htmx:confirm", function (ev) {
    const el = ev.detail.elt;
    if (!el || !el.dataset || !el.dataset.confirm) return;
    if (answered.has(el)) { answered.delete(el); return; }
    ev.preventDefault();
    const verb = ev.detail.verb;
    ask(el, function (now) {
      if (now === el) { ev.detail.issueRequest(true); return; }
      answered.add(now);
      htmx.ajax(verb, now.getAttribute("hx-" + verb) || ev.detail.path, {source: now});
    });
  });

  document.addEventListener("submit", function (ev) {
    const form = ev.target;
    if (!form.dataset || !form.dataset.confirm || form.dataset.confirmed) return;
    ev.preventDefault();
    const submitter = ev.submitter;
    ask(form, function (now) {
      let by = submitter;
      if (now !== form) {  // the fresh copy's own button, by id, when the form has several
        by = submitter && submitter.id ? now.querySelector("#" + CSS.escape(submitter.id)) : null;
      }
      now.dataset.confirmed = "1";
      now.requestSubmit(by || undefined);
    });
  });
})();
