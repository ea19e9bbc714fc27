"""How often does GRPO learn colour from one hand-over? The default's GRPO phase for several GRPO seeds, one table.

`bench/demo_seeds.py` varies everything at once (the suite, the initial weights, the warm start, GRPO). The default
run's failures are GRPO runs that never find colour while their hand-over is like the others': from seed 2's
one-thread hand-over GRPO seed 2 stayed at chance, seeds 3 and 4 learned colour. So a lever for GRPO is measured by
its *rate* over GRPO seeds from fixed hand-overs, not by one run. This script:

1. makes the hand-over once: the default run (plus the overrides given with `--handover-overrides`) with
   `seed=--handover-seed`, `max_steps=0` and `OMP_NUM_THREADS=--threads`: the warm start alone, checkpointed and
   evaluated at its last step (`<out>/handover-s<seed>-t<threads>`);
2. for each GRPO seed, copies that checkpoint and its logs into a run folder of its own and resumes it with
   `seed=<GRPO seed>` and the overrides given on the command line; the data files are the hand-over's suite
   (`data=`, `val_data=`, `eval_data=`), so only the GRPO run changes: its prompt order and its sampling;
3. prints one Markdown table (the columns of `bench/demo_seeds.py`) and `learned: K/N GRPO seeds reach the target`
   (both tasks >= 0.9, format >= 0.95, colour near chance at the hand-over).

Runs go side by side as long as their threads fit `--cores`; a run whose `final.md` exists is not run again.

    python bench/grpo_seeds.py --handover-seed 2 --grpo-seeds 2 3 4 5       # ~30 min on 2 cores
    python bench/grpo_seeds.py --grpo-seeds 2 3 4 5 --tag beta1 betas=0.5,0.95   # a lever, from the same hand-over
"""
import argparse, json, os, shutil, subprocess, sys, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from demo_seeds import summarise, table  # noqa: E402  (the same row and target as the seed benchmark)


def env_for(threads: int) -> dict:
    return dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), TQDM_DISABLE="1",
                HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


def launch(cmd: list[str], folder: Path, threads: int) -> subprocess.Popen:
    folder.mkdir(parents=True, exist_ok=True)
    log = open(folder / "log.txt", "w")
    return subprocess.Popen([sys.executable, "-m", "easyvideor1.train", *cmd], env=env_for(threads), stdout=log,
                            stderr=subprocess.STDOUT)


def make_handover(folder: Path, seed: int, threads: int, overrides: list[str]) -> Path:
    "The warm start of the default run (seed, threads): its checkpoint at the hand-over."
    ckpts = sorted((folder / "checkpoints").glob("step_*"))
    if (folder / "final.md").exists() and ckpts: return ckpts[-1]
    print(f"hand-over: seed {seed}, {threads} thread(s): {folder}", flush=True)
    t0 = time.time()
    proc = launch([f"seed={seed}", f"output_dir={folder}", "max_steps=0", *overrides], folder, threads)
    if proc.wait(): sys.exit(f"the hand-over run failed (exit {proc.returncode}): see {folder / 'log.txt'}")
    print(f"hand-over done: {(time.time() - t0) / 60:.1f} min", flush=True)
    return sorted((folder / "checkpoints").glob("step_*"))[-1]


def grpo_folder(handover: Path, ckpt: Path, dst: Path):
    "A run folder that resumes at the hand-over: its checkpoint (hard links) and logs, nothing of another GRPO run."
    if dst.exists(): shutil.rmtree(dst)
    (dst / "checkpoints").mkdir(parents=True)
    shutil.copytree(ckpt, dst / "checkpoints" / ckpt.name, copy_function=os.link)
    for name in ("metrics.jsonl", "evals.jsonl"): shutil.copy(handover / name, dst / name)
    if (handover / "best").exists(): shutil.copytree(handover / "best", dst / "best")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--handover-seed", dest="hseed", type=int, default=2, help="seed of the warm start that hands over")
    p.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of every run (the hand-over's too)")
    p.add_argument("--grpo-seeds", dest="gseeds", type=int, nargs="+", default=[2, 3, 4, 5])
    p.add_argument("--cores", type=int, default=os.cpu_count(), help="threads that may run at once")
    p.add_argument("--out", default="runs/grpo-seeds")
    p.add_argument("--tag", default="default", help="names this lever's run folders (`<tag>-g<seed>`)")
    p.add_argument("--handover-overrides", dest="hover", nargs="*", default=[], help="key=value for the warm start")
    p.add_argument("overrides", nargs="*", help="key=value config overrides for every GRPO run")
    a = p.parse_args()
    out = Path(a.out)
    handover = out / f"handover-s{a.hseed}-t{a.threads}"
    ckpt = make_handover(handover, a.hseed, a.threads, a.hover)
    suite = handover / "suite"
    data = [f"data={suite / 'train.jsonl'}", f"val_data={suite / 'val.jsonl'}", f"eval_data={suite / 'test.jsonl'}",
            f"cache_dir={handover / 'cache'}"]  # the hand-over's data and frame cache (atomic writes: safe to share)
    base = handover / a.tag
    running = []
    def finish(g, proc, t0):
        if proc.returncode: sys.exit(f"GRPO seed {g} failed (exit {proc.returncode}): see {base / f'g{g}' / 'log.txt'}")
        (base / f"g{g}" / "wall_minutes.txt").write_text(f"{(time.time() - t0) / 60:.2f}\n")
        print(f"done GRPO seed {g}: {(time.time() - t0) / 60:.1f} min", flush=True)
    for g in a.gseeds:
        dst = base / f"g{g}"
        if (dst / "final.md").exists(): continue
        while running and (len(running) + 1) * a.threads > a.cores:
            time.sleep(5)
            for j in [j for j in running if j[1].poll() is not None]:
                running.remove(j)
                finish(*j)
        grpo_folder(handover, ckpt, dst)
        print(f"start GRPO seed {g}: {dst}", flush=True)
        cmd = [f"seed={g}", f"output_dir={dst}", "resume=true", *data, *a.overrides]
        running.append((g, launch(cmd, dst, a.threads), time.time()))
    for j in running:
        j[1].wait()
        finish(*j)
    rows = [summarise(base / f"g{g}", g, a.threads) for g in a.gseeds]
    md = table(rows).replace("| seed |", "| GRPO seed |", 1)
    head = f"hand-over: seed {a.hseed}, {a.threads} thread(s); GRPO overrides: {' '.join(a.overrides) or '(none)'}"
    (base / "summary.json").write_text(json.dumps(rows, indent=1))
    (base / "summary.md").write_text(head + "\n\n" + md + "\n")
    print(head)
    print(md)
    print(f"learned: {sum(r['target'] for r in rows)}/{len(rows)} GRPO seeds reach the target")


if __name__ == "__main__":
    main()
