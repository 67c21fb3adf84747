// report.html's one script: draws a scenario's timeline from its JSON block the first time its
// section is open, so that a page with many failures does not build every table up front.
// The JSON is worked out in Rust (html/timeline.rs); this only turns it into elements.
(function () {
  "use strict";
  var CAPTION = "Timeline: time goes down, one column per worker, service and the test driver; " +
    "times count from the scenario's first event. Within one millisecond: the test driver, " +
    "then workers' decisions, requests, effects, and what workers concluded.";
  // A node is a string (text) or [tag, class, {attributes}?, ...children].
  function node(n) {
    if (typeof n === "string") return document.createTextNode(n);
    var e = document.createElement(n[0]);
    var i = 2;
    if (n[1]) e.className = n[1];
    if (n.length > 2 && n[2] !== null && typeof n[2] === "object" && !Array.isArray(n[2])) {
      for (var k in n[2]) e.setAttribute(k, n[2][k]);
      i = 3;
    }
    for (; i < n.length; i++) e.appendChild(node(n[i]));
    return e;
  }
  // lanes: [name, class, label]; rows: [class, time, same millisecond, lane, cell].
  function timeline(data) {
    var head = ["tr", "", ["th", "time", "time"]];
    data.lanes.forEach(function (l) {
      head.push(["th", l[1], { "data-lane": l[0] }, l[0], ["small", "", l[2]]]);
    });
    var body = ["tbody", ""];
    data.rows.forEach(function (r) {
      var tr = ["tr", r[0], ["td", r[2] ? "time same-ms" : "time", r[1]]];
      for (var i = 0; i < data.lanes.length; i++) tr.push(i === r[3] ? ["td", "cell", r[4]] : ["td", ""]);
      body.push(tr);
    });
    return node(["div", "timeline-wrap", ["p", "caption", CAPTION],
      ["table", "timeline", ["thead", "", head], body]]);
  }
  function draw(details) {
    var slot = details.querySelector("div.timeline-slot");
    if (!slot || slot.hasAttribute("data-drawn")) return;
    slot.setAttribute("data-drawn", "");
    var data = slot.querySelector("script.timeline-data");
    slot.appendChild(timeline(JSON.parse(data.textContent)));
  }
  function isScenario(e) {
    return e && e.classList && e.classList.contains("scenario");
  }
  // toggle does not bubble: listen in the capture phase.
  document.addEventListener("toggle", function (e) {
    if (e.target.open && isScenario(e.target.parentNode)) draw(e.target);
  }, true);
  // A link to a closed section (the table of contents) opens it.
  function reveal() {
    var s = location.hash ? document.getElementById(location.hash.slice(1)) : null;
    var d = isScenario(s) ? s.querySelector("details") : null;
    if (d && !d.open) d.open = true;
  }
  window.addEventListener("hashchange", reveal);
  reveal();
  document.querySelectorAll("section.scenario > details[open]").forEach(draw);
})();
