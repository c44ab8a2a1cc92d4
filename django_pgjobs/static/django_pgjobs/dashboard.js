// The dashboard refreshes itself: every data-refresh seconds it fetches its own URL and swaps
// #pgjobs-live for the new one. No library; waits while the tab is hidden.
// A failed refresh marks the page stale at once (banner with the reason and the time of the
// last good refresh, numbers greyed) and retries with backoff: 2 s, doubling, at most 60 s.
(function () {
  "use strict";
  var live = document.getElementById("pgjobs-live");
  var banner = document.getElementById("pgjobs-stale");
  var seconds = live ? parseInt(live.getAttribute("data-refresh"), 10) : 0;
  if (!live || !banner || !(seconds > 0) || !window.fetch || !window.DOMParser) { return; }
  var FIRST_RETRY = 2, MAX_RETRY = 60, TIMEOUT = 20;
  var loginPath = live.getAttribute("data-login-url");
  var backoff = 0;  // seconds to the next retry; 0 while the page is live
  var timer = null;

  function schedule(s) { window.clearTimeout(timer); timer = window.setTimeout(refresh, s * 1000); }

  function lastGood() {
    var t = live.querySelector("#pgjobs-updated");
    return t ? t.textContent.trim() : "the page load";
  }

  function signedOut(r) {
    if (r.status === 401 || r.status === 403) { return true; }
    return r.redirected && !!loginPath && new URL(r.url).pathname === loginPath;
  }

  function loginLink() {
    var a = document.createElement("a");
    a.href = loginPath + "?next=" + encodeURIComponent(location.pathname + location.search);
    a.id = "pgjobs-stale-login";
    a.textContent = "Log in again";
    return a;
  }

  function text(parent, s) { parent.appendChild(document.createTextNode(s)); }

  function stale(reason, out) {
    backoff = backoff ? Math.min(backoff * 2, MAX_RETRY) : FIRST_RETRY;
    live.classList.add("pgjobs-stale-numbers");
    banner.replaceChildren();
    var head = document.createElement("strong");
    head.textContent = out ? "Signed out" : "Not live";
    banner.appendChild(head);
    text(banner, ": " + reason + ". The numbers below are from " + lastGood() +
         " (the last good refresh); next try in " + backoff + " s. ");
    if (out) { banner.appendChild(loginLink()); text(banner, " "); }
    var again = document.createElement("button");
    again.type = "button";
    again.textContent = "Retry now";
    again.addEventListener("click", function () { schedule(0); });
    banner.appendChild(again);
    banner.hidden = false;
    banner.setAttribute("data-reason", out ? "signed-out" : "failed");
    schedule(backoff);
  }

  function fresh(node) {
    live.replaceWith(node);
    live = node;
    backoff = 0;
    banner.hidden = true;
    banner.removeAttribute("data-reason");
    schedule(seconds);
  }

  function failure(err) {
    if (err && err.signedOut) {
      stale("your session has ended (or lost its permission)", true);
    } else if (err && err.status) {
      stale("the server answered " + err.status + (err.statusText ? " " + err.statusText : ""));
    } else if (err && err.name === "AbortError") {
      stale("no answer within " + TIMEOUT + " s");
    } else if (err && err.message === "not-dashboard") {
      stale("the server's answer was not this dashboard");
    } else {
      stale("the server could not be reached");
    }
  }

  function refresh() {
    if (document.hidden) { schedule(backoff || seconds); return; }
    var abort = window.AbortController ? new AbortController() : null;
    var limit = abort ? window.setTimeout(function () { abort.abort(); }, TIMEOUT * 1000) : null;
    fetch(location.href, {credentials: "same-origin", cache: "no-store",
                          headers: {"X-Requested-With": "fetch"},
                          signal: abort ? abort.signal : undefined})
      .then(function (r) {
        if (signedOut(r)) { return Promise.reject({signedOut: true}); }
        return r.ok ? r.text() : Promise.reject({status: r.status, statusText: r.statusText});
      })
      .then(function (html) {
        var node = new DOMParser().parseFromString(html, "text/html").getElementById("pgjobs-live");
        if (!node) { return Promise.reject(new Error("not-dashboard")); }
        fresh(node);
      })
      .catch(failure)
      .then(function () { window.clearTimeout(limit); });
  }

  schedule(seconds);
})();
