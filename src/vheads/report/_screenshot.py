"""Render a report page in headless Chromium: :func:`screenshot` saves a PNG of it (a check
by eye that the self-contained HTML really renders), :func:`page_check` measures it (tables
and figures within the page width, images loaded, in-page links resolved). Both return
``False`` / ``None`` where no Chromium is installed (Debian: ``apt-get install chromium``)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """Path of a Chromium/Chrome executable on PATH, or ``None``."""
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def screenshot(html_path: str | Path, png_path: str | Path, width: int = 1400, height: int = 3000,
               timeout: float = 120.0) -> bool:
    """Screenshot ``html_path`` into ``png_path`` with headless Chromium.

    Returns ``False`` (and writes nothing) when no Chromium is installed or it fails;
    ``True`` when the PNG was written. Network, GPU, sync and update services are off, and
    a throw-away profile is used, so the page is rendered from the file alone.
    """
    exe = find_chromium()
    if exe is None:
        return False
    html_path, png_path = Path(html_path).resolve(), Path(png_path).resolve()
    png_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vheads-chromium-") as profile:
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--hide-scrollbars", f"--user-data-dir={profile}", f"--screenshot={png_path}",
               f"--window-size={width},{height}", html_path.as_uri()]
        try:
            subprocess.run(cmd, capture_output=True, timeout=timeout, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return False
    return png_path.is_file() and png_path.stat().st_size > 0


# A script run in the page once it has loaded: opens every folded table, then measures. It
# writes its findings as JSON into a <pre id="vheads-page-check"> that --dump-dom prints.
_CHECK_JS = r"""
window.addEventListener('load', function () {
  document.querySelectorAll('details').forEach(function (d) { d.open = true; });
  var main = document.querySelector('main') || document.body;
  var cs = getComputedStyle(main), box = main.getBoundingClientRect();
  var left = box.left + parseFloat(cs.paddingLeft), right = box.right - parseFloat(cs.paddingRight);
  function name(el) {
    var c = el.querySelector && el.querySelector('caption');
    return el.tagName === 'IMG' ? el.alt : (c ? c.textContent : el.textContent.slice(0, 60));
  }
  var out = {viewport: document.documentElement.clientWidth, page_width: document.documentElement.scrollWidth,
             content: [left, right], overflow: [], images: [], broken_images: [], links: [], broken_links: []};
  document.querySelectorAll('table, img, figure, pre').forEach(function (el) {
    var r = el.getBoundingClientRect();
    if (r.width > 0 && (r.left < left - 0.5 || r.right > right + 0.5))
      out.overflow.push({tag: el.tagName, name: name(el), left: r.left, right: r.right});
  });
  document.querySelectorAll('img').forEach(function (img) {
    var ok = img.complete && img.naturalWidth > 0;
    out.images.push({name: img.alt, natural: img.naturalWidth, shown: img.clientWidth});  // without its border
    if (!ok) out.broken_images.push(img.alt);
  });
  document.querySelectorAll('a[href]').forEach(function (a) {
    var h = a.getAttribute('href');
    out.links.push(h);
    if (h.charAt(0) !== '#' || !document.getElementById(decodeURIComponent(h.slice(1)))) out.broken_links.push(h);
  });
  var pre = document.createElement('pre');
  pre.id = 'vheads-page-check';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
"""


def page_check(html_path: str | Path, width: int = 1400, height: int = 1000, timeout: float = 120.0) -> dict | None:
    """Render ``html_path`` in headless Chromium at ``width`` px and measure it: returns
    ``{"viewport", "page_width", "content": [left, right], "overflow": [tables, images and
    figures reaching past the page's content box, folded tables opened], "images": [{name,
    natural, shown}], "broken_images": [images that did not load], "links", "broken_links":
    [links to no element of the page]}``; ``None`` without Chromium (or when it fails).

    The page is a copy with one script added (the report itself carries none); Chromium
    prints the DOM after the script has run (``--dump-dom``), and the result is read back
    from it. Nothing is fetched from the network."""
    import html as _html
    import json
    import re

    exe = find_chromium()
    if exe is None:
        return None
    page = Path(html_path).read_text(encoding="utf-8")
    script = f"<script>{_CHECK_JS}</script>"
    page = page.replace("</body>", script + "</body>") if "</body>" in page else page + script
    with tempfile.TemporaryDirectory(prefix="vheads-chromium-") as tmp:
        copy = Path(tmp) / "page.html"
        copy.write_text(page, encoding="utf-8")
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--hide-scrollbars", f"--user-data-dir={Path(tmp) / 'profile'}", f"--window-size={width},{height}",
               "--virtual-time-budget=10000", "--dump-dom", copy.as_uri()]
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=timeout, check=False, text=True)
        except (OSError, subprocess.TimeoutExpired):
            return None
    m = re.search(r'<pre id="vheads-page-check">(.*?)</pre>', done.stdout, re.S)
    return json.loads(_html.unescape(m.group(1))) if m else None
