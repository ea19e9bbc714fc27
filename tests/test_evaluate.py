"""Evaluator checks the notebook cannot make: every shared benchmark file through the oracle, CLI runs in
subprocesses (kill and resume, manifest refusal, the synthetic benchmark end to end with the tiny model)."""
import json, os, shutil, signal, subprocess, sys, time
from pathlib import Path

import pytest

from easyvideor1.evaluate import (BENCHMARKS, NOT_SUPPORTED, AnnotationError, AnnotationWarning, ManifestMismatch, item_prompt,
                                  load_annotations, load_benchmark, main, oracle_check, oracle_scores, read_results, read_rows, recognise)

ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = Path(os.environ.get("EASYVIDEOR1_BENCHMARKS", ROOT / "tests" / "fixtures" / "benchmarks"))  # samples of the real files
FILES = sorted(BENCH_DIR.glob("*.json"))
DEFECTS = ROOT / "tests" / "fixtures" / "benchmarks_defects"  # our own rows with the real files' defects
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


def test_shared_benchmarks_present():
    assert len(FILES) >= 23, f"expected the shared annotation samples in {BENCH_DIR}, found {len(FILES)}"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_oracle_scores_100_percent(path):
    assert load_annotations(path)[2].counts() == {"rows": 24, "loaded": 24, "skipped": 0, "renamed": 0}  # the samples are clean
    scores = oracle_check(path, strict=True)
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
    two = item_prompt(next(it for it in items if len(it.options) == 2))
    assert "(A or B)" in two and "C." not in two
    _, items = load_benchmark(BENCH_DIR / "videommmu.json")  # 10 options
    assert "(A, B, C, D, E, F, G, H, I or J)" in item_prompt(next(it for it in items if len(it.options) == 10))
    _, items = load_benchmark(BENCH_DIR / "vsibench.json")  # 2, 3 and 4 options
    for it in items:
        if it.options: assert f"({', '.join(o[0] for o in sorted(it.options)[:-1])} or {sorted(it.options)[-1][0]})" in item_prompt(it)


def test_broken_annotation_is_skipped_naming_file_and_line(tmp_path):
    recs = json.loads((BENCH_DIR / "lvbench.json").read_text())
    recs[3]["solution"] = "<answer>Z</answer>"
    bad = tmp_path / "lvbench.json"
    bad.write_text(json.dumps(recs, indent=2))
    line = read_rows(bad)[3][0]
    with pytest.warns(AnnotationWarning, match="1 of 24 rows skipped"):
        _, items, rep = load_annotations(bad)
    assert len(items) == 23 and rep.skipped == [{"where": f"lvbench.json:{line}", "reason": "answer 'Z' is not one of the option letters ['A', 'B', 'C', 'D']"}]
    with pytest.raises(AnnotationError, match=rf"lvbench.json:{line}: answer 'Z'"):
        load_benchmark(bad, strict=True)


EXPECTED = {"livesports3k_qa": {"rows": 6, "loaded": 6, "skipped": 0, "renamed": 2},
            "longvideoreason": {"rows": 8, "loaded": 5, "skipped": 3, "renamed": 0},
            "videomathqa": {"rows": 6, "loaded": 5, "skipped": 1, "renamed": 1}}


@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_defective_files_load_with_counts_and_one_warning_per_defect(stem):
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bench, items, rep = load_annotations(DEFECTS / f"{stem}.json")
    assert rep.counts() == EXPECTED[stem]
    kinds = [str(w.message).split(": ", 1)[1].split(" (")[0] for w in caught if issubclass(w.category, AnnotationWarning)]
    assert len(kinds) == (rep.counts()["skipped"] > 0) + (rep.counts()["renamed"] > 0), kinds
    if rep.renamed: assert any(f"{len(rep.renamed)} repeated problem_id" in k for k in kinds)
    assert len({it.item_id for it in items}) == len(items)
    lines = {f"{stem}.json:{line}" for line, _ in read_rows(DEFECTS / f"{stem}.json")}
    assert {s["where"] for s in rep.skipped} <= lines and all(s["reason"] for s in rep.skipped)
    assert {it.source for it in items} | {s["where"] for s in rep.skipped} == lines  # every row loaded or skipped
    assert {k: v for k, v in oracle_scores(bench, items).items() if v != 1.0} == {}
    with pytest.raises(AnnotationError, match=rf"{stem}.json:\d+: "):
        load_annotations(DEFECTS / f"{stem}.json", strict=True)  # today's refusal, for those who want it


