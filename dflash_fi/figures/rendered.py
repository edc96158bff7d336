"""How long an executed notebook is to read: its nbconvert HTML (what GitHub-style viewers show), measured in
screens of a browser window by headless Chromium.

    python -m dflash_fi.figures.rendered notebooks/0*.ipynb

Not run by the tests (it needs Chromium: `apt-get install chromium`). A notebook executed without a GPU is
shorter than its GPU execution (its `gpu` cells print one line): measured so, its height is an estimate.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WINDOW = (1400, 1000)  # width, height in CSS pixels
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")
# Written into the page: once laid out, the document's height replaces the <title>, which --dump-dom prints.
_MEASURE = ("<script>window.addEventListener('load', () => setTimeout(() => {document.title = 'HEIGHT=' + "
            "document.documentElement.scrollHeight;}, 500));</script>")


def notebook_html(ipynb: Path) -> str:
    """nbconvert's HTML of the notebook, with its outputs as they are."""
    import nbformat
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter().from_notebook_node(nbformat.read(ipynb, as_version=4))
    return body


def rendered_height(ipynb: Path, window: tuple[int, int] = WINDOW, chromium: str | None = None) -> float:
    """The notebook's nbconvert HTML laid out in a window of `window` pixels: its height, in windows."""
    chromium = chromium or shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise FileNotFoundError("no chromium on PATH: apt-get install chromium")
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "page.html"
        page.write_text(notebook_html(Path(ipynb)).replace("</body>", _MEASURE + "</body>"))
        # Offline: the page's CDN scripts (MathJax, require.js) fail fast; the time budget lets layout settle.
        out = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp}/profile",
                              f"--window-size={window[0]},{window[1]}", "--virtual-time-budget=8000", "--dump-dom",
                              page.as_uri()], capture_output=True, text=True, timeout=180)
    found = re.search(r"HEIGHT=(\d+)", out.stdout)
    if not found:
        raise RuntimeError(f"chromium gave no height for {ipynb}: {out.stderr[-500:]}")
    return int(found.group(1)) / window[1]


def main(paths: list[str]) -> int:
    for path in paths:
        print(f"{Path(path).name:<36} {rendered_height(Path(path)):5.1f} screens of {WINDOW[0]} x {WINDOW[1]}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
