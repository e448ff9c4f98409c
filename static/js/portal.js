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
