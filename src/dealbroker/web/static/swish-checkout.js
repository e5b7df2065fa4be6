// The Swish checkout's waiting page: asks the server every few seconds whether Swish has
// settled the payment, and once it has, loads the page again (which sends the buyer on).
// Without this script, the page's "Check again" link does the same.
(function () {
  "use strict";
  var waiting = document.querySelector("[data-swish-waiting]");
  if (!waiting) return;
  var status = waiting.getAttribute("data-status");
  var every = parseInt(waiting.getAttribute("data-poll-ms"), 10) || 3000;
  function ask() {
    fetch(status, { credentials: "same-origin", cache: "no-store" })
      .then(function (answer) { return answer.json(); })
      .then(function (body) {
        if (body.waiting) setTimeout(ask, every);
        else window.location.reload();
      })
      .catch(function () { setTimeout(ask, every * 2); });
  }
  setTimeout(ask, every);
})();
