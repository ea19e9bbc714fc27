"""Time per phase of the default run's GRPO step at two revisions of the package, measured in one run.

Refactors must not slow the trainer, and some remove work (issue 21: the processor ran twice per prompt per step on
the HF engine, and the online completions were scored twice). This checks out `--before` (default bd8e651, the
landed main before that refactor) into a temporary git worktree, then runs the same shortened default recipe
(`python -m easyvideor1.train`, a few warm-start and GRPO steps on the synthetic suite, the recipe pinned by `RECIPE`) with the old package and
with this working tree's, in pairs whose order alternates (before-after, then after-before, ...: `--repeats` pairs).
GRPO step 1 on is averaged (step 0 fills the frame cache). Prints one Markdown table (mean seconds per phase:
load = phase 2, media; rollout = 3; reward = 4-5; update = 6-7; sync = 8; step = their sum) for both revisions and
the ratio, then `step speedup`, then the order effect (the run that came second in its pair against the first).

Why the order alternates: with the same code on both sides (`--before HEAD`) and the working tree always second,
an earlier version of this script printed 0.94x (2 repeats of 8 steps, 2 quiet cores): the second run of a pair
was ~6% slower whatever it ran. An even number of repeats puts each side first equally often, so that drift
cancels in the ratio, and the order-effect line shows its size.
With this order (2 pairs of 6 GRPO steps, 2 threads, a quiet machine, working tree at e29e630 against bd8e651):
step 7.21 s before, 7.29 s after, `step speedup: 0.99x`, order effect 0.94x (the second run of a pair was the faster
one this time: the drift is noise of a few percent either way, not a fixed penalty).

    OMP_NUM_THREADS=2 python bench/step_revisions.py            # ~12 minutes on 2 quiet cores
    python bench/step_revisions.py --before HEAD                # control: the same code on both sides, expect ~1.00x
    python bench/step_revisions.py --before <rev> --steps 8 --repeats 4
"""
import argparse, json, os, subprocess, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PHASES = ["load", "rollout", "reward", "update", "sync"]
RECIPE = ["prompts_per_step=4", "group_size=8", "max_new_tokens=16", "max_extra_draws=1", "temperature=1.0", "lr=5e-4",
          "max_minutes=0"]  # keys both revisions know; an untrained policy rarely stops early, so the budget sets rollout time


def run(tree: Path, out: Path, a) -> list[dict]:
    "One shortened default run with the package of `tree`; its GRPO metrics rows after the first."
    args = [f"output_dir={out}", f"seed={a.seed}", "synthetic_n=64", "synthetic_test_n=4", "synthetic_val_n=0",
            f"sft_steps={a.sft_steps}", "sft_answer_steps=1", f"max_steps={a.steps}", "eval_every=0", "tensorboard=false",
            *RECIPE]  # the same recipe on both sides: the defaults changed between revisions
    env = dict(os.environ, PYTHONPATH=str(tree), TQDM_DISABLE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    subprocess.run([sys.executable, "-m", "easyvideor1.train", *args], check=True, env=env, cwd=out.parent,
                   stdout=subprocess.DEVNULL)
    rows = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["phase"] == "grpo"][1:]


def means(rows: list[dict]) -> dict[str, float]:
    m = {p: sum(r.get(f"time/{p}", 0.0) for r in rows) / len(rows) for p in PHASES}
    return m | {"step": sum(m.values())}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", default="bd8e651", help="the older revision (a git rev of this repository)")
    p.add_argument("--steps", type=int, default=6, help="GRPO steps per run (the first is not timed)")
    p.add_argument("--sft-steps", dest="sft_steps", type=int, default=2, help="warm-start steps before GRPO")
    p.add_argument("--repeats", type=int, default=2,
                   help="pairs of runs, the order flipping every pair (use an even number); every timed step is averaged")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        old = tmp / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(old), a.before], check=True)
        try:
            rows, order = {"before": [], "after": []}, {0: [], 1: []}  # order: runs' rows by place in their pair
            for i in range(a.repeats):
                pair = (("before", old), ("after", ROOT))[::1 if i % 2 == 0 else -1]
                for place, (side, tree) in enumerate(pair):
                    print(f"pair {i + 1}/{a.repeats}, run {place + 1}: {side}", flush=True)
                    got = run(tree, tmp / f"{side}{i}", a)
                    rows[side] += got
                    order[place] += got
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=False)
    b, n = means(rows["before"]), means(rows["after"])
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"\nmean seconds per GRPO step, {len(rows['after'])} steps per side, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '-')}")
    print(f"| phase | before ({a.before}) | after (working tree at {head}) | before / after |\n|---|---|---|---|")
    for k in [*PHASES, "step"]:
        print(f"| {k} | {b[k]:.3f} | {n[k]:.3f} | {b[k] / n[k]:.2f}x |" if n[k] > 0 else f"| {k} | {b[k]:.3f} | {n[k]:.3f} | - |")
    print(f"step speedup: {b['step'] / n['step']:.2f}x")
    first, second = means(order[0])["step"], means(order[1])["step"]
    print(f"order effect: the second run of a pair took {second / first:.2f}x the first's time per step"
          + ("" if a.repeats % 2 == 0 else " (odd --repeats: it is not cancelled in the speedup)"))


if __name__ == "__main__":
    main()
