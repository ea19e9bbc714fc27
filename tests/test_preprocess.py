"`python -m easyvideor1.preprocess` in a subprocess: formats, failures, re-runs, SIGKILL and Ctrl-C mid-run."
import json, os, signal, subprocess, sys, time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import pytest
import torch

from easyvideor1.cache import FrameCache
from easyvideor1.synthetic import make_suite, write_video
from easyvideor1.video import VideoContract, ImageContract, load_video, load_image

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--min-pixels", str(4 * 28**2)]  # keep the tiny synthetic clips tiny


def cli(*args, **kw):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "easyvideor1.preprocess", *map(str, args)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def run(*args, timeout=300):
    p = cli(*args)
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


def entry_jsons(cache_dir):
    "Entry metadata files, without writers' temporaries (`.tmp.<pid>.<hex>.<key>.json`, renamed when complete)."
    return sorted(js for js in Path(cache_dir, "entries").rglob("*.json") if not js.name.startswith(".tmp."))


def entries(cache_dir):
    "Every complete entry (metadata JSON present), checked: its array loads with the recorded shape."
    out = []
    for js in entry_jsons(cache_dir):
        info = json.loads(js.read_text())
        arr = np.load(js.with_suffix(".npy"), allow_pickle=False)
        assert list(arr.shape) == info["shape"] and arr.dtype == np.uint8, js
        out.append(info)
    return out


def test_cli_formats_failures_rerun(tmp_path):
    data = make_suite(tmp_path / "suite", n_per_task=2, n_test=1, tasks=["direction", "ground", "count"], seed=1)
    (data / "videos" / "corrupt.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + os.urandom(2000))
    with open(data / "train.jsonl", "a") as f:
        for v in ("videos/corrupt.mp4", "videos/missing.mp4"):  # valid rows (`validate_rows` passes them) whose media fail
            f.write(json.dumps({"problem": "<video>?", "videos": [v], "data_type": "video", "problem_type": "open-ended", "answer": "x"}) + "\n")
    rows = [json.loads(l) for l in (data / "train.jsonl").read_text().splitlines()]
    vids = sorted({r["videos"][0] for r in rows if r.get("videos")} - {"videos/corrupt.mp4", "videos/missing.mp4"})
    bench = [{"problem_id": i, "path": f"./{v}", "data_type": "video", "problem_type": "multiple choice", "problem": "?",
              "solution": "<answer>A</answer>"} for i, v in enumerate(vids)]
    (tmp_path / "bench.json").write_text(json.dumps(bench))
    cache = tmp_path / "cache"
    args = [data / "train.jsonl", tmp_path / "bench.json", "--video-root", data, "--cache-dir", cache, "--workers", 2, *SMALL]
    rc, out, err = run(*args)
    assert rc == 1, err  # some inputs failed
    n_img = sum(1 for r in rows if r.get("images"))
    assert f"{len(vids) + n_img + 2} files: 0 already cached, {len(vids) + n_img} stored, 2 failed" in out, out
    fails = [json.loads(l) for l in (cache / "failures.jsonl").read_text().splitlines()]
    assert sorted(Path(f["path"]).name for f in fails) == ["corrupt.mp4", "missing.mp4"]
    assert all(Path(f["path"]).name in f["error"] and f["source"].endswith((f":{len(rows) - 1}", f":{len(rows)}")) for f in fails), fails
    assert len(entries(cache)) == len(vids) + n_img
    rc, out, err = run(*args)
    assert rc == 1 and f"{len(vids) + n_img} already cached, 0 stored, 2 failed" in out, out
    # what was stored is what decoding gives, under the contracts the options describe
    vc, ic = VideoContract.for_family("qwen2_5_vl", min_pixels=4 * 28**2), ImageContract.for_family("qwen2_5_vl")
    fc = FrameCache(cache)
    for r in rows[:-2]:
        if r.get("videos"):
            f, m = fc.get(data / r["videos"][0], vc)
            assert torch.equal(f, load_video(data / r["videos"][0], vc)[0])
        else: assert torch.equal(fc.get(data / r["images"][0], ic)[0], load_image(data / r["images"][0], ic))
    assert fc.stats.misses == 0


@pytest.fixture
def many_clips(tmp_path):
    "24 clips big enough (upscaled to the default 100k px per frame) that a run takes a few seconds."
    rng = np.random.default_rng(0)
    rows = []
    for i in range(24):
        x = rng.integers(0, 255, (30, 64, 80, 3), dtype=np.uint8)
        write_video(tmp_path / "v" / f"{i}.mp4", x, 10)
        rows.append({"problem": "<video>?", "videos": [f"v/{i}.mp4"], "data_type": "video", "problem_type": "open-ended", "answer": "x"})
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path / "train.jsonl"


def wait_for_entries(cache, n, proc, limit=240):
    t0 = time.time()
    while time.time() - t0 < limit and proc.poll() is None:
        if len(entry_jsons(cache)) >= n: return True
        time.sleep(0.05)
    return False


def test_sigkill_midrun_then_rerun(tmp_path, many_clips):
    cache = tmp_path / "cache"
    args = [many_clips, "--cache-dir", cache, "--workers", 2, "--no-progress"]
    p = cli(*args, start_new_session=True)
    assert wait_for_entries(cache, 3, p), p.communicate()
    os.killpg(p.pid, signal.SIGKILL)  # the parent and its workers, mid-write
    p.wait()
    done = entries(cache)  # every visible entry is complete
    assert 3 <= len(done) < 24
    rc, out, err = run(*args)
    assert rc == 0, err
    assert f"24 files: {len(done)} already cached, {24 - len(done)} stored, 0 failed" in out, out
    assert len(entries(cache)) == 24
    assert not list(cache.rglob(".tmp.*"))  # the killed writers' temporary files were cleaned
    vc = VideoContract.for_family("qwen2_5_vl")
    v = many_clips.parent / "v" / "0.mp4"
    assert torch.equal(FrameCache(cache).get(v, vc)[0], load_video(v, vc)[0])


def test_ctrl_c_keeps_finished_entries(tmp_path, many_clips):
    cache = tmp_path / "cache"
    # a shell started in the background (`cmd &`, nohup) ignores SIGINT and its children inherit that; a terminal's
    # foreground job, which this test plays, does not: restore the default so Python raises KeyboardInterrupt
    p = cli(many_clips, "--cache-dir", cache, "--workers", 1, "--no-progress", start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert wait_for_entries(cache, 2, p), p.communicate()
    os.killpg(p.pid, signal.SIGINT)  # Ctrl-C in a terminal reaches the whole process group
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130 and "(interrupted)" in out, (out, err)
    n = len(entries(cache))
    assert n >= 2
    rc, out, err = run(many_clips, "--cache-dir", cache, "--workers", 1, "--no-progress")
    assert rc == 0 and f"{n} already cached, {24 - n} stored" in out, out
