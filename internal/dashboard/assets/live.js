// Live updates: re-fetch the open view's content (same URL, fragment=1)
// every refresh period while the page is visible, and swap it in. No
// request is made while the tab is hidden, so an unwatched dashboard costs
// its node nothing.
(function () {
  "use strict";
  var view = document.getElementById("view");
  var status = document.getElementById("live");
  var every = parseInt(document.body.dataset.refresh, 10) || 1000;
  var busy = false;
  function tick() {
    if (document.hidden || busy) { return; }
    busy = true;
    var u = new URL(window.location.href);
    u.searchParams.set("fragment", "1");
    fetch(u, { cache: "no-store" }).then(function (r) {
      if (!r.ok) { throw new Error("HTTP " + r.status); }
      return r.text();
    }).then(function (html) {
      view.innerHTML = html;
      status.textContent = "live";
      status.className = "live ok";
    }).catch(function () {
      status.textContent = "disconnected: retrying";
      status.className = "live bad";
    }).finally(function () { busy = false; });
  }
  setInterval(tick, every);
  document.addEventListener("visibilitychange", tick);
})();
