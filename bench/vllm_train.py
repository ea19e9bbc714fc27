"""Trainer step time with the HF vs the vLLM engine, and the rollout-vs-trainer gap with and without the released
Qwen2.5-VL position rule, measured in one run on the tiny models (CPU, fp32).

    VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python bench/vllm_train.py [--steps 4] [--out runs/bench-vllm-train]

Each setting is one `python -m easyvideor1.train` process; "transformers positions" runs the same trainer with
`use_released_positions` switched off (what the trainer did before). Step time: the mean over GRPO steps after the
first (which includes vLLM's warm-up) of the logged phase times. Each group carries one offline trajectory (reward 1 against
the untrained model's 0s), so every step has signal and updates: the gap is measured on the update's log-prob pass."""
import argparse, json, os, subprocess, sys
from pathlib import Path

CFG = dict(synthetic_n=4, synthetic_test_n=1, synthetic_val_n=0, synthetic_tasks="direction", offline_mode="replace", prompts_per_step=2,
           group_size=4, sft_steps=0, max_new_tokens=16, eval_every=0, eval_n=1, tensorboard="false", lr=1e-2, warmup_steps=1,
           lr_decay_steps=0, video_max_frames=8, dynamic_sampling="false", beta=0.0)
OLD_RULE = ("import easyvideor1.train as T, easyvideor1.rollout as R, easyvideor1.checkpoint as C; "
            "T.use_released_positions = R.use_released_positions = C.use_released_positions = lambda m: False; T.main()")
# (checkpoint: where the reference model is built since 912daf9; this benchmark runs with beta=0, so it builds none)


def run(out: Path, old_rule: bool, **kw) -> list[dict]:
    args = [f"{k}={v}" for k, v in dict(CFG, output_dir=str(out), **kw).items()]
    cmd = [sys.executable, "-c", f"if __name__ == '__main__': {OLD_RULE}", *args] if old_rule else [sys.executable, "-m", "easyvideor1.train", *args]
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"), HF_HUB_OFFLINE="1")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode: raise SystemExit(f"{cmd}: exit {p.returncode}\n{p.stderr[-4000:]}")
    return [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]


def summary(rows) -> dict:
    g = [r for r in rows if r["phase"] == "grpo"][1:]  # the first step holds the engine's warm-up
    step = [sum(v for k, v in r.items() if k.startswith("time/")) for r in g]
    mean = lambda k: sum(r[k] for r in g if k in r) / max(sum(k in r for r in g), 1)  # the gap: steps that updated
    return dict(step_s=round(sum(step) / len(step), 2), rollout_s=round(mean("time/rollout"), 2), update_s=round(mean("time/update"), 2),
                sync_s=round(mean("time/sync"), 3), gap_abs=f"{mean('logp_gap_abs'):.2e}", gap_max=f"{max((r['logp_gap_max'] for r in g if 'logp_gap_max' in r), default=float('nan')):.2e}",
                corr=round(mean("logp_corr"), 6), steps=len(g))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--out", default="runs/bench-vllm-train")
    a = ap.parse_args()
    out = Path(a.out)
    settings = [("qwen2_5_vl", "hf", False), ("qwen2_5_vl", "vllm", False), ("qwen2_5_vl", "vllm", True),
                ("qwen3_vl", "hf", False), ("qwen3_vl", "vllm", False)]
    print("| model | engine | positions | step s | rollout s | update s | sync s | mean abs gap | max gap | corr |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for fam, engine, old in settings:
        name = f"{fam}-{engine}" + ("-transformers-positions" if old else "")
        s = summary(run(out / name, old, model=f"{fam}:tiny", engine=engine, max_steps=a.steps))
        pos = "transformers 5" if old else ("released (= vLLM)" if fam == "qwen2_5_vl" else "model's own (agree)")
        print(f"| {fam} | {engine} | {pos} | {s['step_s']} | {s['rollout_s']} | {s['update_s']} | {s['sync_s']} | {s['gap_abs']} | "
              f"{s['gap_max']} | {s['corr']} |", flush=True)


if __name__ == "__main__":
    main()
