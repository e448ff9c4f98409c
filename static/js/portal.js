// Show only the fields that apply to the chosen job kind and GPU sharing mode.
(function () {
  "use strict";
  var TRAINING = ["workers", "max_runtime_seconds", "retries"];
  var INFERENCE = ["replicas", "port", "health_path"];

  function show(form, name, visible) {
    var el = form.querySelector('[data-field="' + name + '"]');
    if (el) { el.hidden = !visible; }
  }

  function update(form) {
    var kind = form.querySelector("[name=kind]");
    var sharing = form.querySelector("[name=gpu_sharing]");
    if (!kind || !sharing) { return; }
    TRAINING.forEach(function (n) { show(form, n, kind.value === "training"); });
    INFERENCE.forEach(function (n) { show(form, n, kind.value === "inference"); });
    show(form, "gpu_mig_profile", sharing.value === "mig");
  }

  document.addEventListener("DOMContentLoaded", function () {
    var form = document.getElementById("job-form");
    if (!form) { return; }
    update(form);
    form.addEventListener("change", function () { update(form); });
  });
})();

// Keep each pod's log scrolled to its newest line when the log partial refreshes.
(function () {
  "use strict";
  function scrollLogs(root) {
    var logs = (root || document).querySelectorAll("[data-scroll-bottom]");
    Array.prototype.forEach.call(logs, function (el) { el.scrollTop = el.scrollHeight; });
  }
  // An outerHTML swap replaces the target, so look in the whole document.
  document.addEventListener("htmx:afterSettle", function () { scrollLogs(document); });
})();

// Ask before a form with data-confirm is sent (the workspace Delete, which can take a home
// folder with it). From this file, not an inline onsubmit: the portal's Content Security
// Policy (script-src 'self') blocks inline handlers, and the form was sent without asking.
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form && form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) { event.preventDefault(); }
  });
})();
