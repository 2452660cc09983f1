"""Screenshots of every page, light theme, English and Indonesian, at 1280 px and 390 px wide.

    make screenshots            # writes docs/screenshots/<page>-<lang>-<width>.png

Starts the app on a free local port and drives Debian's chromium (see tests/e2e/harness.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lensa.ui.site import PAGES, PAGES_BY_KEY  # noqa: E402
from tests.e2e.harness import Server, browser, chromium_missing_reason, full_page_screenshot, wait_for_app  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--widths", default="1280,390", help="comma-separated window widths in px")
    parser.add_argument("--pages", default=",".join(p.key for p in PAGES), help="comma-separated page keys")
    parser.add_argument("--langs", default="en,id")
    args = parser.parse_args()
    reason = chromium_missing_reason()
    if reason:
        print(f"cannot take screenshots: {reason}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with Server() as server, browser() as chromium:
        for width in (int(w) for w in args.widths.split(",")):
            context = chromium.new_context(viewport={"width": width, "height": 900}, color_scheme="light")
            page = context.new_page()
            for key in args.pages.split(","):
                for lang in args.langs.split(","):
                    path = "" if PAGES_BY_KEY[key].file == "app.py" else key
                    page.goto(f"{server.url}/{path}?lang={lang}")
                    wait_for_app(page)
                    target = args.out / f"{key}-{lang}-{width}.png"
                    full_page_screenshot(page, target)
                    print(target)
            context.close()
    phones = [args.out / "fp16_range-en-390.png", args.out / "memory-id-390.png"]
    if all(p.exists() for p in phones):
        side_by_side(phones, args.out / "readme-phones.png", height=1100)
        print(args.out / "readme-phones.png")
    return 0


def side_by_side(paths: list[Path], target: Path, height: int, gap: int = 24) -> None:
    """The top ``height`` pixels of each screenshot, next to each other (the README's picture)."""
    from PIL import Image  # comes with streamlit

    images = [Image.open(p).crop((0, 0, Image.open(p).width, height)) for p in paths]
    width = sum(i.width for i in images) + gap * (len(images) - 1)
    canvas = Image.new("RGB", (width, height), "white")
    x = 0
    for image in images:
        canvas.paste(image, (x, 0))
        x += image.width + gap
    canvas.save(target, optimize=True)


if __name__ == "__main__":
    raise SystemExit(main())
