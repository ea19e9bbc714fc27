"""Asynchronous evaluation pipeline vs a sequential load-then-generate loop, same items, same engine, one run.

    python bench/evaluate.py [--tasks N] [--n-test K] [--size PX] [--frames F] [--max-new-tokens T]

Both sides decode every video from its file (no frame cache) and generate with the tiny Qwen2.5-VL on
CPU. The sequential side loads one item, generates, scores, then loads the next. The pipeline side runs
loader threads into a bounded queue while the engine thread generates (batch 1, so the only difference
is the overlap), and once more with batches of 4. Prints a table and the ratios.
"""
import argparse, os, tempfile, time
from pathlib import Path

import torch

from easyvideor1.evaluate import (MediaLoader, ResultsFile, contracts_for, load_benchmark, make_manifest, run_pipeline, score_response,
                                  to_sample)
from easyvideor1.models import qwen_processor, qwen_vlm
from easyvideor1.rollout import HFEngine, SamplingConfig
from easyvideor1.synthetic import make_suite


def sequential(items, engine, loader, sampling):
    "Load, generate, score: one item at a time."
    for it in items:
        prompt = engine.prompt(to_sample(it), loader(it))
        score_response(to_sample(it), engine.generate([prompt], sampling)[0][0].text)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n-test", type=int, default=3, help="test items per synthetic task (8 tasks)")
    p.add_argument("--size", type=int, default=224, help="video side, pixels")
    p.add_argument("--frames", type=int, default=48, help="frames per source video (sampled down to --max-frames)")
    p.add_argument("--max-frames", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--loaders", type=int, default=2)
    a = p.parse_args()
    torch.manual_seed(0)
    work = Path(tempfile.mkdtemp(prefix="bench-evaluate-"))
    suite = make_suite(work / "suite", n_per_task=0, n_test=a.n_test, seed=0, size=a.size, n_frames=a.frames, speed=(2, 3))
    _, items = load_benchmark(suite / "test.jsonl")
    vc, ic = contracts_for("qwen2_5_vl", fps=2.0, max_frames=a.max_frames)
    loader = MediaLoader(suite, vc, ic, cache=None)  # decode every time on both sides
    engine = HFEngine(qwen_vlm("qwen2_5_vl", "tiny", seed=0).eval(), qwen_processor("qwen2_5_vl"))
    greedy = SamplingConfig(n=1, temperature=0, max_new_tokens=a.max_new_tokens)
    sequential(items[:2], engine, loader, greedy)  # warm-up (first-call overheads), not timed

    t0 = time.perf_counter(); sequential(items, engine, loader, greedy); t_seq = time.perf_counter() - t0
    times = {"sequential load-then-generate": t_seq}
    for bs in (1, 4):
        with ResultsFile(work / f"pipe{bs}.jsonl", make_manifest(engine="hf")) as rf:
            t0 = time.perf_counter()
            run_pipeline(items, engine, rf, loader, sampling=greedy, n_loaders=a.loaders, batch_size=bs, progress=False)
            times[f"async pipeline, batch {bs}"] = time.perf_counter() - t0
        assert len(rf.rows) == len(items) and not any(r["error"] for r in rf.rows)

    load_s = sum((lambda t: (loader(it), time.perf_counter() - t)[1])(time.perf_counter()) for it in items)
    print(f"{len(items)} items, {a.size}px x {a.frames} source frames -> {a.max_frames} sampled, {a.max_new_tokens} new tokens, "
          f"{a.loaders} loader threads, {os.cpu_count()} CPUs; decoding alone takes {load_s:.2f} s")
    print(f"| {'mode':32s} | seconds | items/s | speed-up vs sequential |\n|{'-' * 34}|---------|---------|------------------------|")
    for k, t in times.items():
        print(f"| {k:32s} | {t:7.2f} | {len(items) / t:7.2f} | {t_seq / t:21.2f}x |")


if __name__ == "__main__":
    main()
