"""Time per phase of the trainer's GRPO step, with and without the frame cache, measured in one run.

Like the original paper's per-step breakdown: the same `python -m easyvideor1.train` runs twice on the
same synthetic clips, once reading frames through the frame cache (`frame_cache=true`) and once decoding
every video at every step (`frame_cache=false`, what a trainer without a cache does). The prompts of a
step are the same few clips every step (a pool of `--prompts` clips), so from the second step on the
cached run only reads the cache: step 0 (warm-up, cache fill) is left out of the means. Prints one
Markdown table: mean seconds per phase (load = phase 2, media; rollout = 3; reward = 4-6; update = 7
with the log-prob passes; sync = 8) for both runs and their ratio, then `load speedup` and `step speedup`.

    python bench/train_phases.py                       # CPU: tiny Qwen2.5-VL, 16 frames of 224 x 224, ~3 minutes
    python bench/train_phases.py --model qwen2_5_vl:3b --dtype bfloat16 --frames 64 --size 448 \\
        --steps 4 --checkpointing                      # the GPU table (bench/train_phases_gpu.sh)
"""
import argparse, json, os, subprocess, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
PHASES = ["load", "rollout", "reward", "update", "sync"]


def run(suite: Path, out: Path, cache: bool, a) -> list[dict]:
    "One training run; its metrics rows."
    args = [f"data={suite / 'train.jsonl'}", f"eval_data={suite / 'test.jsonl'}", f"output_dir={out}", f"model={a.model}",
            f"dtype={a.dtype}", f"video_max_frames={a.frames}", f"video_max_pixels={a.size * a.size}", "sft_steps=0", "dynamic_sampling=false", "beta=0",
            f"max_steps={a.steps}", "max_minutes=0", f"prompts_per_step={a.prompts}", f"group_size={a.G}",
            f"max_new_tokens={a.new_tokens}", "eval_every=0", "eval_n=1", "tensorboard=false", f"frame_cache={str(cache).lower()}",
            f"gradient_checkpointing={str(a.checkpointing).lower()}", f"micro_batch_size={a.G}"]
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "easyvideor1.train", *args], check=True, env=dict(os.environ, TQDM_DISABLE="1"))
    print(f"  {'cached' if cache else 'decoded'} run: {time.time() - t0:.0f} s", flush=True)
    return [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="qwen2_5_vl:tiny"); p.add_argument("--dtype", default="float32")
    p.add_argument("--frames", type=int, default=16); p.add_argument("--size", type=int, default=224)
    p.add_argument("--steps", type=int, default=4); p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--G", type=int, default=4); p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--checkpointing", action="store_true"); p.add_argument("--workdir", default="")
    a = p.parse_args()
    from easyvideor1.synthetic import make_suite
    work = Path(a.workdir or tempfile.mkdtemp(prefix="train_phases_"))
    suite = work / "suite"
    if not (suite / "test.jsonl").exists():  # fps 2: a clip of `frames` frames lasts frames / 2 seconds
        make_suite(suite, n_per_task=a.prompts, n_test=1, tasks=["direction"], offline_fraction=0.0, n_frames=a.frames,
                   size=a.size, speed=(1, 2), square=max(16, a.size // 8))
    rows = {c: run(suite, work / ("cached" if c else "decoded"), c, a) for c in (True, False)}
    mean = {c: {ph: sum(r[f"time/{ph}"] for r in rs[1:]) / max(len(rs) - 1, 1) for ph in PHASES} for c, rs in rows.items()}
    print(f"\n{a.model} {a.dtype}, {a.frames} frames of {a.size} x {a.size}, {a.prompts} prompts x G = {a.G}, "
          f"{a.new_tokens} new tokens; mean of steps 1-{a.steps - 1} (step 0: warm-up and cache fill)\n")
    print("| phase | frame cache (s) | decode every step (s) | ratio |\n|---|---|---|---|")
    for ph in PHASES:
        w, wo = mean[True][ph], mean[False][ph]
        print(f"| {ph} | {w:.3f} | {wo:.3f} | {wo / w if w > 0 else float('nan'):.2f}x |")
    tw, two = sum(mean[True].values()), sum(mean[False].values())
    print(f"| **step** | {tw:.3f} | {two:.3f} | {two / tw:.2f}x |\n")
    print(f"load speedup: {mean[False]['load'] / mean[True]['load']:.2f}x")
    print(f"step speedup: {two / tw:.2f}x")


if __name__ == "__main__": main()
