"Learning checks for easyvideor1.replay: on a sparse-reward task offline trajectories make GRPO learn; without them the gradient is exactly zero."
import pytest
import torch

from easyvideor1.replay import train_sparse

torch.set_num_threads(1)


def online_acc(log, last=5):
    return sum(r["online_acc"] for r in log[-last:]) / last


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_without_offline_stays_flat(seed):
    log = train_sparse(steps=40, mode=None, seed=seed)
    assert max(r["online_acc"] for r in log) == 0.0
    assert max(r["grad_norm"] for r in log) == 0.0  # every group has zero variance: exactly no gradient
    assert all(r["n_zero_var"] == 4 and r["n_offline"] == 0 for r in log)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("mode,offpolicy", [("replace", "none"), ("add", "none"), ("replace", "luffy")])
def test_with_offline_climbs(mode, offpolicy, seed):
    log = train_sparse(steps=40, mode=mode, offpolicy=offpolicy, seed=seed)
    assert log[0]["online_acc"] == 0.0
    assert log[0]["n_offline"] == 4 and log[0]["offline_adv"] > 0 > log[0]["online_adv"]
    assert online_acc(log) > 0.5, f"{mode}/{offpolicy} seed {seed}: {[round(r['online_acc'], 2) for r in log]}"


@pytest.mark.parametrize("seed", [0, 1])
def test_is_clip_with_matching_behaviour_climbs(seed):
    # behaviour log-prob log(1/11): the uniform policy's, so the clipped weights start near 1
    log = train_sparse(steps=40, offpolicy="is_clip", behaviour_logp=-2.4, seed=seed)
    assert online_acc(log) > 0.5, [round(r["online_acc"], 2) for r in log]


def test_threshold_mixes_only_into_failing_groups():
    log = train_sparse(steps=40, accuracy_threshold=0.5, seed=0)
    assert log[0]["n_offline"] == 4
    assert online_acc(log) > 0.5
    assert log[-1]["n_offline"] < 4  # solved groups get no offline trajectory (and only n - 1 online rollouts)


def test_offline_trajectory_with_qwen_tokenizer():
    from easyvideor1.models import qwen_tokenizer
    from easyvideor1.replay import offline_trajectory

    tok = qwen_tokenizer("qwen2_5_vl")
    text = "<think>The square moves to the left.</think><answer>A</answer>"
    t = offline_trajectory(text, tok, max_response_len=4096, behaviour_logp=None, sample_id="s0")
    assert t.ids[-1] == 151645 and tok.decode(t.ids[-1:]) == "<|im_end|>"
    assert t.ids[:-1] == tok.encode(text, add_special_tokens=False) and not t.truncated and t.text == text
    cut = offline_trajectory(text, tok, max_response_len=8, behaviour_logp=[-0.5] * len(t.ids))
    assert cut.truncated and len(cut.ids) == 8 and 151645 not in cut.ids and len(cut.logp) == 8
    assert text.startswith(cut.text) and cut.ids == t.ids[:8]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_end_of_turn_token_matters(seed):
    # the original's offline text has no end-of-turn token: the policy learns the answer but not to stop
    mean = lambda log: sum(r["online_acc"] for r in log) / len(log)
    with_eot, without_eot = train_sparse(steps=40, seed=seed), train_sparse(steps=40, seed=seed, offline_eot=False)
    assert mean(with_eot) > mean(without_eot) + 0.15, (mean(with_eot), mean(without_eot))
