"""Issue 18's probes, each an input that failed before: the evaluator never hangs and reports failures, code rewards run
confined and cannot forge a pass, preprocess survives huge images, one clip window for every tool, rows validated up front."""
import json, os, signal, socket, subprocess, sys, threading, time
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

from easyvideor1.data import Media
from easyvideor1.evaluate import (EvalItem, OracleEngine, PipelineError, ResultsFile, drop_failed, evaluate_file,
                                  main as evaluate_main, read_results, read_records, AnnotationError, run_pipeline, to_sample)

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


def in_thread(fn, limit=60):
    "Run `fn` with a deadline: a regression that hangs fails here instead of hanging the suite."
    box = {}
    def target():
        try: box["out"] = fn()
        except BaseException as e: box["err"] = e
    t = threading.Thread(target=target, daemon=True); t.start(); t.join(limit)
    assert not t.is_alive(), f"still running after {limit} s (hang)"
    if "err" in box: raise box["err"]
    return box["out"]


def _item(i, **kw):
    return EvalItem("Synthetic", f"q{i}", kw.pop("problem_type", "multiple choice"), kw.pop("question", f"Question {i}?"), "A",
                    ["A. yes", "B. no"], **kw)


def _no_media(it): return Media()


# 1. nothing hangs: a prompt that cannot be built is a failed item, the good items of its batch are written
@pytest.mark.parametrize("bad", [dict(question="What is <image> here?"), dict(question="   "), dict(problem_type="astrology")],
                         ids=["literal-image", "empty-question", "unknown-type"])
@pytest.mark.parametrize("engine", ["sync", "async"])
def test_unbuildable_prompt_fails_alone(tmp_path, bad, engine):
    items = [_item(0), _item(1, **bad), _item(2), _item(3)]
    eng = OracleEngine()
    if engine == "async":
        class Async(OracleEngine):  # the engines' `generate` as a coroutine, as vLLM's AsyncLLM engine has it
            async def agenerate(self, prompts, sampling): return self.generate(prompts, sampling)
        eng = Async()
    with ResultsFile(tmp_path / "r.jsonl", {}) as rf:
        rows = in_thread(lambda: run_pipeline(items, eng, rf, _no_media, batch_size=4, progress=False))
    by = {r["id"]: r for r in rows}
    assert set(by) == {"q0", "q1", "q2", "q3"}
    assert by["q1"]["error"] and all(by[q]["error"] is None and by[q]["accuracy"] == 1.0 for q in ("q0", "q2", "q3"))


def test_engine_thread_crash_is_reported_not_hung(tmp_path):
    class Boom(OracleEngine):
        def generate(self, prompts, sampling): raise SystemExit("engine died")  # escapes the per-item handler
    with ResultsFile(tmp_path / "r.jsonl", {}) as rf:
        with pytest.raises(PipelineError, match="eval-engine raised SystemExit"):
            in_thread(lambda: run_pipeline([_item(0), _item(1)], Boom(), rf, _no_media, progress=False))


def test_stuck_engine_hits_the_stall_deadline(tmp_path):
    class Stuck(OracleEngine):
        def generate(self, prompts, sampling): time.sleep(3600)
    with ResultsFile(tmp_path / "r.jsonl", {}) as rf:
        with pytest.raises(PipelineError, match="no item finished for 1.0 s"):
            in_thread(lambda: run_pipeline([_item(0)], Stuck(), rf, _no_media, stall_timeout=1.0, progress=False))


# 2. failures: transient errors retried once, --retry-failed on resume, non-zero exit with the count and the reasons
def test_transient_load_timeout_retried_once(tmp_path):
    from easyvideor1.video import VideoDecodeTimeout
    calls = {}
    def flaky(it):
        calls[it.item_id] = calls.get(it.item_id, 0) + 1
        if calls[it.item_id] == 1: raise VideoDecodeTimeout("v.mp4", "decode did not finish")
        return Media()
    with ResultsFile(tmp_path / "r.jsonl", {}) as rf:
        rows = in_thread(lambda: run_pipeline([_item(0)], OracleEngine(), rf, flaky, progress=False))
    assert calls == {"q0": 2} and rows[0]["error"] is None
    calls.clear()
    with ResultsFile(tmp_path / "r2.jsonl", {}) as rf:
        rows = in_thread(lambda: run_pipeline([_item(0)], OracleEngine(), rf, flaky, retries=0, progress=False))
    assert rows[0]["error"].startswith("VideoDecodeTimeout")


