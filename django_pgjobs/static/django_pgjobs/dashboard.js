// The dashboard refreshes itself: every data-refresh seconds it fetches its own URL and swaps
// #pgjobs-live for the new one. No library; stops while the tab is hidden.
(function () {
  "use strict";
  var live = document.getElementById("pgjobs-live");
  var seconds = live ? parseInt(live.getAttribute("data-refresh"), 10) : 0;
  if (!live || !(seconds > 0) || !window.fetch || !window.DOMParser) { return; }
  function refresh() {
    if (document.hidden) { return; }
    fetch(window.location.href, {credentials: "same-origin", headers: {"X-Requested-With": "fetch"}})
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("pgjobs-live");
        if (fresh) { live.replaceWith(fresh); live = fresh; }
      })
      .catch(function () { /* keep the last page; try again at the next tick */ });
  }
  window.setInterval(refresh, seconds * 1000);
})();
