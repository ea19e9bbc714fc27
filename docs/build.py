"""Render every notebook to a browsable HTML site that works offline: `python docs/build.py [OUT]` (default build/docs).

nbconvert's lab template with a local MathJax 2.7 (from the `jupyter-server-mathjax` package, or Debian's
`libjs-mathjax`) copied into the site, no script from the network, notebook links rewritten to the pages,
and local images copied beside them. `index.html` is the notebook map (nbs/index.ipynb).
"""
from __future__ import annotations

import argparse
import html
import json
import re
import shutil
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"
MATHJAX_CONFIG = "TeX-AMS-MML_HTMLorMML-full,Safe"
LINK = re.compile(r'href="([\w.-]+)\.ipynb(#[^"]*)?"')
LOCAL_SRC = re.compile(r'<img[^>]*?\ssrc="(?!data:|https?:|//)([^"]+)"')


def mathjax_dir() -> Path:
    "A local MathJax 2.7 folder (the one with MathJax.js)."
    try:
        import jupyter_server_mathjax
        d = Path(jupyter_server_mathjax.__file__).parent / "static"
        if (d / "MathJax.js").exists(): return d
    except ImportError: pass
    d = Path("/usr/share/javascript/mathjax")
    if (d / "MathJax.js").exists(): return d
    raise FileNotFoundError("docs: no local MathJax; pip install jupyter-server-mathjax (or apt-get install libjs-mathjax)")


def pages() -> list[Path]:
    "The notebook map, the syllabus, the lessons in their tracks' order (nbs/tracks.json), then the other pages."
    nbs = sorted(p for p in NBS.glob("*.ipynb") if not p.name.startswith("_"))
    tracks = json.loads((NBS / "tracks.json").read_text()) if (NBS / "tracks.json").exists() else {}
    order = ["index", "course"] + [n for t in tracks.values() if isinstance(t, list) for n in t]
    first = [NBS / f"{n}.ipynb" for n in order if (NBS / f"{n}.ipynb").exists()]
    return first + [p for p in nbs if p not in first]


def title(nb) -> str:
    "The notebook's first `# ` heading."
    for c in nb.cells:
        if c.cell_type == "markdown" and (m := re.match(r"#\s+(.+)", c.source)): return m[1].strip()
    return "untitled"


DIRECTIVE = re.compile(r"^#\|.*\n?", re.M)


def for_readers(nb):
    "The notebook as nbdev's docs show it: `#| hide` cells dropped, `#| ...` directive lines taken out of code cells."
    nb = nbformat.from_dict(nb)  # a copy
    keep = []
    for c in nb.cells:
        if c.cell_type == "code":
            if re.match(r"#\|\s*hide\b", c.source): continue
            c.source = DIRECTIVE.sub("", c.source).strip("\n")
            if not c.source and not c.get("outputs"): continue
        keep.append(c)
    nb.cells = keep
    return nb


def page_name(p: Path) -> str: return "index.html" if p.stem == "index" else f"{p.stem}.html"


def nav(entries: list[tuple[str, str]], current: str) -> str:
    "The list of pages shown on top of every page."
    links = " · ".join(f'<b>{html.escape(t)}</b>' if href == current else f'<a href="{href}">{html.escape(t)}</a>'
                       for href, t in entries)
    return f'<nav class="course-nav" style="font-size:0.85em;padding:0.5em 1em;border-bottom:1px solid #ddd">{links}</nav>'


def build(out: str | Path = ROOT / "build" / "docs") -> list[Path]:
    "Render the site into `out` (replaced); the pages written."
    out = Path(out)
    if out.exists(): shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copytree(mathjax_dir(), out / "mathjax")
    srcs = pages()
    nbs = {p: for_readers(nbformat.read(p, as_version=4)) for p in srcs}
    entries = [(page_name(p), title(nb)) for p, nb in nbs.items()]
    exporter = HTMLExporter(template_name="lab", template_file="offline.html.j2",
                            extra_template_paths=[str(Path(__file__).parent)],
                            mathjax_url=f"mathjax/MathJax.js?config={MATHJAX_CONFIG}")
    written = []
    for p, nb in nbs.items():
        name = page_name(p)
        body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": title(nb), "path": str(NBS)},
                                                             "nav": nav(entries, name)})
        body = LINK.sub(lambda m: f'href="{page_name(Path(m[1] + ".ipynb"))}{m[2] or ""}"', body)
        for src in LOCAL_SRC.findall(body):  # images a markdown cell refers to (curves of stored runs)
            f = NBS / html.unescape(src)
            if not f.is_file(): raise FileNotFoundError(f"docs: {p.name} shows {src}, which is not in nbs/")
            (out / src).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, out / src)
        (out / name).write_text(body, encoding="utf-8")
        written.append(out / name)
    return written


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=str(ROOT / "build" / "docs"))
    pages_ = build(ap.parse_args().out)
    print(f"{len(pages_)} pages in {pages_[0].parent}; open {pages_[0]}")
