"""Time per phase of the trainer's GRPO step, with and without the frame cache, measured in one run.

Like the original paper's per-step breakdown: the same `python -m easyvideor1.train` runs twice on the
same synthetic clips, once reading frames through the frame cache (`frame_cache=true`) and once decoding
every video at every step (`frame_cache=false`, what a trainer without a cache does). The prompts of a
step are the same few clips every step (a pool of `--prompts` clips), so from the second step on the
cached run only reads the cache: step 0 (warm-up, cache fill) is left out of the means. Prints one
Markdown table: mean seconds per phase (load = phase 2, media; rollout = 3; reward = 4-6; update = 7
with the log-prob passes; sync = 8) for both runs and their ratio, then `load speedup` and `step speedup`,
then the update time of every timed step.

A random-weight model answers wrong in every rollout, and a group whose rewards all agree has no
gradient: the trainer then skips the update (`no_signal=1`) and the update column would time nothing.
So every clip carries an offline trajectory with the right answer (`<answer>X</answer>`, short enough
for any token budget) and each group holds one (`offline_mode=replace`, `offline_per_group=1`): G - 1
online rollouts and one rewarded offline answer, a group with signal. A timed step that still had no
signal (or no update time) stops the bench with a non-zero exit naming the run and the step.

    python bench/train_phases.py                       # CPU: tiny Qwen2.5-VL, 16 frames of 224 x 224, ~3 minutes
    python bench/train_phases.py --cache on --json out.json   # the cached run only; the numbers as JSON
    python bench/train_phases.py --model qwen2_5_vl:3b --dtype bfloat16 --frames 64 --size 448 \\
        --steps 4 --checkpointing                      # the GPU table (bench/train_phases_gpu.sh)
"""
import argparse, json, os, shutil, subprocess, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
PHASES = ["load", "rollout", "reward", "update", "sync"]
SIDES = {True: ("cached", "frame cache"), False: ("decoded", "decode every step")}  # frame_cache -> (key, column)


def make_bench_suite(suite: Path, a) -> None:
    "The clips (fps 2: `frames` frames last frames / 2 s), each with its right answer as an offline trajectory."
    from easyvideor1.synthetic import make_suite
    args = dict(n_per_task=a.prompts, n_test=1, tasks=["direction"], offline_fraction=1.0, think=False,
                n_frames=a.frames, size=a.size, speed=[1, 2], square=max(16, a.size // 8))
    made = suite / "bench_suite.json"  # a workdir's suite made with other arguments is made again
    if (suite / "test.jsonl").exists() and made.exists() and json.loads(made.read_text()) == args: return
    shutil.rmtree(suite, ignore_errors=True)
    make_suite(suite, **{**args, "speed": tuple(args["speed"])})
    made.write_text(json.dumps(args))


def run(suite: Path, out: Path, cache: bool, a) -> list[dict]:
    "One training run; its metrics rows."
    args = [f"data={suite / 'train.jsonl'}", f"eval_data={suite / 'test.jsonl'}", f"output_dir={out}", f"model={a.model}",
            f"dtype={a.dtype}", f"video_max_frames={a.frames}", f"video_max_pixels={a.size * a.size}", "sft_steps=0", "dynamic_sampling=false", "beta=0",
            f"max_steps={a.steps}", "max_minutes=0", f"prompts_per_step={a.prompts}", f"group_size={a.G}",
            f"max_new_tokens={a.new_tokens}", "eval_every=0", "eval_n=1", "tensorboard=false", f"frame_cache={str(cache).lower()}",
            f"gradient_checkpointing={str(a.checkpointing).lower()}", f"micro_batch_size={a.G}",
            # one offline trajectory (the right answer) in every group, whatever its online accuracy: reward signal
            "offline_mode=replace", "offline_per_group=1", "offline_threshold=-1"]
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "easyvideor1.train", *args], check=True, env=dict(os.environ, TQDM_DISABLE="1"))
    print(f"  {SIDES[cache][0]} run: {time.time() - t0:.0f} s", flush=True)
    return [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]


def check_timed(rows: list[dict], label: str, steps: int) -> list[dict]:
    "The timed steps (1 .. steps - 1) of a run; an error naming the step if one is missing or skipped its update."
    by_step = {r["step"]: r for r in rows}
    timed = []
    for s in range(1, steps):
        r = by_step.get(s)
        if r is None:
            raise SystemExit(f"train_phases: {label} run: step {s} is not in metrics.jsonl (no update time)")
        if r.get("no_signal") != 0:
            raise SystemExit(f"train_phases: {label} run: step {s} had no_signal={r.get('no_signal')!r}: every group's "
                             "rewards agreed, the trainer skipped the update, and its update time measures nothing")
        if not r.get("time/update", 0) > 0:
            raise SystemExit(f"train_phases: {label} run: step {s} has no update time (time/update={r.get('time/update')!r})")
        timed.append(r)
    return timed


