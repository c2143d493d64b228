/* mcptasks dashboard: live updates over the /ws/tasks WebSocket, and small conveniences.
 *
 * The socket only says "task X is now at version V". The page then fetches server-rendered HTML
 * for what it shows of X (a list row, the detail's sections, the inbox, the inbox count), so
 * what appears is always what the server's access rules and templates produce. The channel layer
 * delivers at most once: after a reconnect, and every CATCH_UP_MS, the page catches up anyway.
 * No inline scripts: the Content-Security-Policy allows only this file and htmx.
 */
(function () {
  "use strict";

  var CATCH_UP_MS = 30000;
  var DEBOUNCE_MS = 250;
  var body = document.body;
  var timers = {};
  var socket = null;
  var retries = 0;
  var everConnected = false;

  document.documentElement.classList.add("js");

  function debounce(name, fn, delay) {
    clearTimeout(timers[name]);
    timers[name] = setTimeout(fn, delay === undefined ? DEBOUNCE_MS : delay);
  }

  function fetchHtml(url) {
    return fetch(url, {
      credentials: "same-origin",
      headers: { "X-Requested-With": "fetch", "Accept": "text/html" },
    }).then(function (response) {
      if (response.status === 204) { return null; }
      if (!response.ok) { throw new Error("HTTP " + response.status); }
      return response.text();
    });
  }

  function parse(html) {
    var template = document.createElement("template");
    template.innerHTML = html.trim();
    return template.content;
  }

  function processNode(node) {
    if (window.htmx && node && node.nodeType === 1) { window.htmx.process(node); }
  }

  function isBusy(element) {
    // Never replace what someone is typing into.
    if (element.querySelector("form[data-dirty]")) { return true; }
    var active = document.activeElement;
    return !!(active && active !== body && element.contains(active) &&
      /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName));
  }

  // ---------------------------------------------------------------- accessibility
  // What changed by itself is said in the polite live region (screen readers read it out).
  function announce(text) {
    var region = document.getElementById("live-announcer");
    if (!region || !text) { return; }
    region.textContent = "";
    setTimeout(function () { region.textContent = text; }, 50);
  }

  function stateOf(element) {
    var badge = element && element.querySelector("[data-state]");
    return badge ? badge.textContent.trim() : "";
  }

  function rowName(row) {
    var tool = row.querySelector(".tool");
    var id = row.querySelector(".id");
    return ((tool ? tool.textContent : "Task") + " " + (id ? id.textContent : "")).trim();
  }

  // After a submit that failed, focus goes to the first field in error (or the error summary).
  function focusFirstError(root) {
    var scope = root || document;
    var field = scope.querySelector(".has-error input, .has-error select, .has-error textarea, [aria-invalid=true]");
    var target = field || scope.querySelector("[data-errors], .message.error[role=alert]");
    if (!target) { return; }
    if (!field && !target.hasAttribute("tabindex")) { target.setAttribute("tabindex", "-1"); }
    target.focus();
  }

  function flash(element) {
    element.classList.remove("flash");
    void element.offsetWidth;
    element.classList.add("flash");
  }

  // ---------------------------------------------------------------- list rows
  function refreshRow(row, version) {
    if (version !== undefined && Number(row.dataset.version) >= version) { return; }
    fetchHtml(row.dataset.liveUrl).then(function (html) {
      if (html === null) { return; }
      var fresh = parse(html).firstElementChild;
      if (!fresh || !row.isConnected) { return; }
      if (Number(row.dataset.version) >= Number(fresh.dataset.version)) { return; }
      var before = stateOf(row);
      var ticked = row.querySelector("input[name=item]:checked");
      var box = fresh.querySelector("input[name=item]");
      if (ticked && box && !box.disabled) { box.checked = true; }
      row.replaceWith(fresh);
      if (stateOf(fresh) !== before) { announce(rowName(fresh) + " is now " + stateOf(fresh) + "."); }
      processNode(fresh);
      refreshRelativeTimes(fresh);
      localizeTimes(fresh);
      flash(fresh);
    }).catch(function () {});
  }

  function insertRow(list, taskId) {
    if (!list.hasAttribute("data-first-page") || !list.dataset.rowUrl) { return; }
    var url = list.dataset.rowUrl.replace("__id__", encodeURIComponent(taskId));
    fetchHtml(url).then(function (html) {
      if (html === null || document.getElementById("row-" + taskId)) { return; }
      var fresh = parse(html).firstElementChild;
      var tbody = list.querySelector("tbody");
      if (!fresh || !tbody) { return; }
      var empty = tbody.querySelector(".empty-row");
      if (empty) { empty.remove(); }
      tbody.insertBefore(fresh, tbody.firstChild);
      announce("New task: " + rowName(fresh) + ", " + stateOf(fresh) + ".");
      processNode(fresh);
      refreshRelativeTimes(fresh);
      localizeTimes(fresh);
      flash(fresh);
    }).catch(function () {});
  }

  // ---------------------------------------------------------------- task detail
  function refreshDetail(page, version) {
    if (version !== undefined && Number(page.dataset.version) >= version) { return; }
    fetchHtml(page.dataset.liveUrl).then(function (html) {
      if (html === null) { return; }
      var fresh = parse(html);
      var root = fresh.querySelector("#task-live");
      if (root && Number(root.dataset.version) < Number(page.dataset.version)) { return; }
      var pending = false;
      var head = document.getElementById("sec-head");
      var before = stateOf(head);
      fresh.querySelectorAll("[data-live-section]").forEach(function (section) {
        var current = document.getElementById(section.id);
        if (!current) { return; }
        if (current.innerHTML === section.innerHTML) { return; }
        if (isBusy(current)) { pending = true; return; }
        var openDetails = Array.prototype.map.call(
          current.querySelectorAll("details[open][data-action], details[open][data-reconcile]"),
          function (d) { return d.dataset.action || d.dataset.reconcile; });
        current.replaceWith(section);
        section.querySelectorAll("details[data-action], details[data-reconcile]").forEach(function (d) {
          if (openDetails.indexOf(d.dataset.action || d.dataset.reconcile) !== -1) { d.open = true; }
        });
        processNode(section);
        refreshRelativeTimes(section);
        localizeTimes(section);
      });
      if (root && !pending) { page.dataset.version = root.dataset.version; }
      var after = stateOf(document.getElementById("sec-head"));
      if (after && after !== before) { announce("This task is now " + after + "."); }
    }).catch(function () {});
  }

  // ---------------------------------------------------------------- inbox and its count
  function refreshInbox() {
    var inbox = document.querySelector("[data-live-inbox]");
    if (!inbox || isBusy(inbox) || inbox.querySelector("input[name=item]:checked")) { return; }
    fetchHtml(inbox.dataset.liveUrl).then(function (html) {
      if (html === null || inbox.innerHTML.trim() === html.trim()) { return; }
      var before = {};
      inbox.querySelectorAll(".card").forEach(function (card) { before[card.outerHTML] = true; });
      inbox.innerHTML = html;
      processNode(inbox);
      refreshRelativeTimes(inbox);
      localizeTimes(inbox);
      var added = 0;
      inbox.querySelectorAll(".card").forEach(function (card) {
        if (!before[card.outerHTML]) { flash(card); added += 1; }
      });
      if (added) { announce(added === 1 ? "Your inbox has changed: 1 new item." : "Your inbox has changed: " + added + " new items."); }
    }).catch(function () {});
  }

  function refreshCounts() {
    var url = body.dataset.countsUrl;
    var badge = document.getElementById("inbox-count");
    if (!url || !badge) { return; }
    fetchHtml(url).then(function (html) {
      if (html === null) { return; }
      var fresh = parse(html).firstElementChild;
      if (fresh && badge.isConnected && badge.outerHTML !== fresh.outerHTML) { badge.replaceWith(fresh); }
    }).catch(function () {});
  }

  // ---------------------------------------------------------------- the socket
  function onTask(message) {
    var taskId = message.task_id;
    var version = Number(message.version);
    var selector = '[data-live-row="' + CSS.escape(taskId) + '"]';
    var rows = document.querySelectorAll(selector);
    rows.forEach(function (row) { refreshRow(row, version); });
    var list = document.querySelector("[data-live-list]");
    if (list && rows.length === 0) { insertRow(list, taskId); }
    var page = document.querySelector('[data-live-task="' + CSS.escape(taskId) + '"]');
    if (page) { refreshDetail(page, version); }
    debounce("inbox", refreshInbox);
    debounce("counts", refreshCounts);
  }

  function catchUp() {
    document.querySelectorAll("[data-live-row]").forEach(function (row) { refreshRow(row); });
    document.querySelectorAll("[data-live-task]").forEach(function (page) { refreshDetail(page); });
    refreshInbox();
    refreshCounts();
  }

  function setStatus(state, text) {
    var status = document.getElementById("live-status");
    body.dataset.live = state;
    if (!status) { return; }
    status.dataset.state = state;
    status.textContent = text;
  }

  function connect() {
    var path = body.dataset.wsUrl;
    if (!path || !window.WebSocket) { return; }
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + window.location.host + path);
    socket.addEventListener("open", function () {
      retries = 0;
      setStatus("live", "live");
      if (everConnected) { catchUp(); }
      everConnected = true;
    });
    socket.addEventListener("message", function (event) {
      var message;
      try { message = JSON.parse(event.data); } catch (err) { return; }
      if (message && message.type === "task" && message.task_id) { onTask(message); }
    });
    socket.addEventListener("close", function () {
      setStatus("offline", "reconnecting…");
      var delay = Math.min(30000, 500 * Math.pow(2, retries++));
      setTimeout(connect, delay);
    });
  }

  // ---------------------------------------------------------------- relative times
  function relative(date) {
    var seconds = Math.round((Date.now() - date.getTime()) / 1000);
    var future = seconds < 0;
    var s = Math.abs(seconds);
    var text;
    if (s < 45) { return future ? "in a moment" : "just now"; }
    if (s < 3600) { text = Math.round(s / 60) + " min"; }
    else if (s < 86400) { text = Math.round(s / 3600) + " h"; }
    else { text = Math.round(s / 86400) + " d"; }
    return future ? "in " + text : text + " ago";
  }

  function refreshRelativeTimes(root) {
    (root || document).querySelectorAll("time[data-relative]").forEach(function (element) {
      var date = new Date(element.getAttribute("datetime"));
      var text = element.querySelector(".rel");
      if (!isNaN(date.getTime()) && text) { text.textContent = relative(date); }
    });
  }

  // ---------------------------------------------------------------- the viewer's time zone
  // The server writes absolute times in the zone this cookie names (UTC until it is set); when
  // the browser's differs, the page rewrites them as the server would ("2026-12-01 18:52 +09:00").
  var browserZone = "";
  try { browserZone = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (err) {}

  function pad(number) { return (number < 10 ? "0" : "") + number; }

  function localStamp(date, seconds) {
    var minutes = -date.getTimezoneOffset();
    var sign = minutes < 0 ? "-" : "+";
    var zone = minutes === 0 ? "UTC" :
      sign + pad(Math.floor(Math.abs(minutes) / 60)) + ":" + pad(Math.abs(minutes) % 60);
    return date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()) +
      " " + pad(date.getHours()) + ":" + pad(date.getMinutes()) +
      (seconds ? ":" + pad(date.getSeconds()) : "") + " " + zone;
  }

  function localizeTimes(root) {
    // A zone chosen on the preferences page wins over the browser's: the server wrote it.
    if (body.hasAttribute("data-tz-profile")) { return; }
    if (!browserZone || browserZone === body.dataset.tz) { return; }
    (root || document).querySelectorAll("time[datetime] .abs").forEach(function (element) {
      var time = element.parentNode;
      var date = new Date(time.getAttribute("datetime"));
      if (!isNaN(date.getTime())) { element.textContent = localStamp(date, time.hasAttribute("data-seconds")); }
    });
  }

  if (browserZone !== body.dataset.tz && /^[A-Za-z0-9_+\-\/]{1,64}$/.test(browserZone)) {
    document.cookie = "mcptasks_tz=" + browserZone +
      "; path=/; max-age=31536000; SameSite=Lax" + (window.location.protocol === "https:" ? "; Secure" : "");
  }

  // ---------------------------------------------------------------- conveniences
  document.addEventListener("input", function (event) {
    var form = event.target && event.target.form;
    if (form) { form.setAttribute("data-dirty", ""); }
  });
  document.addEventListener("submit", function (event) {
    if (event.target && event.target.removeAttribute) { event.target.removeAttribute("data-dirty"); }
  });
  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target && target.matches && target.matches("select[data-autosubmit]") && target.form) {
      target.form.submit();
    }
  });
  document.addEventListener("focusin", function (event) {
    var target = event.target;
    if (target && target.matches && target.matches("input[data-select-on-focus]")) { target.select(); }
  });

  // A filter applied in place pushed its own URL: the tenant switcher comes back to it, and the
  // links that carry the filters (the audit export) carry the new ones.
  document.addEventListener("htmx:pushedIntoHistory", function () {
    var here = window.location.pathname + window.location.search;
    document.querySelectorAll('.tenant-switch input[name="next"], form[data-keeps-next] input[name="next"]').forEach(function (input) {
      input.value = here;
    });
    document.querySelectorAll("a[data-keeps-query]").forEach(function (link) {
      link.href = link.pathname + window.location.search;
    });
  });

  refreshRelativeTimes(document);
  localizeTimes(document);
  document.addEventListener("htmx:afterSettle", function (event) {
    localizeTimes(document);
    var results = document.getElementById("task-results");
    if (results && results.querySelector("[data-errors]")) { focusFirstError(results); }
  });
  focusFirstError(document);
  setInterval(function () { refreshRelativeTimes(document); }, 30000);
  if (body.dataset.wsUrl) {
    connect();
    setInterval(function () {
      refreshCounts();
      refreshInbox();
    }, CATCH_UP_MS);
  }
})();
