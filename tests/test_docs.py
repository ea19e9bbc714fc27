"""The offline docs (`python docs/build.py`): every notebook a page, nothing fetched from the network, local MathJax,
links between pages and images that resolve; with headless Chromium installed, the formulas really render."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))
import build as docs  # noqa: E402

REMOTE = re.compile(r'<(?:script|link|img|iframe)\b[^>]*\s(?:src|href)="(?:https?:)?//|import\(\s*["\'](?:https?:)?//', re.I)
HREF = re.compile(r'href="([\w.-]+\.html)(?:#([^"]*))?"')
IMG = re.compile(r'<img[^>]*?\ssrc="(?!data:)([^"]+)"')


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("docs") / "site"
    docs.build(out)
    return out


def test_every_notebook_is_a_page(site):
    names = {p.name for p in site.glob("*.html")}
    assert {docs.page_name(p) for p in (ROOT / "nbs").glob("*.ipynb") if not p.name.startswith("_")} <= names
    assert "index.html" in names and "course.html" in names


def test_nothing_is_fetched_from_the_network(site):
    for page in site.glob("*.html"):
        hits = REMOTE.findall(page.read_text(encoding="utf-8"))
        assert not hits, f"{page.name} loads from the network: {hits[:3]}"


def test_remote_check_sees_a_cdn_script():
    assert REMOTE.search('<script src="https://cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.7/latest.js"></script>')
    assert REMOTE.search('const m = (await import("https://cdnjs.cloudflare.com/ajax/libs/mermaid/11.10.0/mermaid.esm.min.mjs"))')
    assert not REMOTE.search('<script src="mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"></script>')
    assert not REMOTE.search('<a href="https://arxiv.org/abs/2604.16893">')  # a link the reader may follow is fine


def test_mathjax_is_local(site):
    page = (site / "06_grpo.html").read_text(encoding="utf-8")
    src = re.search(r'<script src="(mathjax/MathJax\.js)\?config=([\w,-]+)"', page)
    assert src, "06_grpo.html does not load the local MathJax"
    assert (site / src[1]).is_file()
    for cfg in src[2].split(","): assert (site / "mathjax" / "config" / f"{cfg}.js").is_file(), cfg


def test_links_and_images_resolve(site):
    ids = {p.name: set(re.findall(r'\sid="([^"]+)"', p.read_text(encoding="utf-8"))) for p in site.glob("*.html")}
    for page in site.glob("*.html"):
        text = page.read_text(encoding="utf-8")
        for target, anchor in HREF.findall(text):
            assert target in ids, f"{page.name} links to {target}, which is not a page"
            assert not anchor or anchor in ids[target], f"{page.name} links to {target}#{anchor}, which has no such id"
        for src in IMG.findall(text):
            assert (site / src).is_file(), f"{page.name} shows {src}, which is not in the site"


CHROMIUM = shutil.which("chromium-headless-shell") or shutil.which("chromium")


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium-headless-shell)")
def test_formulas_render_in_chromium(site):
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                          "--virtual-time-budget=20000", "--dump-dom", (site / "06_grpo.html").as_uri()],
                         capture_output=True, text=True, timeout=180).stdout
    n_tex, n_typeset = dom.count('type="math/tex'), len(re.findall(r'id="MathJax-Element-\d+-Frame"', dom))
    assert n_tex > 10 and n_typeset == n_tex, f"MathJax typeset {n_typeset} of {n_tex} formulas in 06_grpo.html"
    body = re.sub(r"<(script|style)\b.*?</\1>", "", dom, flags=re.S)
    text = re.sub(r"<[^>]+>", "", body)
    assert "$$" not in text and "\\frac" not in text, "raw LaTeX left in 06_grpo.html"


def test_pages_show_no_nbdev_directives(site):
    "Readers see code as nbdev's docs show it: no `#| export` / `#| default_exp` lines, no `#| hide` cells."
    for page in site.glob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "default_exp" not in text and "#| export" not in text, page.name
