"""Prove the GPU path in one run: the default recipe, every config path, the step benches and FSDP2, one table.

Run by `bench/gpu_check.sh` on a lent GPU (one H200: steps a, b, c, d and f took 9.6 minutes on 2026-12-04, before the vision tower's
batched windows and with 3 train_phases steps; e did not fit in the 10-minute call, so it runs last), and with `--cpu` at
tiny shapes on the CPU, where a test runs it under the device guard (`tests/device_guard.py`) so that it cannot rot.
Steps, each a row of the table:

- (a) the default recipe, shortened, end to end (warm start, hand-over evaluation, GRPO, best and last checkpoints),
  then the same run stopped half-way and resumed: the resumed run must end where the uninterrupted one did;
- (b) one warm-start and one GRPO step of every config path in `PATHS` (the CPU device test runs the same list), and
  the benchmark evaluator with the HF engine on a saved model;
- (c) `bench/train_phases.py`: the trainer's per-phase step time, frame cache on and off (the Qwen2.5-VL-3B shape);
- (d) `bench/step.py`: one GRPO step naive vs shared prefix (the Qwen3-VL-8B shape);
- (e) `bench/memory.py`: peak memory of one update, naive vs shared prefix, 8k and 16k tokens (the 8B shape);
- (f) FSDP2 in one process (NCCL on a GPU, gloo on the CPU) with bf16 parameters and fp32 gradient reduction.

Each row is written to `<out>/gpu_check.md` and `<out>/gpu_check.json` as soon as its step ends (a run stopped at its
time limit keeps what it finished); every command's output goes to `<out>/gpu_check.log`. The synthetic suites are
made first, with PyAV (`--prepare` alone makes them: the GPU machine has no PyAV, so they travel in `gpu_suites/`).

    python bench/gpu_check.py --cpu                  # tiny shapes on the CPU (minutes)
    python bench/gpu_check.py --prepare              # the suites for a GPU run, in gpu_suites/
    bash bench/gpu_check.sh                          # on the lent GPU (see its header)
"""
from __future__ import annotations

import argparse, gc, json, os, shutil, subprocess, sys, time, traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

# Every config path a run can take, each as overrides of BASE: a warm-start step and a GRPO step each.
BASE = dict(model="qwen2_5_vl:tiny", synthetic_n=4, synthetic_test_n=2, synthetic_val_n=1, prompts_per_step=2,
            group_size=2, micro_batch_size=2, sft_steps=1, sft_batch_size=2, max_new_tokens=8, max_steps=1,
            eval_every=1, eval_n=2, save_every=1, tensorboard=False, lr=1e-2, sft_lr=1e-2, warmup_steps=1,
            lr_decay_steps=0)
PATHS = {
    # whole trajectories, format-only samples through the output rows, option smoothing; shared prefix, dynamic
    # sampling, offline `replace`, the KL reference; evaluation at the hand-over with a best checkpoint
    "default": {},
    # answer-only steps first, the format prior through the network; the naive (unshared) pass, offline `add`,
    # old log-probs (two updates a batch), DAPO's truncation mask and overlong penalty
    "answer_first_naive": dict(sft_steps=2, sft_answer_steps=1, sft_format_prior="network", shared_prefix=False,
                               offline_mode="add", dynamic_sampling=False, updates_per_batch=2, mask_truncated=True,
                               overlong_buffer=4),
    # PEFT adapters (the reference is the policy with its hand-over adapters), the vision-feature cache, checkpointing
    # of the vision blocks and decoder layers, the rollout correction
    "lora_feature_cache": dict(lora_rank=4, gradient_checkpointing=True, rollout_is="tis"),
    # FSDP2 over a one-process group, with checkpointing
    "fsdp2": dict(parallel="fsdp2", gradient_checkpointing=True),
    # the other estimators and losses: batch-whitened advantages (a statistics reduce), GSPO
    "reinforce_pp_gspo": dict(adv_method="reinforce_pp", loss_method="gspo", loss_agg="seq_mean_token_mean",
                              dynamic_sampling=False),
    "dr_grpo_cispo_luffy": dict(adv_method="dr_grpo", loss_method="cispo", loss_agg="seq_mean_token_sum_norm",
                                offpolicy="luffy", dynamic_sampling=False, beta=0.0),
}
# (f): FSDP2 with bf16 parameters; the reduction dtype is the config's default (float32)
FSDP2_BF16 = dict(parallel="fsdp2", dtype="bfloat16")


