"""The two changes that took `make demo` from 8 min 02 s to ~7.6 min, each measured before and after in this process,
each checked to change no output:

1. `synthetic.make_suite` writing the default suite (2 x 1000 training, 2 x 32 validation, 2 x 64 test clips) with one
   thread (`workers=1`, as before) vs two (`workers=2`, the default): the files are compared byte for byte;
2. `HFEngine.generate` of G completions for each of P synthetic prompts (tiny Qwen2.5-VL, T = 1, up to N tokens) with
   transformers' empty suppress-tokens processor (`suppress_tokens=[]`, as before: a pass over the 151,936-token
   vocabulary every decode step) vs without it (now): the sampled tokens and their log-probs are compared exactly.

Prints the mean seconds of each side, the ratios, and whether the outputs agree. Each side runs `repeats` times, the
order alternating, so neither always runs second.

    python bench/demo_speed.py [repeats]   # default 2 (the suite part takes ~1 min a repeat on 2 cores)
"""
import hashlib, shutil, sys, tempfile, time
from pathlib import Path
import torch
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import easyvideor1.rollout as rollout
from easyvideor1.config import TrainConfig
from easyvideor1.models import qwen_processor, qwen_vlm
from easyvideor1.rollout import HFEngine, SamplingConfig
from easyvideor1.synthetic import make_suite


def suite_args(cfg: TrainConfig) -> dict:
    "The arguments `config.prepare_data` gives `make_suite` for a config."
    names = lambda v: [t.strip() for t in v.split(",") if t.strip()]
    return dict(n_per_task=cfg.synthetic_n, n_test=cfg.synthetic_test_n, n_val=cfg.synthetic_val_n, seed=cfg.seed,
                think=cfg.synthetic_think, tasks=names(cfg.synthetic_tasks), offline_fraction=cfg.offline_fraction,
                offline_tasks=names(cfg.synthetic_offline_tasks) or None, task_options=cfg.synthetic_task_options)


def digest(root: Path) -> str:
    "sha1 over every file of a suite folder, names and bytes, in name order."
    h = hashlib.sha1()
    for p in sorted(q for q in root.rglob("*") if q.is_file()):
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def time_suite(workers: int, tmp: Path) -> tuple[float, str]:
    out = tmp / f"suite-w{workers}"
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    make_suite(out, workers=workers, **suite_args(TrainConfig()))
    return time.perf_counter() - t, digest(out)


def generate(engine, prompts, sc, old: bool):
    "The engine's groups, with the old empty suppress-tokens processor (`old`) or without it."
    make = rollout._generation_config
    if old:  # as before: `suppress_tokens=[]` builds a processor that masks nothing
        rollout._generation_config = lambda *a, **k: _with_empty_suppress(make(*a, **k))
    try:
        torch.manual_seed(0)
        t = time.perf_counter()
        groups = engine.generate(prompts, sc)
        return time.perf_counter() - t, [[(c.token_ids, c.logprobs) for c in g] for g in groups]
    finally:
        rollout._generation_config = make


def _with_empty_suppress(gc):
    gc.suppress_tokens = []
    return gc


def main():
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    tmp = Path(tempfile.mkdtemp())
    try:
        # 1. the suite
        t1, t2, same = [], [], True
        for r in range(repeats):
            for w in ((1, 2) if r % 2 == 0 else (2, 1)):
                s, d = time_suite(w, tmp)
                (t1 if w == 1 else t2).append(s)
            same &= digest(tmp / "suite-w1") == digest(tmp / "suite-w2")
        a, b = sum(t1) / repeats, sum(t2) / repeats
        print(f"make_suite, default suite: 1 thread {a:.1f} s, 2 threads {b:.1f} s, speedup {a / b:.2f}x, "
              f"same files: {same}")
        # 2. generation
        from easyvideor1.config import contracts
        from easyvideor1.step import load_prompts
        from easyvideor1.validate import validate_rows
        model, proc = qwen_vlm("qwen2_5_vl", "tiny", seed=0), qwen_processor("qwen2_5_vl")
        samples = validate_rows(tmp / "suite-w2" / "train.jsonl", probe=False).samples[::125][:16]  # both tasks
        vc, ic = contracts(TrainConfig(), "qwen2_5_vl")
        prompts = load_prompts(samples, proc, vc, ic)[0]
        engine, sc = HFEngine(model, proc), SamplingConfig(n=4, temperature=1.0, max_new_tokens=16)
        generate(engine, prompts[:2], sc, old=False)  # warm-up
        old_t, new_t, same = [], [], True
        for r in range(repeats):
            outs = {}
            for old in ((True, False) if r % 2 == 0 else (False, True)):
                s, outs[old] = generate(engine, prompts, sc, old)
                (old_t if old else new_t).append(s)
            same &= outs[True] == outs[False]
        a, b = sum(old_t) / repeats, sum(new_t) / repeats
        print(f"HFEngine.generate, {len(prompts)} prompts x {sc.n} x up to {sc.max_new_tokens} tokens: with the empty "
              f"suppress processor {a:.2f} s, without {b:.2f} s, speedup {a / b:.2f}x, same tokens and log-probs: {same}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
