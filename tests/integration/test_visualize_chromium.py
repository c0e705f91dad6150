"""`docflow split --html` rendered in headless Chromium: a non-blank page listing every chunk.

Uses Debian's ``chromium`` package (``.ci/run`` installs it on a fresh CI machine); the test
skips only where it is not installed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from PIL import Image

from tasks.split.visualize import COLOURS
from tests.conftest import REPO, SAMPLE, shared_path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: The flags that keep Chromium off the (closed) network and away from the user's profile.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
WINDOW = (1200, 2000)

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (apt-get install chromium; .ci/run installs it on CI)",
)


def split_to_html(file: Path, html: Path, *options: str) -> dict[str, Any]:
    """Run ``docflow split FILE --html HTML --json`` and return its JSON payload."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "flows",
            "split",
            str(file),
            "--html",
            str(html),
            "--json",
            *options,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"wrote {html}" in proc.stderr
    payload: dict[str, Any] = json.loads(proc.stdout)
    return payload


def chromium(tmp_path: Path, *args: str) -> str:
    """Run headless Chromium once with a fresh profile and return its stdout."""
    assert CHROMIUM is not None
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    proc = subprocess.run(
        [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def near(pixel: tuple[int, int, int], hex_colour: str, tolerance: int = 3) -> bool:
    """Return whether ``pixel`` is ``hex_colour`` give or take colour-management rounding."""
    want = [int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)]
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, want, strict=True))


def has_overlap(chunks: list[dict[str, Any]]) -> bool:
    """Return whether any chunk starts before the previous chunk of its document ends."""
    return any(
        b["document"] == a["document"] and b["start_index"] < a["end_index"]
        for a, b in zip(chunks, chunks[1:], strict=False)
    )


CASES = {
    "shared-markdown": (("markdown", "prefect-docs", "tutorial", "flows.md"), True),
    "shared-csv-rows": (("csv", "FY09_EDU_Recipients_by_State.csv"), False),
    "sample-text": (None, True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_page_renders_and_lists_every_chunk(case: str, tmp_path: Path) -> None:
    parts, overlapping = CASES[case]
    file = shared_path(*parts) if parts else SAMPLE / "forage-plants-faq.txt"
    options = (
        ("--chunk-size", "300", "--chunk-overlap", "80", "--length-unit", "chars")
        if overlapping
        else ()
    )
    html = tmp_path / "split.html"
    payload = split_to_html(file, html, *options)
    chunks = payload["chunks"]
    assert chunks and has_overlap(chunks) == overlapping

    png = tmp_path / "split.png"
    url = html.resolve().as_uri()
    chromium(tmp_path, f"--screenshot={png}", f"--window-size={WINDOW[0]},{WINDOW[1]}", url)
    with Image.open(png) as image:
        rgb = image.convert("RGB")
    assert rgb.size == WINDOW
    counted = rgb.getcolors(WINDOW[0] * WINDOW[1]) or []
    colours = {cast(tuple[int, int, int], c): n for n, c in counted}
    assert len(colours) > 50, "the screenshot has almost no distinct colours: a blank page?"
    white = colours.get((255, 255, 255), 0)
    assert white < 0.95 * WINDOW[0] * WINDOW[1], "the screenshot is (almost) all background"
    wanted = {"odd" if c["chunk_index"] % 2 else "even" for c in chunks}
    wanted |= {"overlap"} if overlapping else set()
    for name in sorted(wanted):
        seen = sum(n for c, n in colours.items() if near(c, COLOURS[name]))
        # well above the legend's swatch of each colour (about 1,500 pixels)
        assert seen > 5000, f"the {name} highlight {COLOURS[name]} is not in the screenshot"

    dom = chromium(tmp_path, "--dump-dom", url)
    listed = re.findall(r'<tr class="chunk" id="chunk-(\d+)-(\d+)"', dom)
    assert sorted((int(d), int(i)) for d, i in listed) == sorted(
        (c["document"], c["chunk_index"]) for c in chunks
    )
    assert dom.count('<div class="text">') == payload["documents"]
