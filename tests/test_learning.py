"""The CI guard on learning: the default recipe, two seeds side by side, must learn both tasks without collapsing.

It runs `bench/demo_seeds.py` (the robustness benchmark of the README's main job) for seeds 0 and 1 with one
thread each, with smaller held-out splits (32 test and 16 validation clips per task) so it fits in CI; the
training recipe itself (clips, warm start, GRPO steps, learning rates) is the default. A run passes when, at
its last evaluation, accuracy is >= 0.9 on both tasks, format >= 0.95, colour was near chance after the
warm start (GRPO learned it), and no collapse warning was printed.
"""
import json, os, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_default_recipe_learns_on_two_seeds(tmp_path):
    out = tmp_path / "seeds"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    cmd = [sys.executable, str(ROOT / "bench" / "demo_seeds.py"), "--seeds", "0", "1", "--threads", "1", "--cores", "2",
           "--out", str(out), "synthetic_test_n=32", "synthetic_val_n=16"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=2400, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = json.loads((out / "summary.json").read_text())
    for row in rows:
        log = (out / f"seed{row['seed']}-threads1" / "log.txt").read_text()
        assert "may be collapsing" not in log, (row, [l for l in log.splitlines() if "collapsing" in l])
    assert "robust: 2/2 runs reach the target" in r.stdout, r.stdout[-2000:]
