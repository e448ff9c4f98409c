// Draw the server-built Plotly figures: each `[data-plotly-figure]` names a
// <script type="application/json"> block holding {data, layout}. plotly.js is loaded on
// first use (from the element's data-plotly-src), and figures are redrawn after every htmx
// swap, so partials loaded with hx-get draw themselves. No inline script anywhere.
(function () {
  "use strict";
  var loading = null;

  function loadPlotly(src) {
    if (window.Plotly) { return Promise.resolve(window.Plotly); }
    if (!loading) {
      loading = new Promise(function (resolve, reject) {
        var script = document.createElement("script");
        script.src = src;
        script.onload = function () { resolve(window.Plotly); };
        script.onerror = function () { loading = null; reject(new Error("cannot load " + src)); };
        document.head.appendChild(script);
      });
    }
    return loading;
  }

  function draw() {
    var charts = document.querySelectorAll("[data-plotly-figure]");
    if (!charts.length) { return; }
    loadPlotly(charts[0].getAttribute("data-plotly-src")).then(function (Plotly) {
      Array.prototype.forEach.call(charts, function (el) {
        var block = document.getElementById(el.getAttribute("data-plotly-figure"));
        if (!block || el.plotlySource === block) {
          return; // drawn from this very block already: leave it (and the user's zoom) alone
        }
        var figure = JSON.parse(block.textContent);
        Plotly.react(el, figure.data, figure.layout, { responsive: true, displaylogo: false });
        el.plotlySource = block;
      });
    });
  }

  document.addEventListener("DOMContentLoaded", draw);
  document.addEventListener("htmx:afterSettle", draw);
})();
