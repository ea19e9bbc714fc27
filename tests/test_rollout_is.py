"""Rollout importance-sampling correction (`rollout_is: tis | mis`): hand-computed oracles for `grpo_step`, and the
trainer's wiring (`train.grpo_update`) on the tiny model: the engine's log-probs reach the weights, and the weights are
taken against the trainer's log-probs at the rollout weights with one update per batch and with two."""
import math

import pytest
import torch

from easyvideor1.grpo import LossConfig, MicroBatch, grpo_step

torch.set_num_threads(1)


def one_step(rollout_is, rollout_logp, cap=2.0):
    "One SGD step (lr 1, no clipping) on log-probs that are themselves the parameters: the update is -grad."
    logp = torch.nn.Parameter(torch.tensor([[-1.0, -2.0], [-0.5, -1.5], [-2.0, -1.0]]))  # (3, 2) at ratio 1
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([1.0, -2.0, 0.5])
    before = logp.detach().clone()
    st = grpo_step(lambda mb: logp * 1, [MicroBatch(None, mask, adv, rollout_logp=rollout_logp)], torch.optim.SGD([logp], lr=1.0),
                   LossConfig(rollout_is=rollout_is, rollout_is_cap=cap), max_grad_norm=None)
    return (logp.detach() - before), st  # = -grad = adv * w * mask / n_tokens at ratio 1 (inside the clip)


def test_tis_oracle():
    "w = min(exp(trainer - rollout), 2) per token; the update is adv * w / 5 tokens."
    trainer = torch.tensor([[-1.0, -2.0], [-0.5, -1.5], [-2.0, -1.0]])
    rollout = trainer - torch.tensor([[0.5, 1.0], [-0.3, 0.0], [0.2, 9.9]])  # ratios e^0.5, e^1 (capped), e^-0.3, 1, e^0.2, (padding)
    step, st = one_step("tis", rollout)
    w = torch.tensor([[math.exp(0.5), 2.0], [math.exp(-0.3), 1.0], [math.exp(0.2), 0.0]])
    want = torch.tensor([1.0, -2.0, 0.5])[:, None] * w / 5
    assert torch.allclose(step, want, atol=1e-6), (step, want)
    assert st["is_weight"] == pytest.approx(float(w.sum()) / 5, abs=1e-6)
    assert st["is_weight_max"] == pytest.approx(2.0) and st["is_clipped_frac"] == pytest.approx(1 / 5)


def test_mis_oracle():
    "Row 0's geometric-mean ratio e^0.75 > 2 masks it; row 1 (e^-0.15) and row 2 (e^0.2, one token) keep weight 1."
    trainer = torch.tensor([[-1.0, -2.0], [-0.5, -1.5], [-2.0, -1.0]])
    rollout = trainer - torch.tensor([[0.5, 1.0], [-0.3, 0.0], [0.2, 9.9]])
    step, st = one_step("mis", rollout)
    want = torch.tensor([[0.0, 0.0], [-2.0 / 5, -2.0 / 5], [0.5 / 5, 0.0]])
    assert torch.allclose(step, want, atol=1e-6), (step, want)
    assert st["is_weight"] == pytest.approx(3 / 5) and st["is_clipped_frac"] == pytest.approx(2 / 5)
    step_none, _ = one_step("none", rollout)
    assert torch.allclose(step_none, torch.tensor([[1.0, 1.0], [-2.0, -2.0], [0.5, 0.0]]) / 5, atol=1e-6)  # the correction is what moved it


def test_nan_rollout_logp_means_weight_one():
    "Offline rows and padding carry no engine log-prob (nan): weight 1 there, not nan."
    step, st = one_step("tis", torch.full((3, 2), math.nan))
    assert torch.allclose(step, torch.tensor([[1.0, 1.0], [-2.0, -2.0], [0.5, 0.0]]) / 5, atol=1e-6)


@pytest.fixture(scope="module")
def tiny():
    from easyvideor1.data import Media, Sample, prompt_inputs
    from easyvideor1.models import qwen_processor, qwen_vlm
    fam = "qwen3_vl"
    proc = qwen_processor(fam)
    return qwen_vlm(fam, "tiny", seed=0), prompt_inputs(proc, Sample("t", "What is 7 x 6?", "numerical", "42"), Media())


@pytest.mark.parametrize("updates", [1, 2])
def test_trainer_passes_engine_logprobs_to_the_correction(tiny, updates):
    "grpo_update: engine log-probs = trainer's - 0.5 on every token -> TIS weights e^0.5, the gap 0.5, correlation 1."
    import copy
    from easyvideor1.prefix import group_logprobs
    from easyvideor1.replay import Trajectory
    from easyvideor1.step import grpo_update
    model, prompt = tiny
    model = copy.deepcopy(model)
    ids = torch.randint(100, 20000, (3, 5), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(): lp = group_logprobs(model, prompt, ids)  # (3, 5) the trainer at the rollout weights
    lens = [5, 3, 4]
    trajs = [Trajectory(ids[i, :n].tolist(), "x", logp=(lp[i, :n] - 0.5).tolist(), reward=float(i)) for i, n in enumerate(lens)]
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    st = grpo_update(model, [prompt], [trajs], torch.tensor([1.0, 0.0, -1.0]), opt, micro_batch_size=2, pad_id=0, updates=updates,
                     rollout_is="tis", rollout_is_cap=2.0, max_grad_norm=None)
    assert st["is_weight"] == pytest.approx(math.exp(0.5), rel=1e-4) and st["is_clipped_frac"] == 0
    assert st["logp_gap"] == pytest.approx(0.5, abs=1e-4) and st["logp_gap_max"] == pytest.approx(0.5, abs=1e-4)
    assert st["logp_corr"] == pytest.approx(1.0, abs=1e-6)
    st = grpo_update(model, [prompt], [trajs], torch.tensor([1.0, 0.0, -1.0]), opt, micro_batch_size=2, pad_id=0, updates=updates,
                     rollout_is="mis", rollout_is_cap=1.5, max_grad_norm=None)  # e^0.5 = 1.65 > 1.5: every sequence masked
    assert st["is_weight"] == 0 and st["is_clipped_frac"] == 1


def test_a_step_without_signal_skips_the_update_and_the_mismatch_pass_on_hf(tmp_path):
    """All rewards equal (untrained model): no update; with the HF engine the sampler is the trained model, so the extra
    log-prob pass that measures the rollout-vs-trainer gap is skipped (tests/test_vllm_train.py checks it is logged with vLLM)."""
    from easyvideor1.config import load_config
    from easyvideor1.synthetic import read_jsonl
    from easyvideor1.train import train
    cfg = dict(model="qwen3_vl:tiny", synthetic_n=2, synthetic_test_n=1, synthetic_val_n=0, synthetic_tasks="direction", offline_mode="none",
               prompts_per_step=1, group_size=2, sft_steps=0, max_steps=1, max_new_tokens=4, eval_every=0, eval_n=1, tensorboard=False,
               dynamic_sampling=False, beta=0.0)
    train(load_config(overrides=dict(cfg, output_dir=str(tmp_path))))
    (row,) = read_jsonl(tmp_path / "metrics.jsonl")
    assert row["no_signal"] == 1 and row["zero_var_groups"] == row["groups"]
    assert "logp_gap_max" not in row and "grad_norm" not in row
