"""Headless Chromium for the report tests: a page rendered to a screenshot and, through a probe
script added to a copy of the page (the report itself carries no script), the layout the browser
computed: where the first chart is, how tall the page is and which axis labels overlap."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# Measured in the browser, written into <body data-probe="...">, read back from --dump-dom.
# Tick labels: matplotlib's SVG puts each in <g id="<chart>-xtick_N"> (or ytick_N) as <text>.
PROBE_JS = """(function () {
  function top(e) { return Math.round(e.getBoundingClientRect().top + window.scrollY); }
  var svgs = [].slice.call(document.querySelectorAll("svg")).filter(function (e) {
    return e.getBoundingClientRect().height > 0; });
  var overlaps = [];
  svgs.forEach(function (svg) {
    ["xtick_", "ytick_"].forEach(function (kind) {
      var boxes = [].slice.call(svg.querySelectorAll('g[id*="' + kind + '"] text'))
        .map(function (t) { return { r: t.getBoundingClientRect(), s: t.textContent }; })
        .filter(function (b) { return b.s.trim() && b.r.width > 0; });
      for (var i = 0; i < boxes.length; i++) for (var j = i + 1; j < boxes.length; j++) {
        var a = boxes[i].r, b = boxes[j].r;
        if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom)
          overlaps.push(boxes[i].s + " / " + boxes[j].s);
      }
    });
  });
  var summary = document.getElementById("summary");
  var outside = svgs.filter(function (e) { return !(summary && summary.contains(e)); });
  document.body.setAttribute("data-probe", JSON.stringify({
    first_chart_px: svgs.length ? top(svgs[0]) : null,
    first_chart_outside_summary_px: outside.length ? top(outside[0]) : null,
    page_height_px: document.documentElement.scrollHeight,
    scroll_width_px: document.documentElement.scrollWidth,
    client_width_px: document.documentElement.clientWidth,
    charts_drawn: svgs.length,
    overlapping_tick_labels: overlaps
  }));
})();"""


def chromium() -> str | None:
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else shutil.which("chromium")


@dataclass
class Rendered:
    dom: str  # the DOM as the browser parsed it (the probe's attribute included)
    probe: dict[str, Any]  # PROBE_JS's measurements
    screenshot: Path


def render_page(exe: str, page: str, folder: Path, width: int = 1400, height: int = 2000) -> Rendered:
    """`page` in headless Chromium at width x height: its DOM, the probe's layout and a screenshot."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "page.html"
    path.write_text(page.replace("</body>", f"<script>{PROBE_JS}</script></body>"))
    shot = folder / "shot.png"
    cmd = [
        exe,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={folder / 'profile'}",
        f"--screenshot={shot}",
        "--dump-dom",
        f"--window-size={width},{height}",
        path.as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = re.search(r'data-probe="([^"]*)"', proc.stdout)
    assert found, "the probe script did not run: " + proc.stdout[:500]
    return Rendered(proc.stdout, json.loads(html.unescape(found.group(1))), shot)


def png_pixels(path: Path) -> np.ndarray:
    """A PNG as a (height, width, channels) array. Pillow is matplotlib's own dependency."""
    from PIL import Image

    with Image.open(path) as im:
        assert im.format == "PNG", f"{path} is not a PNG"
        return np.asarray(im.convert("RGB"))


def colour_counts(img: np.ndarray) -> dict[str, int]:
    """Pixels per colour ('#rrggbb'), alpha ignored."""
    rgb = img[..., :3].reshape(-1, 3).astype(np.uint32)
    keys, counts = np.unique((rgb[:, 0] << 16) | (rgb[:, 1] << 8) | rgb[:, 2], return_counts=True)
    return {f"#{int(k):06X}": int(n) for k, n in zip(keys, counts)}