def shapes(cpu: bool) -> dict:
    "The arguments of each step at the GPU shapes, or tiny ones on the CPU."
    if cpu:
        return dict(
            default=dict(synthetic_n=2, synthetic_test_n=2, synthetic_val_n=1, sft_steps=2, max_steps=2, eval_every=1,
                         prompts_per_step=2, sft_batch_size=2, group_size=2, max_new_tokens=8),
            phases=["--frames", "4", "--size", "112", "--steps", "2", "--prompts", "2", "--G", "2", "--new-tokens", "12"],
            step=["--frames", "4", "--res", "112", "--G", "2", "--new-tokens", "4", "--chunk", "2", "--checkpoint",
                  "--engine", "loop"],
            memory=["--lengths", "128", "--paths", "naive,shared", "--checkpointing-modes", "on"])
    return dict(
        default=dict(synthetic_n=64, synthetic_test_n=16, synthetic_val_n=8, sft_steps=20, max_steps=4, eval_every=2),
        phases=["--model", "qwen2_5_vl:3b", "--dtype", "bfloat16", "--frames", "64", "--size", "448", "--steps", "2",
                "--prompts", "2", "--G", "4", "--new-tokens", "64", "--checkpointing"],
        step=["--family", "qwen3_vl", "--size", "8b", "--dtype", "bfloat16", "--device", "cuda", "--frames", "128",
              "--res", "512", "--G", "8", "--new-tokens", "128", "--completion-len", "512", "--chunk", "4",
              "--checkpoint", "--engine", "loop"],
        memory=["--lengths", "8192,16384", "--family", "qwen3_vl", "--size", "8b", "--dtype", "bfloat16", "--device",
                "cuda", "--paths", "naive,shared", "--checkpointing-modes", "on"])


class Report:
    "The table, written after every row: Markdown and JSON under `out`."
    def __init__(self, out: Path, device: str):
        self.out, self.device, self.rows = out, device, []

    def add(self, step: str, what: str, ok: bool, seconds: float, numbers: str):
        self.rows.append(dict(step=step, what=what, ok=ok, seconds=round(seconds, 1), numbers=numbers))
        print(f"[gpu_check] {step} {what}: {'ok' if ok else 'FAILED'} ({seconds:.0f} s) {numbers}", flush=True)
        md = [f"gpu_check on {self.device}\n", "| step | what | result | seconds | numbers |", "|---|---|---|---|---|"]
        md += [f"| {r['step']} | {r['what']} | {'ok' if r['ok'] else '**FAILED**'} | {r['seconds']} | {r['numbers']} |"
               for r in self.rows]
        for name, text in (("gpu_check.md", "\n".join(md) + "\n"),
                           ("gpu_check.json", json.dumps(dict(device=self.device, rows=self.rows), indent=1))):
            tmp = self.out / f".{name}.tmp"
            tmp.write_text(text)
            tmp.replace(self.out / name)


def log(out: Path, text: str):
    with open(out / "gpu_check.log", "a") as f: f.write(text)


def free():
    "Drop what the last run left on the device."
    import torch
    gc.collect()
    if torch.cuda.is_available(): torch.cuda.empty_cache()


def cfg_of(**kw):
    from easyvideor1.config import load_config
    return load_config(overrides=kw)


def prepare(suites: Path, cpu: bool):
    "The synthetic suites every step reads (PyAV writes them): the default run's, the paths', the phases bench's."
    from easyvideor1.config import prepare_data
    from train_phases import make_bench_suite, parse_args as phases_args
    sh = shapes(cpu)
    for name, kw in (("default", dict(sh["default"])), ("paths", dict(BASE))):
        if name == "default": kw.update(tensorboard=False)
        prepare_data(cfg_of(**{**kw, "output_dir": str(suites / name)}), True, lambda: None)
    make_bench_suite(suites / "phases" / "suite", phases_args(sh["phases"]))


def with_suite(suites: Path, name: str, out: Path) -> Path:
    "A run folder whose suite is the prepared one (a copy: a run never writes into the shared suites)."
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "suite").exists(): shutil.copytree(suites / name / "suite", out / "suite")
    return out


def rows_of(out: Path) -> list[dict]:
    return [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]


def updated(rows: list[dict]) -> bool:
    "Every GRPO step of the run has an update (a step without signal would time and test nothing)."
    grpo = [r for r in rows if r["phase"] == "grpo"]
    return bool(grpo) and all(not r.get("no_signal") for r in grpo)