def test_defects_are_read_the_way_they_were_meant():
    _, items, rep = load_annotations(DEFECTS / "longvideoreason.json")
    by = {it.item_id: it for it in items}
    assert by["431"].options[0] == "A. Observing fish in an aquarium (0:03:00-0:03:10)" and by["431"].answer == "D"  # shuffled
    assert by["431"].options[3] == "D. Playing in an arcade (0:04:50-0:05:00)"
    assert len(by["502"].options) == 4  # seven entries, each option written twice over
    assert (by["504"].answer, by["505"].answer) == ("B", "C")  # tagless and unclosed solutions
    assert "(A, B, C or D)" in item_prompt(by["431"])
    reasons = [s["reason"] for s in rep.skipped]
    assert "option letter 'B' has two texts" in reasons[0] and reasons[1] == "missing field 'problem_type'" and "astrology" in reasons[2]
    _, items, rep = load_annotations(DEFECTS / "livesports3k_qa.json")
    assert [it.item_id for it in items][:4] == ["zQ9xT2kLmNa_e2_q1", "zQ9xT2kLmNa_e2_q1#2", "zQ9xT2kLmNa_e3_q1", "zQ9xT2kLmNa_e2_q1#3"]
    assert rep.renamed[0] == {"where": "livesports3k_qa.json:18", "from": "zQ9xT2kLmNa_e2_q1", "to": "zQ9xT2kLmNa_e2_q1#2",
                              "first": "livesports3k_qa.json:2"}


def test_renamed_ids_never_collide_with_ids_in_the_file(tmp_path):
    rec = json.loads((DEFECTS / "livesports3k_qa.json").read_text())[0]
    f = tmp_path / "livesports3k_qa.jsonl"
    f.write_text("".join(json.dumps({**rec, "problem_id": i}) + "\n" for i in ["x", "x", "x#2", "x"]))
    ids = [it.item_id for it in load_benchmark(f)[1]]
    assert ids == ["x", "x#3", "x#2", "x#4"] and ids == [it.item_id for it in load_benchmark(f)[1]]  # stable


def test_manifest_load_report_and_summary_show_the_counts(tmp_path, capsys):
    run = tmp_path / "run"
    main(["run", "--engine", "oracle", "--bench", str(DEFECTS / "longvideoreason.json"), "--out", str(run), "--no-progress"])
    s = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (s["n"], s["loaded"], s["skipped"], s["renamed"]) == (5, 5, 3, 0)
    assert json.loads((run / "longvideoreason.manifest.json").read_text())["annotation_load"] == EXPECTED["longvideoreason"]
    load = json.loads((run / "longvideoreason.load.json").read_text())
    assert [x["where"] for x in load["skipped"]] == ["longvideoreason.json:35", "longvideoreason.json:80", "longvideoreason.json:94"]
    main(["report", str(run), "--out", str(tmp_path / "report")])
    md = (tmp_path / "report" / "summary.md").read_text()
    assert "| &nbsp;&nbsp;rows loaded / skipped / renamed | 5 / 3 / 0 |" in md
    assert "| run | longvideoreason | longvideoreason.json:80 | missing field 'problem_type' |" in md
    csv = (tmp_path / "report" / "summary.csv").read_text().splitlines()
    assert csv[0].endswith("n,failed,loaded,skipped,renamed") and csv[1].endswith(",5,5,5,3,0")
    with pytest.raises(AnnotationError, match=r"longvideoreason.json:17: repeated option letters \[.A., .B., .C., .B., .A., .D., .D.\]"):
        main(["run", "--engine", "oracle", "--strict", "--bench", str(DEFECTS / "longvideoreason.json"), "--out", str(tmp_path / "r2"), "--no-progress"])
    main(["oracle", str(DEFECTS / "videomathqa.json")])
    o = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (o["accuracy"], o["loaded"], o["skipped"], o["renamed"]) == (1.0, 5, 1, 1)


