"""Rollout engines beyond the notebook: a mixed batch (video, image, text-only) through both HF paths, longer greedy
runs, and the vLLM tests skipping cleanly (with their reason) where vLLM is not installed."""
import importlib.util, os, subprocess, sys
from pathlib import Path
import pytest, torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from easyvideor1.models import qwen_vlm, qwen_processor
from easyvideor1.data import collate
from easyvideor1.rollout import HFEngine, RolloutPrompt, SamplingConfig, demo_prompts, logprob_parity, trainer_inputs

@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl", "qwen3_5"])  # qwen3_5: linear-attention states repeated too
def test_shared_prefix_equals_naive_mixed_batch(family):
    model, proc = qwen_vlm(family, "tiny", seed=1), qwen_processor(family)
    text_only = proc.apply_chat_template([{"role": "user", "content": [{"type": "text", "text": "Say hi."}]}],
                                         add_generation_prompt=True, tokenize=False)
    prompts = trainer_inputs(proc, demo_prompts(family, proc, seed=1) + [RolloutPrompt(text_only)])
    sc = SamplingConfig(n=2, temperature=0, max_new_tokens=24)
    naive = HFEngine(model, proc, shared_prefix=False).generate(prompts, sc)
    shared = HFEngine(model, proc).generate(prompts, sc)
    assert [[c.token_ids for c in g] for g in shared] == [[c.token_ids for c in g] for g in naive]
    assert all(len(g) == 2 and all(c.finish_reason in ("stop", "length") for c in g) for g in shared)
    par = logprob_parity(model, prompts, shared, temperature=0)
    assert par.max_abs < 1e-4, par
    one = HFEngine(model, proc, batch_size=2).generate(prompts, SamplingConfig(n=1, temperature=0, max_new_tokens=24))
    assert [g[0].token_ids for g in one] == [g[0].token_ids for g in shared]

def test_sampled_logprobs_match_trainer_at_temperature():
    model, proc = qwen_vlm("qwen3_vl", "tiny", seed=2), qwen_processor("qwen3_vl")
    prompts = trainer_inputs(proc, demo_prompts("qwen3_vl", proc, seed=2))
    groups = HFEngine(model, proc).generate(prompts, SamplingConfig(n=3, temperature=1.3, top_p=0.9, max_new_tokens=12, seed=5))
    par = logprob_parity(model, prompts, groups, temperature=1.3)
    assert par.n_tokens == 2 * 3 * 12 and par.max_abs < 1e-4, par

@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here: tests/test_vllm.py runs for real")
def test_vllm_tests_skip_with_reason():
    root = Path(__file__).parent.parent
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", str(root / "tests" / "test_vllm.py")],
                       capture_output=True, text=True, cwd=root, timeout=300)
    assert p.returncode in (0, 5), p.stdout + p.stderr  # 5: pytest collected nothing (module skipped)
    out = " ".join(p.stdout.split())  # pytest wraps the reason at the terminal width
    assert "1 skipped" in out and "vllm is not installed" in out, p.stdout

@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl", "qwen3_5"])
def test_hf_engine_never_samples_a_vision_token(family):
    "A model biased to emit <|video_pad|> (its argmax after the prompt) still gets no vision token from the HF engine."
    from easyvideor1.rollout import banned_token_ids
    model, proc = qwen_vlm(family, "tiny", seed=3), qwen_processor(family)
    prompt = trainer_inputs(proc, demo_prompts(family, proc, seed=3)[1:])[0]  # the image prompt (small)
    kw = collate([prompt], 0).model_kwargs()
    banned = banned_token_ids(family)
    with torch.no_grad():  # every banned row of lm_head points along the last hidden state: each beats every other token
        o = model(**kw, output_hidden_states=True)
        h = o.hidden_states[-1][0, -1]  # (D,)
        for k, t in enumerate(banned): model.lm_head.weight[t] = h * (o.logits[0, -1].abs().max() + 10 + k) / h.square().sum()
        assert int(model(**kw).logits[0, -1].argmax()) == banned[-1]  # unbanned, greedy would sample it
    for shared in (True, False):
        for sc in (SamplingConfig(n=2, temperature=0, max_new_tokens=3), SamplingConfig(n=3, temperature=1.0, max_new_tokens=3),
                   SamplingConfig(n=1, temperature=0, max_new_tokens=3)):  # the last: greedy batches
            groups = HFEngine(model, proc, shared_prefix=shared).generate([prompt], sc)
            got = {t for c in groups[0] for t in c.token_ids}
            assert not got & set(banned), (shared, sc, got & set(banned))