def step_a(rep: Report, work: Path, suites: Path, cpu: bool):
    "(a) The default recipe shortened; then a copy cut back to a mid-GRPO checkpoint, as a crash leaves it, resumed."
    from easyvideor1.checkpoint import checkpoint_dirs
    from easyvideor1.train import train
    kw = dict(shapes(cpu)["default"], tensorboard=False, save_every=1, keep_checkpoints=1000)
    t = time.time()
    full = with_suite(suites, "default", work / "a_full")
    train(cfg_of(**kw, output_dir=str(full)))
    free()
    rows = rows_of(full)
    last = [r for r in rows if r["phase"] == "grpo"][-1]
    rep.add("a", f"default recipe, {kw['sft_steps']} warm-start + {kw['max_steps']} GRPO steps",
            (full / "final.md").exists() and (full / "best").exists(), time.time() - t,
            f"last GRPO step: reward {last['reward']:.3f}, format {last['format']:.2f}; final.md and best/ written")
    t = time.time()
    half = kw["sft_steps"] + kw["max_steps"] // 2  # after the hand-over: the reference comes back from disk too
    part = work / "a_part"
    shutil.copytree(full, part)
    for ck in checkpoint_dirs(part):
        if int(ck.name.split("_")[-1]) > half: shutil.rmtree(ck)
    (part / "params_rank0.sha256").unlink()
    train(cfg_of(**kw, output_dir=str(part), resume=True))
    free()
    a, b = rows_of(full), rows_of(part)
    same_steps = [r["step"] for r in a] == [r["step"] for r in b]
    gap = max((abs(x[k] - y[k]) for x, y in zip(a, b) for k in ("loss", "reward") if k in x and k in y), default=0.0)
    digest = (full / "params_rank0.sha256").read_text() == (part / "params_rank0.sha256").read_text()
    ok = same_steps and (digest if cpu else gap < 0.05)  # a GPU's kernels need not repeat bit for bit
    rep.add("a", f"resume from the checkpoint of step {half}", ok, time.time() - t,
            f"steps equal: {same_steps}; max metric gap {gap:.2e}; final weights {'equal' if digest else 'differ'}")


def step_b(rep: Report, work: Path, suites: Path):
    "(b) One warm-start and one GRPO step of every config path; the evaluator with the HF engine."
    from easyvideor1.train import train
    for name, kw in PATHS.items():
        t = time.time()
        out = with_suite(suites, "paths", work / f"b_{name}")
        train(cfg_of(**{**BASE, **kw, "output_dir": str(out)}))
        free()
        rows = rows_of(out)
        ok = rows[0]["phase"] == "sft" and updated(rows)  # a warm-start step, then GRPO steps that updated
        phases = ",".join(r["phase"] for r in rows)
        rep.add("b", f"path {name}", ok, time.time() - t,
                f"phases {phases}; updates {sum(1 for r in rows if r['phase'] == 'grpo' and not r.get('no_signal'))}")
    t = time.time()
    out = work / "b_default"
    train(cfg_of(**{**BASE, "output_dir": str(out), "max_steps": 2, "resume": True}))
    free()
    rows = rows_of(out)
    rep.add("b", "path default: checkpoint and resume", [r["step"] for r in rows] == [0, 1, 2] and updated(rows),
            time.time() - t, f"steps {[r['step'] for r in rows]}")
    t = time.time()
    from easyvideor1.evaluate import main as evaluate
    res = work / "b_eval"
    code = evaluate(["run", "--model", str(out / "best"), "--bench", str(out / "suite" / "test.jsonl"), "--out",
                     str(res), "--cache", str(work / "b_eval_cache"), "--max-new-tokens", "8", "--max-frames", "4",
                     "--no-progress"])
    free()
    lines = (res / "test.jsonl").read_text().splitlines() if (res / "test.jsonl").exists() else []
    rep.add("b", "evaluator, HF engine, best checkpoint", code == 0 and len(lines) > 0, time.time() - t,
            f"{len(lines)} items scored")


def compact(line: str) -> str:
    "A bench's table row as `name a / b (ratio)`; header and rule rows dropped; other lines as they are."
    line = line.strip()
    if not line.startswith("|"): return line
    cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
    if set("".join(cells)) <= set("-") or cells[0] in ("phase", "step", "training"): return ""
    return f"{cells[0]} " + " / ".join(c for c in cells[1:] if c)