def parse_args(argv=None):
    "The bench's arguments (`gpu_check.py` reads them too, to make the suite before a GPU run)."
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="qwen2_5_vl:tiny"); p.add_argument("--dtype", default="float32")
    p.add_argument("--frames", type=int, default=16); p.add_argument("--size", type=int, default=224)
    p.add_argument("--steps", type=int, default=4); p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--G", type=int, default=4); p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--checkpointing", action="store_true"); p.add_argument("--workdir", default="")
    p.add_argument("--cache", choices=["both", "on", "off"], default="both",
                   help="both runs and their ratio (default), or only the frame-cache (on) or the decoding (off) run")
    p.add_argument("--json", default="", help="also write the table's numbers to this JSON file")
    p.add_argument("--suite", default="", help="the clips' folder (default: <workdir>/suite); made when missing")
    a = p.parse_args(argv)
    if a.steps < 2: p.error(f"--steps {a.steps}: step 0 is warm-up, so at least 2 steps are needed to time one")
    if a.G < 2: p.error(f"--G {a.G}: a group needs an online rollout beside its offline trajectory (G >= 2)")
    return a


def main():
    a = parse_args()
    work = Path(a.workdir or tempfile.mkdtemp(prefix="train_phases_"))
    suite = Path(a.suite) if a.suite else work / "suite"
    make_bench_suite(suite, a)
    sides = {"both": [True, False], "on": [True], "off": [False]}[a.cache]
    timed = {}
    for c in sides:  # each run checked as it ends: a run without signal stops the bench before the next one
        key = SIDES[c][0]
        timed[c] = check_timed(run(suite, work / key, c, a), key, a.steps)
    mean = {c: {ph: sum(r[f"time/{ph}"] for r in rs) / len(rs) for ph in PHASES} for c, rs in timed.items()}
    for m in mean.values(): m["step"] = sum(m[ph] for ph in PHASES)
    steps = [r["step"] for r in timed[sides[0]]]
    print(f"\n{a.model} {a.dtype}, {a.frames} frames of {a.size} x {a.size}, {a.prompts} prompts x G = {a.G} (one offline "
          f"trajectory each), {a.new_tokens} new tokens; mean of steps 1-{a.steps - 1} (step 0: warm-up and cache fill)\n")
    both = len(sides) == 2
    head = " | ".join(f"{SIDES[c][1]} (s)" for c in sides) + (" | ratio" if both else "")
    print(f"| phase | {head} |\n" + "|---" * (1 + len(sides) + both) + "|")
    ratio = {}
    for ph in PHASES + ["step"]:
        cells = [f"{mean[c][ph]:.3f}" for c in sides]
        if both:
            w, wo = mean[True][ph], mean[False][ph]
            ratio[ph] = wo / w if w > 0 else float("nan")
            cells.append(f"{ratio[ph]:.2f}x")
        name = "**step**" if ph == "step" else ph
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()
    if both:
        print(f"load speedup: {ratio['load']:.2f}x")
        print(f"step speedup: {ratio['step']:.2f}x\n")
    print("update (phase 7) per timed step, s:\n")
    print("| step | " + " | ".join(f"{SIDES[c][1]} (s)" for c in sides) + " |\n|---" + "|---" * len(sides) + "|")
    for i, s in enumerate(steps):
        print(f"| {s} | " + " | ".join(f"{timed[c][i]['time/update']:.3f}" for c in sides) + " |")
    if a.json:
        out = dict(model=a.model, dtype=a.dtype, frames=a.frames, size=a.size, prompts=a.prompts, G=a.G,
                   new_tokens=a.new_tokens, steps=a.steps, checkpointing=a.checkpointing, timed_steps=steps,
                   runs={SIDES[c][0]: dict(mean=mean[c], update_per_step=[r["time/update"] for r in timed[c]],
                                           per_step=[{ph: r[f"time/{ph}"] for ph in PHASES} for r in timed[c]])
                         for c in sides})
        if both: out.update(ratio=ratio, load_speedup=ratio["load"], step_speedup=ratio["step"])
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
        print(f"\nwrote {a.json}")


if __name__ == "__main__": main()