def test_missing_videos_are_failures_in_the_denominator(tmp_path, capsys):
    # the sample annotations come without their videos: every item fails to load, and is counted
    main(["run", "--engine", "oracle", "--bench", str(BENCH_DIR / "lvbench.json"), "--out", str(tmp_path / "run"), "--no-progress"])
    s = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (s["n"], s["failed"], s["accuracy"]) == (24, 24, 0.0)
    rows = read_results(tmp_path / "run" / "lvbench.jsonl")
    assert all(row["error"].startswith("VideoDecodeError") and "file not found" in row["error"] for row in rows), rows[0]["error"]


def _text_suite(path, n):
    "A training-format benchmark of text-only multiple-choice items (no media: the pipeline alone is tested)."
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"q{i}", "problem": f"Question {i}?", "answer": "AB"[i % 2], "problem_type": "multiple choice",
                                "data_type": "text", "videos": [], "options": ["A. yes", "B. no"], "task": f"t{i % 3}"}) + "\n")
    return path


def _wait_for_lines(path, k, proc, limit=120):
    t0 = time.time()
    while time.time() - t0 < limit and proc.poll() is None:
        if path.exists() and path.read_text().count("\n") >= k: return
        time.sleep(0.05)
    raise AssertionError(f"{path}: fewer than {k} results after {limit} s (exit code {proc.poll()})")