def bench(rep: Report, out: Path, step: str, what: str, script: str, args: list[str], keep: list[str],
          extra_ok=None):
    "Run a bench script in its own process; the row keeps its closing lines that start with `keep`."
    t = time.time()
    cmd = [sys.executable, str(ROOT / "bench" / script), *args]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONUNBUFFERED="1", TQDM_DISABLE="1"))
    log(out, f"\n$ {' '.join(cmd)}\n{r.stdout}\n{r.stderr[-20000:]}\n")
    lines = [compact(l) for l in r.stdout.splitlines() if l.strip().startswith(tuple(keep))]
    lines = [l for l in lines if l]
    ok = r.returncode == 0 and (extra_ok is None or extra_ok(r.stdout))
    why = "" if r.returncode == 0 else f"exit {r.returncode}: {(r.stderr.strip().splitlines() or [''])[-1][:200]}"
    rep.add(step, what, ok, time.time() - t, "; ".join(lines)[:600] or why)
    return r


def step_f(rep: Report, work: Path, suites: Path):
    "(f) FSDP2 in one process with bf16 parameters, fp32 gradient reduction."
    from easyvideor1.train import train
    t = time.time()
    out = with_suite(suites, "paths", work / "f_fsdp2_bf16")
    train(cfg_of(**{**BASE, **FSDP2_BF16, "output_dir": str(out)}))
    free()
    rows = rows_of(out)
    backend = "nccl" if __import__("torch").cuda.is_available() else "gloo"
    rep.add("f", f"FSDP2, one process ({backend}), bf16 parameters, fp32 reduction", updated(rows), time.time() - t,
            f"phases {','.join(r['phase'] for r in rows)}; loss {[round(r['loss'], 4) for r in rows if 'loss' in r]}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpu", action="store_true", help="tiny shapes on the CPU (what CI runs)")
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpu_check"), help="where the table and log go")
    p.add_argument("--work", default="", help="run folders (default: a temporary folder)")
    p.add_argument("--suites", default=str(ROOT / "gpu_suites"), help="the prepared suites (made when missing)")
    p.add_argument("--prepare", action="store_true", help="only make the suites")
    p.add_argument("--steps", default="a,b,f,d,c,e", help="which steps, in this order")
    a = p.parse_args(argv)
    suites = Path(a.suites) / ("cpu" if a.cpu else "gpu")
    if a.prepare or not (suites / "phases" / "suite" / "test.jsonl").exists():
        prepare(suites, a.cpu)
        if a.prepare: print(f"suites in {suites}"); return 0
    import torch
    if not a.cpu and not torch.cuda.is_available(): raise SystemExit("gpu_check: no GPU here (use --cpu)")
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    import tempfile
    work = Path(a.work or tempfile.mkdtemp(prefix="gpu_check_"))
    device = "cpu" if a.cpu else torch.cuda.get_device_name(0)
    rep = Report(out, f"{device}, torch {torch.__version__}, transformers {__import__('transformers').__version__}")
    sh = shapes(a.cpu)
    steps = dict(
        a=lambda: step_a(rep, work, suites, a.cpu),
        b=lambda: step_b(rep, work, suites),
        f=lambda: step_f(rep, work, suites),
        c=lambda: bench(rep, out, "c", "train_phases: frame cache on / off" + ("" if a.cpu else ", Qwen2.5-VL-3B shape"),
                        "train_phases.py", [*sh["phases"], "--workdir", str(work / "c"), "--suite",
                                            str(suites / "phases" / "suite"), "--json", str(out / "train_phases.json")],
                        ["|", "load speedup", "step speedup"]),
        d=lambda: bench(rep, out, "d", "step: naive vs shared prefix" + ("" if a.cpu else ", Qwen3-VL-8B shape"),
                        "step.py", sh["step"], ["| rollout", "| log-prob", "| update", "| step", "step speedup"]),
        e=lambda: bench(rep, out, "e", "memory of one update" + ("" if a.cpu else ", 8B shape"), "memory.py",
                        sh["memory"], ["| full"],
                        extra_ok=lambda s: "error" not in s.split("| training |")[-1] and "over " not in s),
    )
    for s in a.steps.split(","):
        t = time.time()
        try: steps[s]()
        except Exception as e:  # a failed step is a row; the next steps still run
            log(out, f"\nstep {s} failed:\n{traceback.format_exc()}\n")
            rep.add(s, "step raised", False, time.time() - t, f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
            free()
    print((out / "gpu_check.md").read_text())
    failed = [r for r in rep.rows if not r["ok"]]
    print(f"gpu_check: {len(rep.rows) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
