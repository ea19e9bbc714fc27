"Shared-prefix oracles over the whole grid (both families x text / image / video x micro-batching x checkpointing) and the bench CLI."
import subprocess, sys
from pathlib import Path

import numpy as np
import pytest
import torch

from easyvideor1.data import Media, Sample, collate, prompt_inputs
from easyvideor1.grpo import LossConfig, grpo_step, token_logprobs
from easyvideor1.logprob import plain_logprobs
from easyvideor1.models import qwen_processor, qwen_vlm
from easyvideor1.prefix import (GroupChunk, PrefixLogp, group_logprobs, group_micro_batches, groups_logprobs,
                                naive_group_logits)
from easyvideor1.synthetic import direction_clip, ground_image
from easyvideor1.video import VideoMetadata

FAMILIES, KINDS = ("qwen2_5_vl", "qwen3_vl"), ("text", "image", "video")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def models():
    return {f: qwen_vlm(f, "tiny", seed=0) for f in FAMILIES}


def toy_prompt(fam, kind, n_frames=8):
    "A real prompt of the family through `data.prompt_inputs` (synthetic clip / image / text)."
    proc, rng, side = qwen_processor(fam), np.random.default_rng(0), {"qwen2_5_vl": 56}.get(fam, 64)
    if kind == "text": return prompt_inputs(proc, Sample("t", "What is 7 x 6?", "numerical", "42"), Media())
    if kind == "image":
        ex = ground_image(rng, size=side, square=12)
        return prompt_inputs(proc, Sample("i", ex.problem, "multiple choice", "A", "image", images=["x.png"]), Media(images=[ex.frames]))
    ex = direction_clip(rng, size=side, n_frames=n_frames, square=12, speed=(2, 3) if n_frames <= 8 else (0, 0))
    meta = VideoMetadata(ex.fps, list(range(n_frames)), n_frames, n_frames / ex.fps, side, side, "synthetic")
    s = Sample("v", ex.problem, "multiple choice", ex.answer, "video", videos=["x.mp4"], options=ex.options)
    return prompt_inputs(proc, s, Media(videos=[ex.frames], video_meta=[meta]))


def grads(model, fn):
    model.zero_grad(set_to_none=True)
    fn()
    return {n: torch.zeros_like(p) if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}


def max_rel(a, b):
    return max(((a[n] - b[n]).norm() / b[n].norm()).item() if b[n].norm() > 0 else a[n].norm().item() for n in b)


def micro_batched_backward(model, prompt, ids, mask, adv, chunk, shared, checkpoint=False):
    "Forward + backward per micro-batch, as grpo_step does."
    fn = PrefixLogp(model, shared_prefix=shared, checkpoint_layers=checkpoint)
    for mb in group_micro_batches([prompt], [ids], [mask], [adv], chunk):
        (fn(mb) * mb.adv[:, None] * mb.mask).sum().backward()
    return fn


def group_and_logprobs_equal_naive(m, p):
    "A group of 5 random completions of 7 tokens (one padded), advantages; asserts shared log-probs and entropies equal naive."
    g = torch.Generator().manual_seed(0)
    ids, adv = torch.randint(100, 20000, (5, 7), generator=g), torch.randn(5, generator=g)
    mask = torch.ones(5, 7); mask[2, 5:] = 0
    with torch.no_grad():
        lp_n, ent_n = group_logprobs(m, p, ids, mask, shared_prefix=False, temperature=0.7, entropy=True)
        for cs in (None, 2):
            lp_s, ent_s = group_logprobs(m, p, ids, mask, temperature=0.7, entropy=True, chunk_size=cs)
            assert (lp_s - lp_n).abs().max() <= 1e-5
            assert (ent_s - ent_n).abs().max() <= 1e-4  # entropies are ~12 nats: same relative precision
        assert (lp_n[mask == 0] == 0).all()
    return ids, mask, adv


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fam", FAMILIES)
def test_logprobs_entropy_and_gradients_equal_naive(models, fam, kind):
    m, p = models[fam], toy_prompt(fam, kind, n_frames=8 if kind != "video" else 16)
    ids, mask, adv = group_and_logprobs_equal_naive(m, p)
    ref = grads(m, lambda: micro_batched_backward(m, p, ids, mask, adv, 5, shared=False))
    for chunk, ck in ((5, False), (2, False), (2, True)):
        fn = None
        def run():
            nonlocal fn
            fn = micro_batched_backward(m, p, ids, mask, adv, chunk, shared=True, checkpoint=ck)
        got = grads(m, run)
        assert fn.prompt_forwards == 1
        assert max_rel(got, ref) <= 1e-4, (chunk, ck)
        if kind != "text": assert any("visual" in n and v.norm() > 0 for n, v in got.items())


