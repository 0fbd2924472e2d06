// Number inputs holding text ("12e", "1.2.3") submit an empty value: the browser keeps the text
// to itself, and the server would answer "This field is required." (or, for an optional field,
// nothing). On submit, each such input is named in a hidden _not_a_number field, so that the
// form shows "not a number" next to it (dashboard.forms.NumbersAsTyped).
(function () {
  "use strict";
  document.addEventListener("submit", function (ev) {
    const form = ev.target;
    if (!(form instanceof HTMLFormElement)) return;
    form.querySelectorAll("input[name=_not_a_number]").forEach(function (el) { el.remove(); });
    form.querySelectorAll("input[type=number]").forEach(function (input) {
      if (!input.validity.badInput || !input.name) return;
      const marker = document.createElement("input");
      marker.type = "hidden";
      marker.name = "_not_a_number";
      marker.value = input.name;
      form.appendChild(marker);
    });
  }, true);  // capture: before a confirmation or htmx handles the submit
})();

// A field marked data-select-on-click (a new API token) selects its text when clicked, ready to
// copy (a listener here, not an onclick attribute: the Content-Security-Policy forbids those).
document.addEventListener("click", function (ev) {
  const el = ev.target;
  if (el instanceof HTMLInputElement && el.hasAttribute("data-select-on-click")) el.select();
});
