"""The report opened in a real browser: headless Chromium renders it, with every plot decoded.

Two runs on the page of a seeded SQLite store:

1. the page as written: a screenshot that is not blank (many colours, a good share of non-white
   pixels), and no Content-Security-Policy violation in the browser's console (the page tries to load
   nothing it forbids itself);
2. a probe copy, whose policy also allows one inline script (images stay limited to ``data:``): after
   the load event the script writes each image's ``complete``/``naturalWidth``/``naturalHeight`` into
   the DOM, read back with ``--dump-dom``; each must equal the PNG's size decoded in Python.

Skipped, with the reason, only when no Chromium binary is found (Debian packages ``chromium`` and
``chromium-driver``; or set ``HYLO_CHROMIUM`` to a browser binary).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from shared.report import generate_report
from shared.report.page import CSP
from tests.report.report_helpers import decode_png, migrated, read_page, seed

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
PROBE = """<script>
window.addEventListener("load", () => {
  const images = Array.from(document.images);
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(
    images.map((i) => ({id: i.id, complete: i.complete, width: i.naturalWidth, height: i.naturalHeight})));
  document.body.appendChild(pre);
});
</script>
"""


def chromium() -> str:
    given = os.environ.get("HYLO_CHROMIUM")
    if given:
        return given
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip(
        "no Chromium binary found (tried HYLO_CHROMIUM and " + ", ".join(NAMES) + "): "
        "install the Debian packages chromium and chromium-driver"
    )


def browse(binary: str, page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--disable-extensions",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        *args,
        page.as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"chromium exited with {done.returncode}:\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def browser() -> str:
    """The browser binary; asked first so that a machine without one skips before any work."""
    return chromium()


@pytest.fixture(scope="module")
def report_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("report")
    url = f"sqlite+aiosqlite:///{folder / 'hylo.db'}"

    async def make() -> str:
        engine = await migrated(url)
        await seed(engine, "demo")
        _, page = await generate_report(engine, cluster="demo")
        await engine.dispose()
        return page

    path = folder / "report.html"
    path.write_text(asyncio.run(make()), encoding="utf-8")
    return path


def test_the_page_renders_and_is_not_blank(browser: str, report_page: Path, tmp_path: Path) -> None:
    binary = browser
    shot = tmp_path / "report.png"
    done = browse(
        binary, report_page, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1200,4200"
    )
    assert shot.exists(), done.stderr[-2000:]
    assert "Content Security Policy" not in done.stderr, done.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 4200)
    pixels = np.asarray(image.resize((300, 1050))).reshape(-1, 3)
    colours = len(np.unique(pixels, axis=0))
    non_white = float(np.mean(pixels.min(axis=1) < 235))
    assert colours > 200, f"only {colours} colours: the page looks blank"
    assert non_white > 0.05, f"only {non_white:.1%} of the page is not white"


def test_every_plot_is_decoded_by_the_browser(browser: str, report_page: Path, tmp_path: Path) -> None:
    binary = browser
    page = report_page.read_text(encoding="utf-8")
    assert page.count(CSP) == 1
    probe = page.replace(CSP, CSP + "; script-src 'unsafe-inline'").replace("</body>", PROBE + "</body>")
    probe_path = tmp_path / "probe.html"
    probe_path.write_text(probe, encoding="utf-8")
    done = browse(binary, probe_path, tmp_path / "profile", "--dump-dom", "--virtual-time-budget=10000")
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, re.S)
    assert found is not None, "the probe did not run:\n" + done.stdout[-2000:] + done.stderr[-2000:]
    seen = {i["id"]: i for i in json.loads(found.group(1).replace("&quot;", '"'))}
    expected = {name: decode_png(src) for name, src in read_page(page).images.items()}
    assert len(expected) == 6 and set(seen) == set(expected)
    for name, (width, height) in expected.items():
        assert seen[name]["complete"], name
        assert (seen[name]["width"], seen[name]["height"]) == (width, height), name