@pytest.mark.parametrize("shared", [True, False])
def test_hf_engine_samples_the_full_softmax_whatever_the_models_generation_config(shared):
    """A released Qwen2.5-VL folder's generation_config (top_k=1, top_p=0.001, T=0.1, repetition_penalty=1.05), and transformers'
    own top_k=50, must not reach the sampler: the group still differs (top_k=1 would make it greedy), the engine's
    log-probs are the trainer's, and a token outside the model's top 50 gets drawn (the full softmax of a random model)."""
    from transformers import GenerationConfig
    model, proc = qwen_vlm("qwen2_5_vl", "tiny", seed=4), qwen_processor("qwen2_5_vl")
    model.generation_config = GenerationConfig(bos_token_id=151643, pad_token_id=151643, do_sample=True, eos_token_id=[151645, 151643],
                                               repetition_penalty=1.05, temperature=0.1, top_p=0.001, top_k=1)
    prompts = trainer_inputs(proc, demo_prompts("qwen2_5_vl", proc, seed=4)[1:])  # the image prompt
    groups = HFEngine(model, proc, shared_prefix=shared).generate(prompts, SamplingConfig(n=4, temperature=1.0, max_new_tokens=6, seed=0))
    assert len({tuple(c.token_ids) for c in groups[0]}) == 4
    par = logprob_parity(model, prompts, groups, temperature=1.0)
    assert par.max_abs < 1e-4, par
    with torch.no_grad(): z = model(**collate(prompts, 0).model_kwargs()).logits[0, -1]  # the first token's logits
    top50 = set(z.topk(50).indices.tolist())
    assert any(c.token_ids[0] not in top50 for c in groups[0]), "first tokens all inside the top 50: is top_k=50 back?"

def test_inverse_cdf_sampler_draws_the_softmax_without_banned_tokens():
    "200k draws over a 6-token row at T = 0.7 with token 2 banned: frequencies within 3e-3 of the renormalised softmax."
    from easyvideor1.rollout import InverseCDFSampler
    torch.manual_seed(1)
    z = torch.tensor([[0.5, -2.0, 4.0, 1.0, 0.0, 1.5]])
    s = InverseCDFSampler(0.7, banned_ids=[2])
    drawn = s(None, z.repeat(200_000, 1)).argmax(-1)
    p = (z[0] / 0.7).softmax(-1); q = p.clone(); q[2] = 0; q /= q.sum()
    assert (torch.bincount(drawn, minlength=6) / len(drawn) - q).abs().max() < 3e-3
    assert torch.allclose(s.logprobs()[:, 0], p.log()[drawn], atol=1e-5)

@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_one_generate_per_draw_equals_per_group(family):
    """The batched path (the draw's prompts left padded into one `generate`, each prompt prefilled once, G rows each) samples
    the tokens of the per-group oracle (`shared_prefix=False`: one `generate` per prompt, no padding, no shared cache),
    with the same seeds: each group draws from its own generator, so batching does not move the draws."""
    model, proc = qwen_vlm(family, "tiny", seed=5), qwen_processor(family)
    text_only = proc.apply_chat_template([{"role": "user", "content": [{"type": "text", "text": "Say hi."}]}],
                                         add_generation_prompt=True, tokenize=False)
    # a video, an image and a text-only prompt: three lengths, so two rows are left padded
    prompts = trainer_inputs(proc, demo_prompts(family, proc, seed=5) + [RolloutPrompt(text_only)])
    sc = SamplingConfig(n=3, temperature=1.0, max_new_tokens=8, seed=11)
    oracle = HFEngine(model, proc, shared_prefix=False).generate(prompts, sc)
    batched = HFEngine(model, proc).generate(prompts, sc)
    ids = lambda gs: [[c.token_ids for c in g] for g in gs]
    assert ids(batched) == ids(oracle)
    assert len({tuple(c.token_ids) for c in batched[0]}) == 3  # a group's rows draw different tokens
    lp = lambda gs: torch.tensor([x for g in gs for c in g for x in c.logprobs])
    assert (lp(batched) - lp(oracle)).abs().max() < 1e-4
    # a smaller batch (two generate calls) draws the same again
    assert ids(HFEngine(model, proc, batch_size=2).generate(prompts, sc)) == ids(oracle)

def test_inverse_cdf_sampler_when_only_a_banned_token_has_mass():
    "A banned maximum far above every allowed token (all allowed e underflow to 0): the best allowed token, its true log-prob."
    from easyvideor1.rollout import InverseCDFSampler
    z = torch.full((3, 300), -1e4); z[:, 5] = 0.0; z[:, 7] = -9e3  # token 5 banned; 7 is the best allowed
    s = InverseCDFSampler(1.0, banned_ids=[5])
    assert s(None, z).argmax(-1).tolist() == [7, 7, 7]
    assert torch.allclose(s.logprobs()[:, 0], torch.full((3,), -9e3))