@pytest.mark.parametrize("fam", FAMILIES)
def test_plain_logprobs_equal_naive_group_logits(models, fam):
    "01a_logprob's plain pass on the processor's dict equals the trainer's oracle on `SampleInputs` (video prompt)."
    m, p = models[fam], toy_prompt(fam, "video")
    ids = torch.randint(100, 20000, (4, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        taught = plain_logprobs(m, collate([p], pad_id=0).model_kwargs(), ids, temperature=0.7)  # (G, T)
        naive = token_logprobs(naive_group_logits(m, p, ids), ids, 0.7)  # (G, T)
    assert taught.shape == (4, 6) and (taught - naive).abs().max() <= 1e-5


def test_long_qwen2_5_clip_positions(models):
    "A clip whose temporal ids outrun the text after it (where transformers' rope_deltas disagrees with a full forward)."
    m, p = models["qwen2_5_vl"], toy_prompt("qwen2_5_vl", "video", n_frames=128)
    ids = torch.randint(100, 20000, (3, 5), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (group_logprobs(m, p, ids) - group_logprobs(m, p, ids, shared_prefix=False)).abs().max() <= 1e-5


def test_grpo_step_two_groups_updates_like_naive(models):
    m = models["qwen3_vl"]
    prompts = [toy_prompt("qwen3_vl", "video"), toy_prompt("qwen3_vl", "text")]
    g = torch.Generator().manual_seed(2)
    ids = [torch.randint(100, 20000, (4, 6), generator=g) for _ in prompts]
    mask, adv = [torch.ones(4, 6)] * 2, [torch.randn(4, generator=g) for _ in prompts]
    with torch.no_grad(): old = groups_logprobs(m, prompts, ids, mask)
    mbs = group_micro_batches(prompts, ids, mask, adv, 3, old_logp=[o + 0.05 for o in old])
    out = {}
    for shared in (True, False):
        fn = PrefixLogp(m, shared_prefix=shared, entropy=True)
        opt, captured = torch.optim.SGD(m.parameters(), lr=0.0), {}
        # grpo_step zeroes the gradients after its step: read them at the step
        opt.step = lambda *a, **k: captured.update({n: torch.zeros_like(q) if q.grad is None else q.grad.clone()
                                                   for n, q in m.named_parameters()})
        out[shared] = (captured, grpo_step(fn, mbs, opt, LossConfig(entropy_coef=0.01), max_grad_norm=None))
        assert captured
    assert max_rel(out[True][0], out[False][0]) <= 1e-4
    assert abs(out[True][1]["loss"] - out[False][1]["loss"]) <= 1e-5


def test_chunks_out_of_order_raise(models):
    m, p = models["qwen2_5_vl"], toy_prompt("qwen2_5_vl", "text")
    mbs = group_micro_batches([p], [torch.randint(100, 200, (4, 3))], [torch.ones(4, 3)], [torch.randn(4)], 2)
    fn = PrefixLogp(m)
    with pytest.raises(RuntimeError, match="consecutive micro-batches"): fn(mbs[1])
    fn(mbs[0])
    with pytest.raises(RuntimeError, match="stopped before chunk 1"): fn(mbs[0])
    with pytest.raises(TypeError, match="GroupChunk"): fn(type(mbs[0])(inputs={}, mask=mbs[0].mask, adv=mbs[0].adv))


def test_bench_step_cli():
    out = subprocess.run([sys.executable, "bench/step.py", "--frames", "8", "--res", "112", "--G", "4", "--new-tokens", "4",
                          "--chunk", "2", "--threads", "1"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert lines[-1].startswith("step speedup: ") and lines[-1].endswith("x")
    assert "rollout tokens identical: True" in out.stdout
    dl = float(out.stdout.split("max |delta logp| shared vs naive: ")[1].split(";")[0])
    assert dl <= 1e-5


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("fam", FAMILIES)
def test_checkpointing_equals_plain(models, fam, shared):
    "The trainer's switch: `enable_checkpointing` recomputes every block in backward; log-probs and every gradient unchanged."
    from easyvideor1.prefix import disable_checkpointing, enable_checkpointing, is_checkpointing, model_blocks
    m, p = models[fam], toy_prompt(fam, "video")
    g = torch.Generator().manual_seed(3)
    ids, adv = torch.randint(100, 20000, (4, 6), generator=g), torch.randn(4, generator=g)
    mask = torch.ones(4, 6); mask[1, 4:] = 0
    calls = []  # an MLP inside every block: its pre-hook runs again when a checkpointed block is recomputed
    hooks = [b.mlp.register_forward_pre_hook(lambda *_: calls.append(1)) for b in model_blocks(m)]
    def run(out):
        fn = PrefixLogp(m, shared_prefix=shared)
        for mb in group_micro_batches([p], [ids], [mask], [adv], 2):  # 2 chunks: the shared prompt's backward waits for the last
            lp = fn(mb); out.append(lp.detach())
            (lp * mb.adv[:, None] * mb.mask).sum().backward()
    plain, ck = [], []
    try:
        g0 = grads(m, lambda: run(plain))
        n_plain = len(calls); calls.clear()
        assert enable_checkpointing(m) == len(model_blocks(m)) == 3 and is_checkpointing(m)
        g1 = grads(m, lambda: run(ck))
        assert len(calls) == 2 * n_plain  # every block call ran again in backward
    finally:
        for h in hooks: h.remove()
        disable_checkpointing(m)
    assert not is_checkpointing(m)
    assert max((a - b).abs().max().item() for a, b in zip(plain, ck)) <= 1e-6
    assert max_rel(g1, g0) <= 1e-5
    assert any("visual" in n and v.norm() > 0 for n, v in g1.items())


def test_transformers_checkpointing_is_refused_with_advice(models):
    m = qwen_vlm("qwen2_5_vl", "tiny", seed=0)
    m.gradient_checkpointing_enable()  # drops the prompt cache in its layers: the prefix path fails (issue 15)
    p = toy_prompt("qwen2_5_vl", "text")
    with pytest.raises(RuntimeError, match="enable_checkpointing"):
        group_logprobs(m, p, torch.randint(100, 200, (2, 3)))
    from easyvideor1.prefix import enable_checkpointing
    with pytest.raises(RuntimeError, match="gradient_checkpointing_disable"): enable_checkpointing(m)


def test_checkpointed_layer_refuses_a_plain_cache(models):
    "A cache a replay would update twice is an error, not a silently wrong gradient."
    from transformers import DynamicCache
    from easyvideor1.prefix import checkpointed_layers
    m = models["qwen3_vl"]
    ids = torch.randint(100, 200, (1, 4))
    with checkpointed_layers(m), pytest.raises(RuntimeError, match="replay would update it"):
        m.model.language_model(input_ids=ids, past_key_values=DynamicCache(config=m.config.get_text_config()), use_cache=True)


def gated_delta_rule_f64(query, key, value, g, beta, initial_state=None, output_final_state=False,
                         use_qk_l2norm_in_kernel=False, **kwargs):
    "The gated delta rule token by token in float64 (transformers' kernels' arguments): a reference, slow and exact."
    rep = value.shape[-2] // key.shape[-2]  # grouped value heads: each key head serves `rep` value heads
    q, k = (x.repeat_interleave(rep, dim=2) for x in (query, key))
    q, k, v, b, decay = (x.transpose(1, 2).double() for x in (q, k, value, beta, g))  # (batch, head, time, ...)
    if use_qk_l2norm_in_kernel: q, k = (x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6) for x in (q, k))
    q = q * q.shape[-1] ** -0.5
    B, H, T, dk = k.shape
    S = (torch.zeros(B, H, dk, v.shape[-1], dtype=torch.float64, device=v.device) if initial_state is None
         else initial_state.double())
    out = []
    for t in range(T):  # S <- exp(g) S;  S <- S + k (beta (v - S^T k))^T;  o = S^T q
        S = S * decay[:, :, t].exp()[..., None, None]
        kt = k[:, :, t, :, None]
        S = S + kt * ((v[:, :, t] - (S * kt).sum(-2)) * b[:, :, t, None])[:, :, None, :]
        out.append((S * q[:, :, t, :, None]).sum(-2))
    return torch.stack(out, 2).transpose(1, 2).to(value.dtype), (S if output_final_state else None)


# Qwen3.5's gate parameters (the decay a = -exp(A_log) * softplus(in_proj_a x + dt_bias)) get small gradients that are
# sums of cancelling terms; transformers' Gated DeltaNet kernels run in fp32 whatever the model dtype, and splitting the
# sequence at the prompt (shared) or not (naive) changes their chunking: in fp32 their gradients agree to ~5e-6
# absolute (relative: up to a few %), every other parameter to 1e-4 relative. A float64 model keeps that gap while
# transformers' fp32 kernels run (2.6e-2 relative); with the delta rule itself in float64 (`gated_delta_rule_f64`) the
# gates agree to 5e-8 relative: the gap is the kernels' rounding, not the shared prefix.
GATES = ("linear_attn.A_log", "linear_attn.dt_bias", "linear_attn.in_proj_a")


def test_qwen3_5_hybrid_shared_prefix_equals_naive():
    "Qwen3.5: the linear-attention layers' conv and recurrent states repeated across the group, as keys and values are."
    m, p = qwen_vlm("qwen3_5", "tiny", seed=0), toy_prompt("qwen3_5", "video")
    assert m.config.text_config.layer_types == ["linear_attention"] * 3 + ["full_attention"]
    ids, mask, adv = group_and_logprobs_equal_naive(m, p)
    ref = grads(m, lambda: micro_batched_backward(m, p, ids, mask, adv, 5, shared=False))
    for chunk, ck in ((5, False), (2, True)):
        got = grads(m, lambda: micro_batched_backward(m, p, ids, mask, adv, chunk, shared=True, checkpoint=ck))
        gates = [n for n in ref if any(k in n for k in GATES)]
        assert len(gates) == 9 and max((got[n] - ref[n]).abs().max().item() for n in gates) <= 2e-5, (chunk, ck)
        assert max_rel({n: got[n] for n in ref if n not in gates}, {n: ref[n] for n in ref if n not in gates}) <= 1e-4
        assert any("visual" in n and v.norm() > 0 for n, v in got.items())
        assert any("linear_attn.conv1d" in n and v.norm() > 0 for n, v in got.items())
    # float64 with the delta rule in float64 too: every gradient, the gates included, equal to 1e-6 relative
    import transformers.models.qwen3_5.modeling_qwen3_5 as q35
    m.double()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(q35, "torch_chunk_gated_delta_rule", gated_delta_rule_f64)
        mp.setattr(q35, "torch_recurrent_gated_delta_rule", gated_delta_rule_f64)
        ref = grads(m, lambda: micro_batched_backward(m, p, ids, mask, adv, 5, shared=False))
        got = grads(m, lambda: micro_batched_backward(m, p, ids, mask, adv, 2, shared=True))
    assert max_rel({n: got[n] for n in gates}, {n: ref[n] for n in gates}) <= 1e-6
    assert max_rel(got, ref) <= 1e-6
