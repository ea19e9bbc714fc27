"""Evaluator checks the notebook cannot make: every shared benchmark file through the oracle, CLI runs in
subprocesses (kill and resume, manifest refusal, the synthetic benchmark end to end with the tiny model)."""
import json, os, shutil, signal, subprocess, sys, time
from pathlib import Path

import pytest

from easyvideor1.evaluate import (BENCHMARKS, NOT_SUPPORTED, AnnotationError, build_prompt, load_benchmark, oracle_check,
                                  read_results, recognise)

ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = Path(os.environ.get("EASYVIDEOR1_BENCHMARKS", ROOT.parent / "shared" / "benchmarks"))
FILES = sorted(BENCH_DIR.glob("*.json"))
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


def test_shared_benchmarks_present():
    assert len(FILES) >= 23, f"expected the shared annotation samples in {BENCH_DIR}, found {len(FILES)}"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_oracle_scores_100_percent(path):
    scores = oracle_check(path)
    assert scores, f"{path.name}: no metrics"
    assert {k: v for k, v in scores.items() if v != 1.0} == {}, f"{path.name}: ground truth does not score 100%"


def test_every_registered_benchmark_has_a_file():
    seen = {load_benchmark(p)[0].name for p in FILES}
    assert set(BENCHMARKS) - seen == {"Synthetic"}
    assert {"TempCompass", "ODV-Bench"} <= set(NOT_SUPPORTED)


def test_recognised_by_content_without_the_file_name(tmp_path):
    for p in FILES:
        anon = tmp_path / f"anon_{p.stem[::-1]}.json"
        shutil.copy(p, anon)
        assert recognise(anon).name == recognise(p).name, p.name


def test_prompts_name_the_real_option_letters():
    _, items = load_benchmark(BENCH_DIR / "videomathqa.json")  # mostly 2 options
    two = next(it for it in items if len(it.options) == 2)
    assert "(A or B)" in build_prompt(two) and "C" not in build_prompt(two).split("Options:")[1].split("(A or B)")[1]
    _, items = load_benchmark(BENCH_DIR / "videommmu.json")  # 10 options
    ten = next(it for it in items if len(it.options) == 10)
    assert "(A, B, C, D, E, F, G, H, I, or J)" in build_prompt(ten)


def test_broken_annotation_names_the_record(tmp_path):
    recs = json.loads((BENCH_DIR / "lvbench.json").read_text())
    recs[3]["solution"] = "<answer>Z</answer>"
    bad = tmp_path / "lvbench.json"
    bad.write_text(json.dumps(recs))
    with pytest.raises(AnnotationError, match=r"lvbench.json#3.*'Z'"):
        load_benchmark(bad)


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "easyvideor1.evaluate", *args], env=ENV, capture_output=True, text=True, **kw)


def test_missing_videos_are_failures_in_the_denominator(tmp_path):
    # the sample annotations come without their videos: every item fails to load, and is counted
    r = _cli("run", "--engine", "oracle", "--bench", str(BENCH_DIR / "lvbench.json"), "--out", str(tmp_path / "run"), "--no-progress")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout.strip().splitlines()[-1])
    assert (s["n"], s["failed"], s["accuracy"]) == (24, 24, 0.0)
    rows = read_results(tmp_path / "run" / "lvbench.jsonl")
    assert all(row["error"].startswith(("FileNotFoundError", "VideoDecodeError")) for row in rows), rows[0]["error"]
