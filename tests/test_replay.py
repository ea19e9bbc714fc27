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


def test_offline_logprobs_from_the_data_file(tmp_path):
    # a data file's offline_logprobs travel Sample -> trajectory -> padded behaviour log-probs, so is_clip can run
    import json
    from easyvideor1.data import read_samples
    from easyvideor1.replay import char_tokenizer, check_offpolicy_data, offline_trajectories, pad_trajectories

    rows = [dict(problem="Q?", answer="12", problem_type="numerical", problem_id="a", has_offline_trajectory=True,
                 offline_output="12", offline_logprobs=[-0.5, -0.25, 0.0]),
            dict(problem="Q?", answer="3", problem_type="numerical", problem_id="b", has_offline_trajectory=True, offline_output="3")]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    samples = read_samples(tmp_path / "d.jsonl")
    assert samples[0].offline_logprobs == [-0.5, -0.25, 0.0] and samples[1].offline_logprobs is None
    as_rows = [dict(problem_id=s.id, has_offline_trajectory=s.has_offline, offline_output=s.offline_output,
                    offline_logprobs=s.offline_logprobs) for s in samples]  # the trainer's replay_rows
    tok = char_tokenizer("0123456789")
    (t,) = offline_trajectories(as_rows[0], tok, max_response_len=8)
    assert t.logp == [-0.5, -0.25, 0.0] and t.ids[-1] == len(tok) - 1
    assert pad_trajectories([t])["behaviour_logp"].tolist() == [[-0.5, -0.25, 0.0]]
    assert check_offpolicy_data("is_clip", as_rows[:1], tok) == 1
    with pytest.raises(ValueError, match="offpolicy='is_clip'.*1 samples have no offline_logprobs.*b"):
        check_offpolicy_data("is_clip", as_rows, tok)
    assert check_offpolicy_data("none", as_rows) == 2
    (tmp_path / "bad.jsonl").write_text(json.dumps(dict(rows[0], offline_logprobs="x")))
    with pytest.raises(ValueError, match="offline_logprobs"):
        read_samples(tmp_path / "bad.jsonl")


def test_mask_truncated_leaves_truncated_rows_out():
    from easyvideor1.grpo import AGGREGATIONS, aggregate, loss_denominator, MicroBatch
    from easyvideor1.replay import Trajectory, pad_trajectories

    trajs = [Trajectory([1, 2], "a"), Trajectory([3, 4, 5], "b", truncated=True), Trajectory([6], "c")]
    b = pad_trajectories(trajs, mask_truncated=True)
    assert b["mask"].sum(-1).tolist() == [2.0, 0.0, 1.0] and b["truncated"].tolist() == [False, True, False]
    assert pad_trajectories(trajs)["mask"].sum(-1).tolist() == [2.0, 3.0, 1.0]  # off by default
    loss = torch.randn(3, 3)
    for agg in AGGREGATIONS:
        got = aggregate(loss, b["mask"], agg, max_len=3)
        want = aggregate(loss[[0, 2]], b["mask"][[0, 2]], agg, max_len=3)
        assert torch.allclose(got, want), agg
        assert loss_denominator([MicroBatch(None, b["mask"], torch.zeros(3))], agg) == (3.0 if agg == "token_mean" else 2.0)


def test_is_clip_reads_behaviour_logprobs_for_offline_rows_only():
    from easyvideor1.replay import offpolicy_token_loss

    g = torch.Generator().manual_seed(0)
    logp = (-torch.rand(4, 3, generator=g)).requires_grad_()
    adv, mask, off = torch.randn(4, generator=g), torch.ones(4, 3), torch.tensor([False, True, False, True])
    blp = torch.full((4, 3), float("nan"))
    with pytest.raises(ValueError, match="offline_logprobs"):
        offpolicy_token_loss(logp, logp.detach(), adv, mask, off, blp, "is_clip")
    blp[off] = -1.0  # behaviour log-probs on the offline rows only: online rows may stay unknown
    tl = offpolicy_token_loss(logp, logp.detach(), adv, mask, off, blp, "is_clip", is_cap=2.0)
    w = (logp.detach() + 1.0).exp().clamp(max=2.0)
    assert torch.allclose(tl.loss[off], (-w * adv[:, None] * logp)[off])