def _suite(path, n, bad=(), empty=()):
    "`n` multiple-choice rows; `bad` ones too long to prompt (validation fails them), `empty` ones without a question (the loader skips them)."
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for i in range(n):
            q = "   " if i in empty else "Q" * 60_000 if i in bad else f"Question {i}?"
            f.write(json.dumps({"id": f"q{i}", "problem": q, "answer": "A",
                                "problem_type": "multiple choice", "data_type": "text", "videos": [], "options": ["A. yes", "B. no"]}) + "\n")
    return path


def test_exit_status_counts_failures(tmp_path):
    bench, out = _suite(tmp_path / "synthetic.jsonl", 5, bad={1, 2}, empty={3}), tmp_path / "run"
    args = [sys.executable, "-m", "easyvideor1.evaluate", "run", "--engine", "oracle", "--bench", str(bench), "--out", str(out), "--no-progress"]
    r = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr  # was 0 whatever failed
    assert "2 of 4 items failed (InvalidRow: 2)" in r.stderr, r.stderr
    assert "synthetic.jsonl:2" in (out / "validation" / "synthetic.md").read_text()  # line 2: the second row (bad counts from 0)
    s = json.loads(r.stdout.strip().splitlines()[-1])
    assert (s["n"], s["failed"], s["errors"]) == (4, 2, {"InvalidRow": 2})
    assert (s["loaded"], s["skipped"]) == (4, 1)  # the row without a question never loads (issue 17): skipped, not failed
    assert [x["where"] for x in json.loads((out / "synthetic.load.json").read_text())["skipped"]] == ["synthetic.jsonl:4"]
    good = _suite(tmp_path / "good" / "synthetic.jsonl", 3)
    r = subprocess.run(args[:-4] + [str(good), "--out", str(tmp_path / "run2"), "--no-progress"], env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_retry_failed_evaluates_failed_items_again(tmp_path):
    bench, out = _suite(tmp_path / "synthetic.jsonl", 3), tmp_path / "run"
    fail = {"on": True}
    def loader(it):
        if fail["on"] and it.item_id == "q1": raise OSError("share not mounted")
        return Media()
    from easyvideor1.evaluate import make_manifest
    man = make_manifest(None, None, None, {}, 0, "oracle")
    s = evaluate_file(bench, OracleEngine(), out, loader, man, progress=False)
    assert (s["failed"], s["errors"]) == (1, {"OSError": 1})
    fail["on"] = False
    assert evaluate_file(bench, OracleEngine(), out, loader, man, progress=False)["failed"] == 1  # plain resume keeps it
    s = evaluate_file(bench, OracleEngine(), out, loader, man, retry_failed=True, progress=False)
    assert (s["n"], s["failed"], s["accuracy"]) == (3, 0, 1.0)
    assert sorted(r["id"] for r in read_results(out / "synthetic.jsonl")) == ["q0", "q1", "q2"]


def test_evaluator_json_errors_name_file_and_line(tmp_path):
    p = tmp_path / "b.jsonl"
    p.write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(AnnotationError, match=r"b.jsonl:2: invalid JSON"): read_records(p)
    p = tmp_path / "b.json"
    p.write_text('[\n{"a": 1},\n{"a" 2}\n]')
    with pytest.raises(AnnotationError, match=r"b.json:3: invalid JSON"): read_records(p)


# 3. confined code execution: each escape of the issue now fails, with bubblewrap and in the no-sandbox fallback
from easyvideor1.rewards import run_python_tests, compute_score, sandbox_mode, _bwrap_problem

MODES = ["none"] + (["bwrap"] if _bwrap_problem() is None else [])
HARNESS_MARK = "easyvideor1 code harness"


def _leftovers():
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [l for l in out.splitlines() if HARNESS_MARK in l]


@pytest.mark.parametrize("mode", MODES)
def test_correct_code_still_passes(mode):
    assert run_python_tests("def f(x): return 2 * x", ["assert f(2) == 4", "assert f(3) == 6"], 20, sandbox=mode) == 1.0
    assert run_python_tests("def f(x): return 2 * x", ["assert f(2) == 5", "x = f(1)\nassert x == 2"], 20, sandbox=mode) == 0.5


@pytest.mark.parametrize("mode", MODES)
def test_forged_pass_fails(mode):
    forge = '''
import os, sys
def f(x): return x + 100
for fr in (sys._getframe(k) for k in range(1, 3)):  # the old harness kept its tag here
    for v in list(fr.f_locals.values()):
        if isinstance(v, str) and len(v) == 16: print(v + " PASS 0")
for k in range(1, 40):  # every descriptor: whatever the result channel is, write a pass on it
    for rec in (b'{"i": 0, "ok": true}\\n', b'{"i": 0, "value": "4"}\\n'):
        try: os.write(k, rec)
        except OSError: pass
os._exit(0)
'''
    assert run_python_tests(forge, ["assert f(2) == 4"], 20, sandbox=mode) == 0.0
    equal = "class E:\n    def __eq__(self, o): return True\ndef f(x): return E()"  # an object that equals anything
    assert run_python_tests(equal, ["assert f(2) == 4"], 20, sandbox=mode) == 0.0


@pytest.mark.parametrize("mode", MODES)
def test_setsid_child_neither_outlives_the_run_nor_stretches_it(mode):
    code = "import os, time\nif os.fork() == 0:\n    os.setsid(); time.sleep(60); os._exit(0)\ndef f(x): return 2 * x"
    t0 = time.monotonic()
    assert run_python_tests(code, ["assert f(2) == 4"], 30, sandbox=mode) == 1.0
    assert time.monotonic() - t0 < 15  # returned when the harness ended, not at the 30 s deadline (it took 25 s for 3 s before)
    assert _leftovers() == []


@pytest.mark.parametrize("mode", MODES)
def test_timeout_kills_the_whole_tree(mode):
    code = "import os, time\nfor _ in range(3):\n    if os.fork() == 0: os.setsid(); break\ntime.sleep(60)"
    assert run_python_tests(code, ["assert 1 == 1"], 2, sandbox=mode) == 0.0
    assert _leftovers() == []


@pytest.mark.parametrize("mode", MODES)
def test_no_writes_outside_its_folder(mode, tmp_path):
    for target in (tmp_path / "pwned", Path("/tmp") / f"evr1-pwned-{os.getpid()}"):
        code = f"def f(x):\n    open({str(target)!r}, 'w').write('x')\n    return 4"
        run_python_tests(code, ["assert f(2) == 4"], 20, sandbox=mode)
        assert not target.exists(), target


@pytest.mark.parametrize("mode", MODES)
def test_no_environment_secrets(mode, monkeypatch):
    monkeypatch.setenv("EVR1_TEST_SECRET", "s3cret")
    code = "import os\ndef f(x): return os.environ.get('EVR1_TEST_SECRET', '')"
    assert run_python_tests(code, ["assert f(0) == 's3cret'"], 20, sandbox=mode) == 0.0


@pytest.mark.parametrize("mode", MODES)
def test_no_sockets(mode):
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
    port = srv.getsockname()[1]
    code = f"import socket\ndef f(x):\n    s = socket.socket(); s.connect(('127.0.0.1', {port})); return 'connected'"
    try: assert run_python_tests(code, ["assert f(0) == 'connected'"], 20, sandbox=mode) == 0.0
    finally: srv.close()


@pytest.mark.parametrize("mode", MODES)
def test_unbounded_allocation_fails_in_the_child(mode):
    code = "x = bytearray(8 * 2**30)\ndef f(x): return 4"
    assert run_python_tests(code, ["assert f(2) == 4"], 20, sandbox=mode) == 0.0


def test_no_sandbox_warns_once_loudly(capsys, monkeypatch):
    from easyvideor1 import rewards
    monkeypatch.setitem(rewards._SANDBOX_STATE, "warned", False)
    with pytest.warns(rewards.SandboxWarning, match="WITHOUT A SANDBOX"): assert sandbox_mode("none") == "none"
    assert "UNTRUSTED CODE RUNS WITHOUT A SANDBOX" in capsys.readouterr().err
    monkeypatch.setenv("EASYVIDEOR1_SANDBOX", "none")
    assert sandbox_mode() == "none"


def test_code_scorer_takes_the_rows_tests():
    # the issue: `f(x) = x + 100` got reward 1.0 against `assert f(2) == 4` because the tests never reached the scorer
    wrong, right = "<answer>def f(x): return x + 100</answer>", "<answer>def f(x): return 2 * x</answer>"
    gt = "def f(x): return 2 * x"
    assert compute_score(wrong, gt, "code", tests=["assert f(2) == 4"])["accuracy"] == 0.0
    assert compute_score(right, gt, "code", tests='["assert f(2) == 4"]')["accuracy"] == 1.0
    from easyvideor1.evaluate import score_response
    it = EvalItem("Synthetic", "c0", "code", "Write f.", gt, tests=["assert f(2) == 4"])
    s = to_sample(it)
    assert score_response(s, wrong)["accuracy"] == 0.0 and score_response(s, right)["accuracy"] == 1.0


# 4. preprocess: a huge or corrupt image is a recorded failure, never the end of the run
@pytest.mark.parametrize("workers", [0, 1])
def test_preprocess_records_decompression_bomb(tmp_path, monkeypatch, workers):
    from PIL import Image
    from easyvideor1.preprocess import MediaItem, preprocess
    from easyvideor1.video import VideoContract, ImageContract
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # a 100x100 image is then a bomb (> 2x the limit); forked workers inherit it
    Image.new("RGB", (100, 100)).save(tmp_path / "bomb.png")
    Image.new("RGB", (20, 20)).save(tmp_path / "ok.png")
    (tmp_path / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(200))
    items = [MediaItem(str(tmp_path / n), "image", source=f"t.jsonl:{i}") for i, n in enumerate(["bomb.png", "ok.png", "corrupt.png"], 1)]
    rep = preprocess(items, tmp_path / "cache", VideoContract.for_family("qwen2_5_vl"), ImageContract.for_family("qwen2_5_vl"),
                     workers=workers, progress=False)
    assert (rep.stored, rep.failed) == (1, 2)
    fails = {Path(f["path"]).name: f for f in map(json.loads, (tmp_path / "cache" / "failures.jsonl").read_text().splitlines())}
    assert fails["bomb.png"]["error_type"] == "DecompressionBombError" and "bomb.png" in fails["bomb.png"]["error"]
    assert set(fails) == {"bomb.png", "corrupt.png"}


# 5. one clip window for every tool: preprocess, the trainer's loader and the evaluator hit the same cache entries
def test_one_window_field_one_cache_entry(tmp_path):
    from easyvideor1.cache import FrameCache
    from easyvideor1.data import read_samples, load_media
    from easyvideor1.evaluate import MediaLoader, load_benchmark
    from easyvideor1.preprocess import main as preprocess_main
    from easyvideor1.synthetic import make_suite
    from easyvideor1.video import VideoContract, ImageContract
    suite = make_suite(tmp_path / "suite", n_per_task=1, n_test=0, tasks=["direction"], seed=0)
    row = json.loads((suite / "train.jsonl").read_text().splitlines()[0])
    rows = [dict(row, problem_id="a", video_start=0.5, video_end=1.5),  # qwen-vl-utils' spelling
            dict(row, problem_id="b", start=0.5, end=1.5),  # MVBench's
            dict(row, problem_id="c", video_start=0, video_end=1),  # ints: the same window as 0.0 / 1.0
            dict(row, problem_id="d", start=0.0, end=1.0),
            dict(row, problem_id="e")]  # the whole clip
    data = suite / "windows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cache_dir = tmp_path / "cache"
    assert preprocess_main([str(data), "--cache-dir", str(cache_dir), "--min-pixels", str(4 * 28**2), "--workers", "0", "--no-progress"]) == 0
    keys = lambda: sorted(p.stem for p in (cache_dir / "entries").rglob("*.json") if not p.name.startswith(".tmp."))
    made = keys()
    assert len(made) == 3, made  # (clip, 0.5-1.5), (clip, 0-1), (clip) -- 8 entries for 4 before, or the whole clip trained on
    vc, ic = VideoContract.for_family("qwen2_5_vl", min_pixels=4 * 28**2), ImageContract.for_family("qwen2_5_vl")
    cache = FrameCache(cache_dir)
    for s in read_samples(data): load_media(s, vc, ic, cache)
    _, items = load_benchmark(data)
    loader = MediaLoader(suite, vc, ic, cache)
    for it in items: loader(it)
    assert (cache.stats.hits, cache.stats.misses) == (10, 0) and keys() == made
    assert [(it.start, it.end) for it in items] == [(0.5, 1.5), (0.5, 1.5), (0.0, 1.0), (0.0, 1.0), (None, None)]


# 6. validate: the trainer-side probes are refused up front with file:line and reason (skipped by default, strict refuses)
def test_validate_rows_refuses_the_issues_rows(tmp_path):
    from easyvideor1.synthetic import make_suite
    from easyvideor1.validate import validate_rows, ValidationError
    suite = make_suite(tmp_path / "suite", n_per_task=2, n_test=0, tasks=["direction"], seed=0)
    rows = [json.loads(l) for l in (suite / "train.jsonl").read_text().splitlines()]
    vid = suite / rows[0]["videos"][0]
    (suite / "cut.mp4").write_bytes(vid.read_bytes()[: vid.stat().st_size // 2])
    mc = dict(rows[0], problem_type="multiple choice", answer="A", options=["A. left", "B. right"])
    bad = {"truncated clip": dict(mc, videos=["cut.mp4"]), "unknown type": dict(mc, problem_type="astrology"),
           "letter not among options": dict(mc, answer="E"), "options as a string": dict(mc, options="A. left B. right"),
           "5 MB question": dict(mc, problem="why? " * 1_000_000), "literal <image>": dict(mc, problem="<image> which way?")}
    data = suite / "mixed.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [mc, *bad.values()]))
    v = validate_rows(data)
    assert [s.where for s in v.samples] == ["mixed.jsonl:1"]
    assert [p.where for p in v.problems] == [f"mixed.jsonl:{i}" for i in range(2, 8)], v.problems
    reasons = dict(zip(bad, [p.reason for p in v.problems]))
    assert "does not decode" in reasons["truncated clip"] and "astrology" in reasons["unknown type"]
    assert "not one of the option letters" in reasons["letter not among options"] and "`options`" in reasons["options as a string"]
    assert "max_prompt_chars" in reasons["5 MB question"] and "<image>" in reasons["literal <image>"]
    js, md = v.write(tmp_path / "run")
    assert len(js.read_text().splitlines()) == 6 and "mixed.jsonl:4" in md.read_text()
    with pytest.raises(ValidationError, match=r"mixed.jsonl:2: "): validate_rows(data, strict=True)


# --- issue 18, items 7 and 8: the trainer's resume and config (easyvideor1.train)

def test_resume_refuses_a_booby_trapped_checkpoint(tmp_path):
    "A pickle planted as a checkpoint's optimizer state is refused by weights_only loading, not run."
    import torch
    from easyvideor1.models import qwen_processor, qwen_vlm
    from easyvideor1.checkpoint import load_checkpoint, save_checkpoint
    m = qwen_vlm("qwen2_5_vl", "tiny", seed=0)
    opt = torch.optim.AdamW(m.parameters())
    sch = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    ck = save_checkpoint(m, qwen_processor("qwen2_5_vl"), opt, sch, dict(step=1), tmp_path)
    flag = tmp_path / "pwned"
    class Booby:
        def __reduce__(self): return (os.system, (f"touch {flag}",))
    torch.save({"state": Booby(), "param_groups": []}, ck / "optimizer.pt")
    with pytest.raises(ValueError, match="refusing to resume"):
        load_checkpoint(m, opt, sch, tmp_path)
    assert not flag.exists()
    assert not list(ck.rglob("*.pkl")) and not list(ck.rglob("*.bin"))  # nothing in a checkpoint needs unpickling


@pytest.mark.parametrize("override, message", [
    ("prompts_per_step=0", "prompts_per_step=0 is out of range: must be >= 1"),
    ("micro_batch_size=0", "micro_batch_size=0 is out of range: must be >= 1"),
    ("temperature=0", "temperature=0.0 is out of range: must be > 0"),
    ("max_steps=-3", "max_steps=-3 is out of range: must be >= 0"),
    ("engine=tpu", "engine='tpu' is out of range: must be one of 'hf', 'vllm', 'vllm_server'"),
    ("vllm_port=80", "vllm_port=80 is out of range: must be in [1024, 65536)"),
    ("engine=vllm_server vllm_sleep=true", "vllm_sleep=true needs engine='vllm'"),
])
def test_config_values_are_range_checked(override, message):
    "`main` (what the command line runs) refuses the value before anything is built, with one line naming the key."
    from easyvideor1.train import main
    with pytest.raises(SystemExit) as e: main(override.split())
    assert message in str(e.value) and str(e.value).startswith("easyvideor1.train: "), e.value


def test_a_config_mistake_is_one_line_on_the_command_line():
    r = subprocess.run([sys.executable, "-m", "easyvideor1.train", "engine=tpu"], capture_output=True, text=True,
                       env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"), timeout=300)
    assert r.returncode != 0 and "engine='tpu' is out of range" in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]


def test_config_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("lr: [1e-3\n")
    for args, message in (([f"--config={bad}"], f"{bad}: not valid YAML"), (["--config=missing.yaml"], "--config missing.yaml: no such file")):
        r = subprocess.run([sys.executable, "-m", "easyvideor1.train", *args], capture_output=True, text=True,
                           env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"), timeout=300)
        assert r.returncode != 0 and message in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