def test_kill_and_resume_loses_and_duplicates_nothing(tmp_path):
    bench, out = _text_suite(tmp_path / "synthetic.jsonl", 40), tmp_path / "run"
    args = [sys.executable, "-m", "easyvideor1.evaluate", "run", "--engine", "oracle", "--oracle-delay", "0.05",
            "--batch-size", "1", "--bench", str(bench), "--out", str(out), "--no-progress"]
    proc = subprocess.Popen(args, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    res = out / "synthetic.jsonl"
    _wait_for_lines(res, 8, proc)
    proc.send_signal(signal.SIGKILL); proc.wait()
    before = read_results(res)
    assert 8 <= len(before) < 40, f"the kill did not land mid-run ({len(before)} results)"
    with open(res, "a") as f: f.write('{"id": "q39", "benchm')  # as if killed mid-write as well
    r = subprocess.run(args, env=ENV, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    after = read_results(res)
    ids = [row["id"] for row in after]
    assert len(ids) == len(set(ids)) == 40, (len(ids), len(set(ids)))
    assert set(ids) == {f"q{i}" for i in range(40)}
    assert after[:len(before)] == before  # finished work untouched
    s = next(json.loads(l) for l in reversed(r.stdout.splitlines()) if l.startswith('{"benchmark"'))  # vLLM logs to stdout too
    assert (s["n"], s["failed"], s["accuracy"]) == (40, 0, 1.0)


def test_resume_under_another_manifest_is_refused(tmp_path):
    bench, out = _text_suite(tmp_path / "synthetic.jsonl", 4), tmp_path / "run"
    base = ["run", "--engine", "oracle", "--bench", str(bench), "--out", str(out), "--no-progress"]
    main(base)
    with pytest.raises(ManifestMismatch, match="seed"): main(base + ["--seed", "1"])


def test_synthetic_benchmark_end_to_end_with_the_tiny_model(tmp_path):
    "The CLI on CPU: synthetic suite, tiny model folder, frame cache, HF engine; then the report CLI."
    from easyvideor1.models import save_vlm
    from easyvideor1.synthetic import make_suite
    suite = make_suite(tmp_path / "suite", n_per_task=0, n_test=1, seed=0, tasks=["direction", "count", "appear", "ground"])
    model = save_vlm(tmp_path / "tiny", "qwen2_5_vl", "tiny", seed=0)
    run = tmp_path / "runs" / "tiny"
    r = subprocess.run([sys.executable, "-m", "easyvideor1.evaluate", "run", "--model", str(model), "--bench", str(suite / "test.jsonl"),
                        "--out", str(run), "--cache", str(tmp_path / "cache"), "--max-new-tokens", "4", "--max-frames", "4", "--no-progress"],
                       env=ENV, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    s = next(json.loads(l) for l in reversed(r.stdout.splitlines()) if l.startswith('{"benchmark"'))  # vLLM logs to stdout too
    assert (s["benchmark"], s["n"], s["failed"]) == ("Synthetic", 4, 0)
    assert set(s["categories"]) == {"direction", "count", "appear", "ground"}
    man = json.loads((run / "test.manifest.json").read_text())
    assert man["model"] == str(model.resolve()) and len(man["weights_digest"]) == 64
    assert man["video_contract"]["max_frames"] == 4 and man["sampling"]["max_new_tokens"] == 4 and man["versions"]["torch"]
    assert len(list((tmp_path / "cache" / "entries").rglob("*.npy"))) == 4  # frames went through the cache
    rows = read_results(run / "test.jsonl")
    assert sorted(x["id"] for x in rows) == sorted(json.loads(l)["problem_id"] for l in (suite / "test.jsonl").read_text().splitlines())
    main(["run", "--engine", "oracle", "--bench", str(suite / "test.jsonl"), "--out", str(tmp_path / "runs" / "oracle"), "--no-progress"])
    main(["report", str(run), str(tmp_path / "runs" / "oracle"), "--out", str(tmp_path / "report")])
    md = (tmp_path / "report" / "summary.md").read_text()
    assert "| benchmark | tiny | oracle |" in md and "| **Synthetic** (test) accuracy |" in md and "| 100.0 |" in md
    assert (tmp_path / "report" / "scores.png").stat().st_size > 1000
    assert (tmp_path / "report" / "summary.csv").read_text().startswith("run,benchmark,file,category,metric,value,n,failed")


def test_every_path_unwraps_a_ground_truth_as_the_reward_router_does(tmp_path):
    "A solution with several <answer> tags: data, the evaluator's readers and the reward router agree (the last tag)."
    from easyvideor1.data import read_samples
    from easyvideor1.evaluate import BENCHMARKS, parse_solution, read_training_format
    from easyvideor1.rewards import compute_score, extract_ground_truth
    sol = "<answer>3</answer> was a first guess; recounting: <answer>5</answer>"
    row = {"problem_id": "q0", "problem": "<video>How many?", "problem_type": "numerical", "solution": sol,
           "data_type": "video", "path": "a.mp4"}
    (tmp_path / "b.json").write_text(json.dumps([row]))
    training = {**row, "answer": sol, "videos": ["a.mp4"]}
    got = {"reward router": extract_ground_truth(sol), "data.read_samples": read_samples(tmp_path / "b.json")[0].answer,
           "evaluate.parse_solution": parse_solution(sol),
           "evaluate benchmark record": BENCHMARKS["MVBench"].item(row, "b.json:1").answer,
           "evaluate training record": read_training_format(BENCHMARKS["MVBench"], training, "t.jsonl:1").answer}
    assert got == dict.fromkeys(got, "5"), got
    assert compute_score("<answer>5</answer>", sol, "numerical")["accuracy"] == 1.0


def test_qwen3_5_folder_through_the_evaluator(tmp_path, capsys):
    "A saved Qwen3.5 folder: the CLI reads its family (factor 32 contract), the HF engine answers every item."
    from easyvideor1.models import save_vlm
    from easyvideor1.synthetic import make_suite
    suite = make_suite(tmp_path / "suite", n_per_task=0, n_test=1, seed=0, tasks=["direction", "ground"])
    model = save_vlm(tmp_path / "tiny35", "qwen3_5", "tiny", seed=0)
    run = tmp_path / "runs" / "tiny35"
    assert main(["run", "--model", str(model), "--bench", str(suite / "test.jsonl"), "--out", str(run), "--device", "cpu",
                 "--max-new-tokens", "4", "--max-frames", "4", "--no-progress"]) in (0, None)
    out = capsys.readouterr().out
    s = next(json.loads(l) for l in reversed(out.splitlines()) if l.startswith('{"benchmark"'))
    assert (s["benchmark"], s["n"], s["failed"]) == ("Synthetic", 2, 0)
    man = json.loads((run / "test.manifest.json").read_text())
    assert man["video_contract"]["factor"] == 32 and man["image_contract"]["factor"] == 32
