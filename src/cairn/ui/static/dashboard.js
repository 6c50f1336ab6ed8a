// The "live" indicator of cairn's dashboard: htmx polls the page's live region;
// this only pauses that polling (remembered across pages) and shows its state:
// live, paused, or offline (the last poll failed).
(function () {
  "use strict";
  var KEY = "cairn.paused";

  function paused() {
    try { return window.localStorage.getItem(KEY) === "1"; } catch (e) { return false; }
  }

  function show(state) {
    var button = document.getElementById("live-state");
    if (!button) { return; }
    button.dataset.state = state;
    button.textContent = state;
    button.title = state === "paused" ? "Resume live updates" : "Pause live updates";
  }

  document.addEventListener("DOMContentLoaded", function () {
    var button = document.getElementById("live-state");
    if (!button) { return; }
    show(paused() ? "paused" : "live");
    button.addEventListener("click", function () {
      var pause = !paused();
      try { window.localStorage.setItem(KEY, pause ? "1" : "0"); } catch (e) { /* private mode */ }
      show(pause ? "paused" : "live");
    });
  });

  // The poll in flight, so that leaving the page can drop it quietly: htmx
  // would report the browser's abort of it as an error in the console.
  var inflight = null;

  document.addEventListener("htmx:beforeRequest", function (event) {
    if (!event.detail.elt || event.detail.elt.id !== "live") { return; }
    if (paused()) { event.preventDefault(); return; }
    inflight = event.detail.xhr;
  });
  window.addEventListener("beforeunload", function () {
    if (inflight && inflight.readyState !== 4) {
      inflight.onabort = null;
      inflight.onerror = null;
      inflight.abort();
    }
    inflight = null;
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    if (!event.detail.elt || event.detail.elt.id !== "live" || paused()) { return; }
    show(event.detail.successful ? "live" : "offline");
  });
  // After a swap the polled element is a new one; htmx:load is fired on it.
  document.addEventListener("htmx:load", function (event) {
    if (event.detail.elt && event.detail.elt.id === "live" && !paused()) { show("live"); }
  });
  document.addEventListener("htmx:sendError", function () { show("offline"); });
}());

// The task page of a running task: its streamed model text, live, from the
// token lane (cairn.observe.lane) through /task/tail. Nothing of it is stored.
(function () {
  "use strict";
  document.addEventListener("DOMContentLoaded", function () {
    var pre = document.getElementById("lane");
    if (!pre || !window.EventSource) { return; }
    var source = new EventSource(pre.dataset.tail);
    source.onmessage = function (event) {
      var shown = JSON.parse(event.data);
      if (shown.ended !== undefined) { source.close(); return; }
      var text = shown.text !== undefined ? shown.text
        : shown.call !== undefined ? "[" + shown.call + "]\n" : "\n";
      pre.textContent += text;
      document.getElementById("lane-section").hidden = false;
    };
    source.onerror = function () { source.close(); };
  });
}());
