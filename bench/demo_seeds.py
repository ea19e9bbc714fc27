"""Does the default run hold? The README's main job for several seeds and thread counts, one table.

Runs `python -m easyvideor1.train` (the embedded default recipe, `configs/tiny-cpu.yaml`) once per
(seed, OMP_NUM_THREADS) pair: seeds 0, 1, 2 and 1 and 2 threads by default. The thread count changes
the order of float reductions, so each pair follows its own float path; the seed changes the synthetic
suite, the initial weights, the data order and the sampling. Runs go side by side as long as their
threads fit the cores (`--cores`, default all), each in its own output folder; a run whose `final.md`
exists is not run again, so an interrupted benchmark resumes where it stopped.

A run reaches the target when, at its last evaluation, held-out accuracy is >= 0.9 on every task and
format >= 0.95, and a task without offline trajectories (colour) was near chance after the warm start
(<= 0.7): GRPO, not the warm start, learned it. Prints one Markdown table (also written to
`<out>/summary.md`, with the rows in `<out>/summary.json`), then `robust: K/N runs reach the target`.

    python bench/demo_seeds.py                          # 6 runs of the default recipe, ~50 minutes on 2 cores
    python bench/demo_seeds.py --seeds 0 --threads 2    # one run
    python bench/demo_seeds.py lr=3e-4                  # any config override goes to every run
    python bench/demo_seeds.py --config configs/qwen35-tiny-cpu.yaml --threads 1   # a preset instead of the default
"""
import argparse, json, os, subprocess, sys, time
from pathlib import Path

TARGET_ACC, TARGET_FORMAT, CHANCE_MAX = 0.9, 0.95, 0.7


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()] if path.exists() else []


def task_rows(table: dict) -> dict[str, dict]:
    "Per-task rows of a per-type table: 'multiple choice · synthetic/color' -> 'color'; a type without sources is its own task."
    tasks = {k.split(" · ", 1)[1].rsplit("/", 1)[-1]: v for k, v in table.items() if " · " in k}
    return tasks or {k: v for k, v in table.items() if k != "all"}


def summarise(out: Path, seed: int, threads: int) -> dict:
    "One run's row: per-task accuracy after the warm start and at the end, format, best step, time."
    ckpt = sorted((out / "checkpoints").glob("step_*"))[-1]
    cfg = json.loads((ckpt / "trainer_state.json").read_text())["config"]
    evals = read_jsonl(out / "evals.jsonl")
    warm = next((e["per_type"] for e in evals if e["step"] == cfg["sft_steps"]), None)
    final = task_rows(evals[-1]["per_type"])
    best = json.loads((out / "best" / "best.json").read_text()) if (out / "best" / "best.json").exists() else None
    offline = {t.strip() for t in cfg["synthetic_offline_tasks"].split(",") if t.strip()}
    learned_by_grpo = [t for t in final if offline and t not in offline]
    warm_rows = task_rows(warm) if warm else {}
    metrics = [m for m in read_jsonl(out / "metrics.jsonl") if m.get("phase") == "grpo"]
    wall = out / "wall_minutes.txt"
    row = dict(seed=seed, threads=threads, minutes=float(wall.read_text()) if wall.exists() else None, final={t: v["accuracy"] for t, v in final.items()},
               format=min(v["format"] for v in final.values()), warm={t: warm_rows[t]["accuracy"] for t in warm_rows},
               best_step=best["step"] if best else None, grpo_steps=len(metrics),
               no_signal=sum(m.get("no_signal", 0) for m in metrics),
               max_response_len=max((m["response_len"] for m in metrics), default=0.0))
    row["target"] = (all(a >= TARGET_ACC for a in row["final"].values()) and row["format"] >= TARGET_FORMAT
                     and all(row["warm"].get(t, 0.0) <= CHANCE_MAX for t in learned_by_grpo))
    return row


def table(rows: list[dict]) -> str:
    tasks = sorted({t for r in rows for t in r["final"]})
    head = ["seed", "threads", *[f"{t} after warm start" for t in tasks], *[f"{t} final" for t in tasks], "format final",
            "best step", "no-signal steps", "longest mean response", "minutes", "target"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["seed"], r["threads"], *[f"{r['warm'].get(t, float('nan')):.3f}" for t in tasks],
                 *[f"{r['final'][t]:.3f}" for t in tasks], f"{r['format']:.3f}", r["best_step"],
                 f"{r['no_signal']}/{r['grpo_steps']}", f"{r['max_response_len']:.1f}",
                 "" if r["minutes"] is None else f"{r['minutes']:.1f}", "yes" if r["target"] else "**no**"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="OMP_NUM_THREADS values")
    p.add_argument("--cores", type=int, default=os.cpu_count(), help="threads that may run at once")
    p.add_argument("--out", default="runs/demo-seeds")
    p.add_argument("--config", help="a preset YAML for every run (default: the embedded tiny-cpu recipe)")
    p.add_argument("overrides", nargs="*", help="key=value config overrides for every run")
    a = p.parse_args()
    out = Path(a.out)
    jobs = [(s, t) for t in a.threads for s in a.seeds]
    running = []
    def start(s, t):
        d = out / f"seed{s}-threads{t}"
        d.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, OMP_NUM_THREADS=str(t), MKL_NUM_THREADS=str(t), TQDM_DISABLE="1",
                   HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        cmd = [sys.executable, "-m", "easyvideor1.train", f"seed={s}", f"output_dir={d}", *a.overrides]
        if a.config: cmd += ["--config", a.config]
        log = open(d / "log.txt", "w")
        print(f"start seed {s}, {t} thread(s): {d}", flush=True)
        return (s, t, subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), time.time())
    def finish(s, t, proc, t0):
        if proc.returncode: sys.exit(f"seed {s}, {t} thread(s) failed (exit {proc.returncode}): see its log.txt")
        (out / f"seed{s}-threads{t}" / "wall_minutes.txt").write_text(f"{(time.time() - t0) / 60:.2f}\n")
        print(f"done seed {s}, {t} thread(s): {(time.time() - t0) / 60:.1f} min", flush=True)
    for s, t in jobs:
        if (out / f"seed{s}-threads{t}" / "final.md").exists(): continue
        while running and sum(j[1] for j in running) + t > a.cores:
            time.sleep(5)
            for j in [j for j in running if j[2].poll() is not None]:
                running.remove(j)
                finish(*j)
        running.append(start(s, t))
    for j in running:
        j[2].wait()
        finish(*j)
    rows = [summarise(out / f"seed{s}-threads{t}", s, t) for s, t in jobs]
    md = table(rows)
    (out / "summary.json").write_text(json.dumps(rows, indent=1))
    (out / "summary.md").write_text(md + "\n")
    print(md)
    print(f"robust: {sum(r['target'] for r in rows)}/{len(rows)} runs reach the target")


if __name__ == "__main__":
    main()
