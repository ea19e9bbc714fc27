"""The course's shape per lesson: cells, code lines, exported share, mean code lines per cell, forward imports,
exercises and an honest reading time (200 words a minute of prose, 10 lines a minute of code).

Run: `python bench/course_stats.py [--root CHECKOUT] [--write]`. `--root` measures another checkout (e.g. main,
for a before/after table; the track order is read from its nbs/tracks.json, else from this checkout's).
`--write` sets the "Reading time: about N min" line of each lesson's Goals cell, and course.ipynb's reading column,
to the measured time.
Prints a markdown table per track and the totals.
"""
from __future__ import annotations

import argparse
import ast
import json
import re
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parents[1]
WORDS_PER_MIN, CODE_LINES_PER_MIN = 200, 10
FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.S)
READING = re.compile(r"Reading time: about (\d+) min")
EXERCISE = re.compile(r"\A# Exercise (\d+):")


def lines_of(code: str) -> int:
    "Non-blank lines of code."
    return sum(1 for l in code.splitlines() if l.strip())


def reading_minutes(nb) -> float:
    "Prose words / 200 + code lines / 10, over every cell (code fenced in markdown counts as code, outputs do not)."
    words = code = 0
    for c in nb.cells:
        if c.cell_type == "code": code += lines_of(c.source)
        elif c.cell_type == "markdown":
            code += sum(lines_of(m) for m in FENCE.findall(c.source))
            words += len(re.sub(r"<[^>]+>", " ", FENCE.sub(" ", c.source)).split())
    return words / WORDS_PER_MIN + code / CODE_LINES_PER_MIN


def package_imports(source: str) -> set[str]:
    "The `easyvideor1.<module>`s a cell imports, less the display tool `report.trainer_code`."
    code = "\n".join(l for l in source.splitlines() if not l.lstrip().startswith(("%", "!")))
    out = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "easyvideor1":
            parts = node.module.split(".")
            names = {a.name for a in node.names}
            if len(parts) == 1: out |= names
            elif not (parts[1] == "report" and names <= {"trainer_code", "TrainerCode"}): out.add(parts[1])
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[1] for a in node.names if a.name.startswith("easyvideor1.")}
    return out


def lesson_stats(nb, lesson: str, order: list[str], lessons: dict[str, str]) -> dict:
    code = [c for c in nb.cells if c.cell_type == "code"]
    exported = [c for c in code if re.match(r"#\|\s*exports?\b", c.source)]
    n_lines = sum(lines_of(c.source) for c in code)
    fwd = set()
    for c in code:
        fwd |= {m for m in package_imports(c.source)
                if m in lessons and lesson in order and order.index(lessons[m]) > order.index(lesson)}
    return dict(cells=len(nb.cells), code_cells=len(code), code_lines=n_lines,
                exported=len(exported) / max(len(code), 1), mean_lines=n_lines / max(len(code), 1),
                forward=len(fwd), exercises=sum(1 for c in code if EXERCISE.match(c.source)),
                minutes=reading_minutes(nb))


def course(root: Path) -> tuple[dict[str, list[str]], dict[str, dict]]:
    "The tracks (root's nbs/tracks.json, else this checkout's) and the stats of every lesson under root."
    tj = root / "nbs" / "tracks.json"
    tracks = json.loads((tj if tj.exists() else HERE / "nbs" / "tracks.json").read_text())
    tracks = {k: v for k, v in tracks.items() if isinstance(v, list)}
    order = [n for t in tracks.values() for n in t]
    nbs = {p.stem: nbformat.read(p, as_version=4) for p in sorted((root / "nbs").glob("*.ipynb"))
           if re.match(r"\d\d[a-z]?_", p.name)}
    lessons = {}
    for name, nb in nbs.items():
        if m := re.search(r"#\|\s*default_exp\s+(\w+)", "\n".join(c.source for c in nb.cells)): lessons[m[1]] = name
    return tracks, {n: lesson_stats(nbs[n], n, order, lessons) for n in order if n in nbs}


def table(names: list[str], stats: dict[str, dict]) -> str:
    head = "| lesson | cells | code lines | exported | lines/cell | forward imports | exercises | reading (min) |"
    rows = [head, "|" + "---|" * 8]
    for n in names:
        s = stats[n]
        rows.append(f"| {n} | {s['cells']} | {s['code_lines']} | {s['exported']:.0%} | {s['mean_lines']:.1f} | "
                    f"{s['forward']} | {s['exercises']} | {s['minutes']:.0f} |")
    ss = [stats[n] for n in names]
    code_cells = sum(s["code_cells"] for s in ss)
    exp = sum(s["exported"] * s["code_cells"] for s in ss) / max(code_cells, 1)
    rows.append(f"| **{len(ss)} lessons** | {sum(s['cells'] for s in ss)} | {sum(s['code_lines'] for s in ss)} | {exp:.0%} | "
                f"{sum(s['code_lines'] for s in ss) / max(code_cells, 1):.1f} | {sum(1 for s in ss if s['forward'])} lessons | "
                f"{sum(s['exercises'] for s in ss)} | {sum(s['minutes'] for s in ss):.0f} |")
    return "\n".join(rows)


def write_reading_times(root: Path, stats: dict[str, dict]) -> list[str]:
    "Set each lesson's Goals 'Reading time: about N min' to its measured time; the lessons changed."
    changed = []
    for name in stats:
        path = root / "nbs" / f"{name}.ipynb"
        nb = nbformat.read(path, as_version=4)
        goals = [c for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## Goals")]
        if not goals: continue
        for _ in range(3):  # the new number can change the cell's word count by nothing; a fixed point in 1-2 rounds
            new = READING.sub(f"Reading time: about {round(reading_minutes(nb))} min", goals[0].source)
            if new == goals[0].source: break
            goals[0].source = new
        else: raise RuntimeError(f"{name}: reading time does not settle")
        if nbformat.writes(nb) != nbformat.writes(nbformat.read(path, as_version=4)):
            nbformat.write(nb, path); changed.append(name)
    path = root / "nbs" / "course.ipynb"  # the syllabus's "reading" column: `| [name](name.ipynb) | ... | N min | M s |`
    if path.exists():
        nb = nbformat.read(path, as_version=4)
        for c in nb.cells:
            if c.cell_type == "markdown":
                c.source = re.sub(r"^(\| \d+ \| \[(\w+)\]\(\w+\.ipynb\) \|.*\| )\d+( min \| \d+ s \|)$",
                                  lambda m: f"{m[1]}{stats[m[2]]['minutes']:.0f}{m[3]}" if m[2] in stats else m[0],
                                  c.source, flags=re.M)
        if nbformat.writes(nb) != nbformat.writes(nbformat.read(path, as_version=4)):
            nbformat.write(nb, path); changed.append("course")
    return changed


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=HERE, help="the checkout to measure")
    ap.add_argument("--write", action="store_true", help="write each lesson's measured reading time into its Goals cell")
    args = ap.parse_args()
    tracks, stats = course(args.root)
    if args.write: print("reading time written:", write_reading_times(args.root, stats) or "none changed")
    for t, names in tracks.items():
        print(f"\n### {t} track\n\n" + table([n for n in names if n in stats], stats))
    print("\n### all lessons\n\n" + table(list(stats), stats))
