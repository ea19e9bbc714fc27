"""The course's two tracks (nbs/tracks.json): a lesson's code cells import only modules taught earlier in its track.

The core track is read in order; the advanced track comes after it, so an advanced lesson may import all of core
and the advanced lessons before it. Imports are read with `ast` (no notebook runs here). A lesson that shows how a
later module uses its code names it as a string, `report.trainer_code("step.load_prompts")` (09d_report), which reads
the source without importing the module; that one import of the display tool is allowed anywhere.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"
TRACKS = json.loads((NBS / "tracks.json").read_text())
ORDER = TRACKS["core"] + TRACKS["advanced"]  # the student's path: core in order, then advanced
DISPLAY_TOOL = ("report", {"trainer_code", "TrainerCode"})  # reads source text; imports nothing of the package

# (lesson, module it imports before its lesson) -> why it stays for now. Only shrinks: an entry no longer
# needed fails test_known_forward_is_still_needed, so remove it.
KNOWN_FORWARD = {
    ("06_grpo", "rewards"): "the bandit's exported mc_reward scores with the real multiple-choice reward (04_rewards, next lesson)",
    ("08_rollout", "lora"): "the exported weight push merges LoRA adapters (09b_lora)",
    ("08_rollout", "parallel"): "the exported rollout gathers groups across ranks (09a_parallel)",
    ("08_rollout", "prefix"): "the exported rollout scores old log-probs with the shared-prefix pass (09_prefix)",
    ("09g_step", "config"): "step.py reads TrainConfig and its schedules (09e_config) until the step takes a loss config",
    ("09g_step", "evaluate"): "step.py scores extras with evaluate.score_extras (11_evaluate)",
    ("09g_step", "lora"): "step.py builds the policy with LoRA and the frozen tower (09b_lora)",
    ("09g_step", "parallel"): "step.py shards with FSDP2 and pads micro-batches across ranks (09a_parallel)",
    ("09g_step", "prefix"): "step.py's default log-prob pass is PrefixLogp (09_prefix), the trainer's faster path",
    ("09g_step", "warmstart"): "step.py runs the warm start's SFT update (09c_warmstart)",
    ("10_train", "checkpoint"): "train.py saves and resumes runs (09f_checkpoint)",
    ("10_train", "config"): "train.py parses TrainConfig (09e_config)",
    ("10_train", "evaluate"): "train.py evaluates held-out splits (11_evaluate, the lesson after)",
    ("10_train", "parallel"): "train.py launches ranks (09a_parallel)",
    ("10_train", "report"): "train.py writes metrics and the final table (09d_report)",
    ("10_train", "warmstart"): "train.py runs the format warm start (09c_warmstart)",
    ("11_evaluate", "validate"): "the exported evaluator checks benchmark rows with validate_rows (05a_validate)",
}


def module_lessons() -> dict[str, str]:
    "Module name -> the lesson notebook (stem) that exports it (`#| default_exp`)."
    out = {}
    for p in NBS.glob("*.ipynb"):
        if m := re.search(r"#\|\s*default_exp\s+(\w+)", p.read_text()): out[m[1]] = p.stem
    return out


def package_imports(source: str) -> list[tuple[str, set[str]]]:
    "(module, imported names) for each `easyvideor1.<module>` a cell's code imports (magics and shell lines skipped)."
    code = "\n".join(l for l in source.splitlines() if not l.lstrip().startswith(("%", "!")))
    out = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] != "easyvideor1": continue
            if len(parts) > 1: out.append((parts[1], {a.name for a in node.names}))
            else: out += [(a.name, set()) for a in node.names]  # from easyvideor1 import report
        elif isinstance(node, ast.Import):
            out += [(a.name.split(".")[1], set()) for a in node.names if a.name.startswith("easyvideor1.")]
    return out


def forward_imports(lesson: str, lessons: dict[str, str] | None = None) -> dict[str, list[int]]:
    "Module -> code cells of `lesson` that import it although its lesson comes later on the student's path."
    lessons = lessons or module_lessons()
    nb = nbformat.read(NBS / f"{lesson}.ipynb", as_version=4)
    out: dict[str, list[int]] = {}
    for i, c in enumerate(nb.cells):
        if c.cell_type != "code": continue
        for mod, names in package_imports(c.source):
            if mod == DISPLAY_TOOL[0] and names and names <= DISPLAY_TOOL[1]: continue
            if mod in lessons and ORDER.index(lessons[mod]) > ORDER.index(lesson): out.setdefault(mod, []).append(i)
    return out


def test_tracks_list_every_lesson_once():
    lessons = sorted(p.stem for p in NBS.glob("*.ipynb") if re.match(r"\d\d[a-z]?_", p.name))
    assert sorted(ORDER) == lessons, f"nbs/tracks.json: lists {sorted(ORDER)}, the lessons are {lessons}"


def test_package_imports_are_parsed():
    src = "import os\nfrom easyvideor1.step import a, b\nfrom easyvideor1 import report as r\nimport easyvideor1.train\n%time x = 1"
    assert package_imports(src) == [("step", {"a", "b"}), ("report", set()), ("train", set())]


@pytest.mark.parametrize("lesson", ORDER)
def test_lesson_imports_only_earlier_lessons(lesson):
    lessons = module_lessons()
    bad = {m: cells for m, cells in forward_imports(lesson, lessons).items() if (lesson, m) not in KNOWN_FORWARD}
    assert not bad, (f"nbs/{lesson}.ipynb imports modules taught later on its track ({{module: cells}}): {bad}. "
                     f"Show later code with report.trainer_code('module.name') instead of importing it.")


def test_known_forward_is_still_needed():
    lessons = module_lessons()
    stale = [k for k in KNOWN_FORWARD if k[1] not in forward_imports(k[0], lessons)]
    assert not stale, f"KNOWN_FORWARD entries no longer needed, remove them: {stale}"


def course_stats():
    "bench/course_stats.py as a module (the reading-time rule lives there, beside the table it prints)."
    import importlib.util
    spec = importlib.util.spec_from_file_location("course_stats", ROOT / "bench" / "course_stats.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# lessons that open without a Goals cell for now (only shrinks): their notebooks have another owner this round
NO_GOALS_YET: dict[str, str] = {}


@pytest.mark.parametrize("lesson", ORDER)
def test_lesson_opens_with_goals_and_an_honest_reading_time(lesson):
    "The cell after the title is '## Goals' with 'Reading time: about N min', N within 25% of 200 words + 10 code lines a minute."
    nb = nbformat.read(NBS / f"{lesson}.ipynb", as_version=4)
    has = nb.cells[1].cell_type == "markdown" and nb.cells[1].source.startswith("## Goals")
    if lesson in NO_GOALS_YET:
        assert not has, f"{lesson} has its Goals cell now: remove it from NO_GOALS_YET"
        return
    assert has, f"nbs/{lesson}.ipynb: the cell after the title is not '## Goals'"
    m = course_stats().READING.search(nb.cells[1].source)
    assert m, f"nbs/{lesson}.ipynb: the Goals cell gives no 'Reading time: about N min'"
    measured = course_stats().reading_minutes(nb)
    assert abs(int(m[1]) - measured) <= 0.25 * measured, (
        f"nbs/{lesson}.ipynb: reading time says {m[1]} min, measured {measured:.0f}: run bench/course_stats.py --write")


def test_reading_time_counts_prose_and_code():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(" ".join(["word"] * 400) + "\n```python\na\nb\n```"),
                                         nbformat.v4.new_code_cell("x = 1\n\ny = 2")])
    assert course_stats().reading_minutes(nb) == pytest.approx(400 / 200 + 4 / 10)


OUTSIDE = re.compile(r"(?<![\w.])(?:\.\./)+[\w./-]+|(?<![\w/])/(?:work|home|root|Users|tmp)/[\w./-]+|\bLEARNING\.md\b|\bshared/(?:STYLE|DESIGN|PAPER)\.md\b")


GENERATED = {"runs", "build"}  # folders in the checkout that the course's commands create


def outside_refs(text: str, base: Path) -> list[str]:
    "Paths in `text` that leave the repository: relative ones resolved from `base`, machine paths, the team's own files."
    out = []
    for m in OUTSIDE.finditer(text):
        p = m[0]
        if p.startswith("../") and (q := (base / p).resolve()).is_relative_to(ROOT) and q != ROOT:
            top = q.relative_to(ROOT).parts[0]
            if (ROOT / top).exists() or top in GENERATED: continue
        out.append(p)
    return out


def test_outside_refs_are_found():
    assert outside_refs("see `LEARNING.md` and ../shared/DESIGN.md, ../configs/a.yaml, /work/main/x", NBS) == [
        "LEARNING.md", "../shared/DESIGN.md", "/work/main/x"]
    assert outside_refs("../../elsewhere/x.md", NBS) == ["../../elsewhere/x.md"]


@pytest.mark.parametrize("name", sorted(p.name for p in NBS.glob("*.ipynb")))
def test_no_notebook_refers_to_a_file_outside_the_repository(name):
    "What a notebook says (markdown and code; outputs are what ran, e.g. a warning's site-packages path) stays in the repo."
    nb = nbformat.read(NBS / name, as_version=4)
    bad = {i: refs for i, c in enumerate(nb.cells) if (refs := outside_refs(c.source, NBS))}
    assert not bad, f"nbs/{name} refers to files outside the repository (cell: paths): {bad}"


COMMIT = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")  # a short or full hash: hex with a digit and a letter


def test_quickstart_cites_no_commit():
    "The Quickstart (index.ipynb, so README.md) dates its measurements; a commit hash means nothing to a reader of a copy."
    quick = [c.source for c in nbformat.read(NBS / "index.ipynb", as_version=4).cells if c.source.startswith("## Quickstart")]
    assert quick, "index.ipynb: no '## Quickstart' cell"
    readme = (ROOT / "README.md").read_text()
    readme = readme[readme.index("## Quickstart"):].split("\n## ")[0]
    for where, text in (("index.ipynb", quick[0]), ("README.md", readme)):
        assert not COMMIT.findall(text), f"{where}'s Quickstart cites commits {COMMIT.findall(text)}"
    assert COMMIT.findall("measured on b393015 and ea36724, 8.2 s") == ["b393015", "ea36724"]


# core lessons with fewer than 3 exercises for now (only shrinks): their notebooks have another owner this round
FEWER_EXERCISES_YET: dict[str, str] = {}


@pytest.mark.parametrize("lesson", TRACKS["core"])
def test_core_lesson_has_three_exercises(lesson):
    "Each core lesson carries >= 3 checked exercises (tests/test_course.py runs their solutions), one of them 'predict, run, compare'."
    nb = nbformat.read(NBS / f"{lesson}.ipynb", as_version=4)
    n = sum(1 for c in nb.cells if c.cell_type == "code" and re.match(r"# Exercise \d+:", c.source))
    start = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and c.source.startswith("## Exercises")), len(nb.cells))
    predicts = any(c.cell_type == "markdown" and re.search(r"\bpredict", c.source, re.I) for c in nb.cells[start:])
    if lesson in FEWER_EXERCISES_YET:
        assert n < 3, f"{lesson} has {n} exercises now: remove it from FEWER_EXERCISES_YET"
        return
    assert n >= 3, f"nbs/{lesson}.ipynb has {n} exercises; a core lesson carries at least 3"
    assert predicts, f"nbs/{lesson}.ipynb: no exercise asks for a prediction (predict, run, compare)"
