"""The course as a student runs it: every notebook top to bottom in a fresh kernel (Run All), then each
exercise's solution plugged in and its check run again.

Unlike `nbdev_test`, nothing is skipped: `#| slow` cells run too, so an optional section (vLLM, a GPU,
the full default run) must be off by a flag at its top and show its stored result instead. Each cell has a
hang guard (a widget that never answers fails in minutes, not at CI's limit); how long a notebook takes
is measured by `python tests/test_course.py` (the syllabus's times), never asserted.

Exercises follow one layout, checked here:
- a code cell starting `# Exercise N: ...` that the student fills (it runs as shipped: a stub returns None);
- a code cell starting `# Check N` that prints `Exercise N: not done yet` for the stub and asserts otherwise,
  printing `Exercise N: correct`;
- a markdown cell `<details><summary>Solution N</summary>` with the solution in a ```python block;
- "Try it" predictions: `<details><summary>What you should see</summary>` with the expected observation and a
  ```python block that asserts it (run here after the notebook, so a prediction that stops being true fails).
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"
NOTEBOOKS = sorted(p.name for p in NBS.glob("*.ipynb") if not p.name.startswith("_"))
# lesson notebooks end with "What you learned" and exercises (10_train, the trainer, too)
LESSONS = [n for n in NOTEBOOKS if re.match(r"\d\d[a-z]?_", n)]
CELL_TIMEOUT = 240  # s per cell: a hang guard only (the slowest lesson cell takes ~20 s on a 2-core CPU)

EXERCISE = re.compile(r"\A# Exercise (\d+):")
CHECK = re.compile(r"\A# Check (\d+)\b")
SOLUTION = re.compile(r"<details>\s*<summary>Solution (\d+)</summary>(.*?)</details>", re.S)
TRY = re.compile(r"<details>\s*<summary>What you should see</summary>(.*?)</details>", re.S)
CODE = re.compile(r"```python\n(.*?)```", re.S)


def tries(nb) -> list[str]:
    "The asserting code of every 'Try it' answer of a notebook."
    return [c[1] for cell in nb.cells if cell.cell_type == "markdown" for m in TRY.finditer(cell.source) for c in CODE.finditer(m[1])]


def exercises(nb) -> dict[int, dict]:
    "Exercise number -> {'exercise': cell index, 'check': cell index, 'solution': code} of a notebook."
    out: dict[int, dict] = {}
    for i, c in enumerate(nb.cells):
        if c.cell_type == "code":
            for key, pat in (("exercise", EXERCISE), ("check", CHECK)):
                if m := pat.match(c.source): out.setdefault(int(m[1]), {})[key] = i
        else:
            for m in SOLUTION.finditer(c.source):
                code = CODE.search(m[2])
                if code is None: raise ValueError(f"cell {i}: Solution {m[1]} has no ```python block")
                out.setdefault(int(m[1]), {})["solution"] = code[1]
    return out


def student_env(tmpdir: str | None = None) -> dict:
    "A student's kernel's environment: this checkout importable, offline, one thread per op, temp files in `tmpdir`."
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if tmpdir: env["TMPDIR"] = tmpdir
    env.setdefault("OMP_NUM_THREADS", "1")
    env.pop("JPY_PARENT_PID", None)
    return env


def run_as_student(name: str, with_solutions: bool = True) -> tuple[nbformat.NotebookNode, dict, float]:
    "Execute `nbs/<name>` in a fresh kernel (cwd nbs/), then each solution + its check again; (notebook, exercises, s)."
    from nbclient import NotebookClient
    nb = nbformat.read(NBS / name, as_version=4)
    ex = exercises(nb)
    if with_solutions:
        for k in sorted(ex):
            nb.cells.append(nbformat.v4.new_code_cell(ex[k]["solution"]))
            nb.cells.append(nbformat.v4.new_code_cell(nb.cells[ex[k]["check"]].source))
            ex[k]["solved_check"] = len(nb.cells) - 1
        nb.cells += [nbformat.v4.new_code_cell(code) for code in tries(nb)]
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3", allow_errors=False,
                            resources={"metadata": {"path": str(NBS)}})
    # the lessons' tempfile.mkdtemp() folders (runs, caches: GBs over the course) go to a folder removed afterwards:
    # left in /tmp they added up over test runs until a CI run failed with a full disk (a short path: sockets live there)
    tmp = tempfile.mkdtemp(prefix="evr1-nb-")
    t = time.perf_counter()
    try:
        client.execute(env=student_env(tmp))  # the client owns the kernel: shut down when the notebook is done
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return nb, ex, time.perf_counter() - t


def text_of(cell) -> str:
    "Everything a cell printed or displayed as text."
    parts = []
    for o in cell.get("outputs", []):
        if o.output_type == "stream": parts.append(o.text)
        elif "data" in o: parts.append(o.data.get("text/plain", "") + o.data.get("text/markdown", ""))
    return "".join(parts)


@pytest.mark.parametrize("name", LESSONS)
def test_lesson_has_summary_and_checked_exercises(name):
    nb = nbformat.read(NBS / name, as_version=4)
    heads = [c.source for c in nb.cells if c.cell_type == "markdown"]
    assert any(h.startswith("## What you learned") for h in heads), f"{name}: no '## What you learned' section"
    ex = exercises(nb)
    assert any("check" in e for e in ex.values()), f"{name}: no exercise with a check cell"
    assert tries(nb), f"{name}: no 'Try it' with an asserted answer"
    for k, e in ex.items():
        assert {"exercise", "check", "solution"} <= set(e), f"{name}: exercise {k} has only {sorted(e)}"
        assert e["exercise"] < e["check"], f"{name}: Check {k} comes before Exercise {k}"


def test_exercises_parser_sees_a_missing_solution():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("# Exercise 1: x\ndef f(): return None"),
                                         nbformat.v4.new_code_cell("# Check 1\nprint(f())")])
    assert exercises(nb) == {1: {"exercise": 0, "check": 1}}


def test_syllabus_lists_every_lesson_with_its_time():
    "course.ipynb's table names every lesson and the trainer, each with a linked page and a measured time ('N s')."
    table = "".join(c.source for c in nbformat.read(NBS / "course.ipynb", as_version=4).cells if c.cell_type == "markdown")
    rows = {m[1]: m[2] for m in re.finditer(r"^\|[^|]*\| \[(\w+)\]\(\1\.ipynb\) \|.*\| (\d+ s) \|$", table, re.M)}
    missing = [n for n in LESSONS if n.removesuffix(".ipynb") not in rows]
    assert not missing, f"course.ipynb: no syllabus row (with a time) for {missing}"


def test_readme_maps_every_notebook_to_its_module():
    "The README's notebook map has a row per notebook that exports a module, naming that module (09c was missing once)."
    rows = dict(re.findall(r"^\| `(\w+)` \| `(\w+)` \|", (ROOT / "README.md").read_text(), re.M))
    for name in NOTEBOOKS:
        exp = re.search(r"#\|\s*default_exp\s+(\w+)", (NBS / name).read_text())
        if exp: assert rows.get(name.removesuffix(".ipynb")) == exp[1], f"README.md: the notebook map lacks `{name}` -> `{exp[1]}`"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_as_a_student_would(name):
    nb, ex, _ = run_as_student(name)
    for k, e in ex.items():
        shipped, solved = text_of(nb.cells[e["check"]]), text_of(nb.cells[e["solved_check"]])
        assert f"Exercise {k}: not done yet" in shipped, f"{name}: Check {k} on the shipped stub printed {shipped!r}"
        assert f"Exercise {k}: correct" in solved, f"{name}: Check {k} with Solution {k} printed {solved!r}"


if __name__ == "__main__":  # the measured time per notebook, for the syllabus: python tests/test_course.py [NAME ...]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    for name in sys.argv[1:] or NOTEBOOKS:
        _, _, s = run_as_student(name, with_solutions=False)
        print(f"{name}\t{s:.1f} s", flush=True)
