"""Writes static/favicon.ico from static/favicon.svg: headless Chromium renders the SVG at 16, 32
and 48 px and the ICO holds those PNGs (an ICO may carry PNG images). Run it after changing the
SVG: ``.venv/bin/python scripts/make_favicon.py``."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.browser.conftest import CHROMIUM_ARGS, chromium_path  # noqa: E402

SIZES = (16, 32, 48)


def render(svg: str) -> list[tuple[int, bytes]]:
    from playwright.sync_api import sync_playwright

    pngs = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        for size in SIZES:
            page = browser.new_page(viewport={"width": size, "height": size})
            sized = svg.replace("<svg ", f'<svg width="{size}" height="{size}" ', 1)
            page.set_content(f'<body style="margin:0;background:transparent">{sized}</body>')
            clip = {"x": 0, "y": 0, "width": size, "height": size}
            pngs.append((size, page.screenshot(omit_background=True, clip=clip)))
        browser.close()
    return pngs


def ico(pngs: list[tuple[int, bytes]]) -> bytes:
    """ICONDIR, one ICONDIRENTRY per image (width, height, colours, reserved, planes, bits per
    pixel, size, offset), then the images."""
    out = struct.pack("<HHH", 0, 1, len(pngs))
    offset = 6 + 16 * len(pngs)
    for size, data in pngs:
        out += struct.pack("<BBBBHHII", size % 256, size % 256, 0, 0, 1, 32, len(data), offset)
        offset += len(data)
    return out + b"".join(data for _, data in pngs)


if __name__ == "__main__":
    data = ico(render((ROOT / "static" / "favicon.svg").read_text()))
    (ROOT / "static" / "favicon.ico").write_bytes(data)
    print(f"static/favicon.ico: {len(data)} bytes")
