"""Render a report page in headless Chromium and save a screenshot (a check by eye that the
self-contained HTML really renders)."""

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
