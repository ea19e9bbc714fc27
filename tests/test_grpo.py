"Learning checks for easyvideor1.grpo: GRPO on a contextual bandit moves from chance to >90% accuracy."
import pytest
import torch

from easyvideor1.grpo import train_bandit

torch.set_num_threads(1)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("method", ["ppo", "gspo", "cispo"])
def test_bandit_learns(method, seed):
    agg = "seq_mean_token_mean" if method == "gspo" else "token_mean"  # GSPO is defined with a sequence mean
    acc, stats = train_bandit(steps=30, seed=seed, method=method, agg=agg)
    assert sum(acc[:2]) / 2 < 0.5, f"not at chance to begin with: {acc[:2]}"
    assert sum(acc[-5:]) / 5 > 0.9, f"{method} seed {seed}: accuracy {acc}"
    assert all(s["skipped"] == 0 for s in stats)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bandit_learns_reinforce_pp(seed):
    acc, _ = train_bandit(steps=40, seed=seed, adv_method="reinforce_pp")
    assert sum(acc[-5:]) / 5 > 0.9, f"seed {seed}: accuracy {acc}"


def test_bandit_token_aggregations():
    for agg in ("seq_mean_token_mean", "seq_mean_token_sum_norm"):
        acc, _ = train_bandit(steps=30, seed=0, agg=agg, max_len=1)
        assert sum(acc[-5:]) / 5 > 0.9, f"{agg}: accuracy {acc}"
