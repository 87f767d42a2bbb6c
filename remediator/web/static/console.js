// Relative times drift while a page stays open at 3 a.m.: refresh them every 30 s.
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
})();
