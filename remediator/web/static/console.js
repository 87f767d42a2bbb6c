// Small enhancements, no framework: relative times that keep up, table column names for the
// phone layout, filters folded on phones, and live updates of pages with open remediations.
(function () {
  function text(seconds) {
    var s = Math.abs(seconds), d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600),
      m = Math.floor(s % 3600 / 60), r = Math.floor(s % 60), out;
    if (s < 5) return "just now";
    function two(big, bu, small, su) { return big + bu + (small ? " " + small + su : ""); }
    if (d) out = two(d, "d", h, "h"); else if (h) out = two(h, "h", m, "m");
    else if (m) out = two(m, "m", r, "s"); else out = r + "s";
    return seconds > 0 ? out + " ago" : "in " + out;
  }
  function tick() {
    document.querySelectorAll("time[data-rel]").forEach(function (el) {
      var at = Date.parse(el.getAttribute("datetime"));
      if (!isNaN(at)) el.textContent = text((Date.now() - at) / 1000);
    });
  }
  setInterval(tick, 30000);

  // The phone layout shows each cell with its column's name (CSS reads data-label).
  function label(root) {
    root.querySelectorAll("table").forEach(function (table) {
      // Only the table's own rows: a nested table (diagnostics in a timeline) has its own names.
      var names = Array.prototype.map.call(
        table.querySelectorAll(":scope > thead > tr > th"), function (th) {
          return th.textContent.trim();
        });
      if (!names.length) return;
      table.querySelectorAll(":scope > tbody > tr").forEach(function (tr) {
        Array.prototype.forEach.call(tr.children, function (td, i) {
          if (!td.hasAttribute("data-label") && names[i] && !td.hasAttribute("colspan")) {
            td.setAttribute("data-label", names[i]);
          }
        });
      });
    });
  }
  label(document);
  document.addEventListener("live-updated", function (e) { label(e.target); tick(); });

  if (window.matchMedia && window.matchMedia("(max-width: 700px)").matches) {
    document.querySelectorAll("details.fold[data-fold-on-phone]").forEach(function (d) {
      d.open = false;
    });
  }
})();

// Live: a page showing open remediations asks every few seconds whether anything changed
// (one tiny JSON answer) and only then fetches itself again and swaps the banners and main
// content in place; never while someone is typing a reason or has changed a filter.
(function () {
  var main = document.querySelector("main[data-live]");
  if (!main || !window.fetch || !window.DOMParser) return;
  var every = 3000;
  function busy() {
    var active = document.activeElement;
    if (active && main.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) {
      return true;
    }
    // Busy means changed and not yet applied: a box ticked by the page's own filter (the
    // overview's tiles link to /remediations?state=held) is the filter, not a change.
    return Array.prototype.some.call(
      main.querySelectorAll("form input[type=text], form input[type=checkbox], textarea"),
      function (el) {
        return el.type === "checkbox" ? el.checked !== el.defaultChecked
          : el.value !== el.defaultValue;
      });
  }
  function swap(html) {
    var fresh = new DOMParser().parseFromString(html, "text/html");
    var freshMain = fresh.querySelector("main");
    if (!freshMain) return;
    ["#banners"].forEach(function (sel) {
      var now = document.querySelector(sel), next = fresh.querySelector(sel);
      if (now && next) now.innerHTML = next.innerHTML;
    });
    main.innerHTML = freshMain.innerHTML;
    main.setAttribute("data-version", freshMain.getAttribute("data-version") || "");
    if (!freshMain.hasAttribute("data-live")) main.removeAttribute("data-live");
    main.dispatchEvent(new CustomEvent("live-updated", { bubbles: true }));
  }
  function poll() {
    if (!main.hasAttribute("data-live")) return;
    if (document.hidden || busy()) { setTimeout(poll, every); return; }
    fetch(main.getAttribute("data-live"), { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (body) {
        if (!body || body.version === main.getAttribute("data-version")) return null;
        return fetch(location.href, { credentials: "same-origin", cache: "no-store" })
          .then(function (r) { return r.ok ? r.text() : null; })
          .then(function (html) { if (html && !busy()) swap(html); });
      })
      .catch(function () { /* the next round tries again */ })
      .then(function () { setTimeout(poll, every); });
  }
  setTimeout(poll, every);
})();
