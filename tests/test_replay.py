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
