"""Independent oracles for easyvideor1.grpo: every advantage estimator, policy loss, aggregation and KL estimator
against its formula written out here with plain loops and numpy (never the package's helpers), on random ragged
inputs; and the property that neither the loss nor its gradient depends on how completions are split into
micro-batches or ranks, for every loss_agg."""
import math

import numpy as np
import pytest
import torch
from torch import nn

from easyvideor1.grpo import (ADV_METHODS, AGGREGATIONS, KL_ALIASES, KL_KINDS, LOSS_METHODS, LossConfig, MicroBatch, aggregate,
                              check_loss_config, entropy_from_logits, group_advantages, grpo_step, kl_penalty,
                              loss_denominator, overlong_penalty, policy_loss, tis_weights, token_logprobs)

torch.set_num_threads(1)
EPS = 1e-6
CLIP_LOW, CLIP_HIGH, DUAL = 0.2, 0.28, 1.5


def ragged(seed, B=None, T=7, empty_row=True, spread=0.5):
    "Random log-probs (B, T) around random old log-probs, advantages (B,), right-padded ragged mask (one row may be empty)."
    rng = np.random.default_rng(seed)
    B = B or int(rng.integers(4, 9))
    lens = rng.integers(1, T + 1, B)
    if empty_row: lens[rng.integers(B)] = 0
    mask = (np.arange(T)[None] < lens[:, None]).astype(np.float64)
    old = -rng.random((B, T)) * 3
    logp = old + rng.normal(size=(B, T)) * spread
    adv = rng.normal(size=B)
    return logp, old, adv, mask


def valid_aggs(method):
    return ["seq_mean_token_mean"] if method == "gspo" else list(AGGREGATIONS)


# ---------------------------------------------------------------- advantages

def oracle_advantages(r, gids, method, weights=None, whiten=True):
    "Per group with plain Python: GRPO, Dr. GRPO, RLOO, REINFORCE++ (group baseline, batch std), GDPO."
    r = np.asarray(r, dtype=np.float64)
    r = r[:, None] if r.ndim == 1 else r
    N, K = r.shape
    groups = {}
    for i, g in enumerate(gids): groups.setdefault(g, []).append(i)
    adv, n_zero = np.zeros(N), 0
    for rows in groups.values():
        vals = r[rows]  # (n, K)
        if all((vals[j] == vals[0]).all() for j in range(len(rows))):
            n_zero += 1
            continue  # a constant group: advantage exactly 0
        n = len(rows)
        for j, i in enumerate(rows):
            if method == "gdpo":
                total = 0.0
                for k in range(K):
                    col = [vals[m, k] for m in range(n)]
                    mean = sum(col) / n
                    std = math.sqrt(sum((c - mean) ** 2 for c in col) / max(n - 1, 1))
                    total += (1.0 if weights is None else weights[k]) * (col[j] - mean) / (std + EPS)
                adv[i] = total
                continue
            col = [vals[m, 0] for m in range(n)]
            mean = sum(col) / n
            if method == "grpo":
                std = math.sqrt(sum((c - mean) ** 2 for c in col) / (n - 1))
                adv[i] = (col[j] - mean) / (std + EPS)
            elif method in ("dr_grpo", "reinforce_pp"): adv[i] = col[j] - mean
            elif method == "rloo": adv[i] = col[j] - sum(col[m] for m in range(n) if m != j) / (n - 1)
            else: raise AssertionError(method)
    if method in ("reinforce_pp", "gdpo") and whiten:
        mean = adv.mean()
        adv = adv / (math.sqrt(((adv - mean) ** 2).sum() / (N - 1)) + EPS)
    return adv, n_zero


def random_groups(seed, N=30):
    "Rewards with ties (so some groups are constant), shuffled variable-size groups including a one-member group."
    rng = np.random.default_rng(seed)
    r = rng.integers(0, 3, N) / 2.0
    gids = list(rng.integers(0, 7, N))
    gids[0] = 99
    return r, gids


def test_every_estimator_has_an_oracle():
    assert set(ADV_METHODS) == {"grpo", "dr_grpo", "rloo", "reinforce_pp", "gdpo"}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("method", ["grpo", "dr_grpo", "rloo", "reinforce_pp"])
def test_advantage_oracle(method, seed):
    r, gids = random_groups(seed)
    got = group_advantages(torch.tensor(r), group_ids=gids, method=method)
    want, n_zero = oracle_advantages(r, gids, method)
    np.testing.assert_allclose(got.adv.numpy(), want, atol=1e-5)
    assert got.n_zero_var == n_zero
    fixed = group_advantages(torch.tensor(r[:28]), group_size=4, method=method).adv.numpy()
    np.testing.assert_allclose(fixed, oracle_advantages(r[:28], [i // 4 for i in range(28)], method)[0], atol=1e-5)


@pytest.mark.parametrize("seed", range(3))
def test_gdpo_oracle(seed):
    rng = np.random.default_rng(seed)
    r = np.round(rng.random((24, 3)), 1)
    r[4:8] = r[4]  # one constant group
    gids = [i // 4 for i in range(24)]
    got = group_advantages(torch.tensor(r), group_ids=gids, method="gdpo", weights=[0.9, 0.1, 0.5])
    want, n_zero = oracle_advantages(r, gids, "gdpo", weights=[0.9, 0.1, 0.5])
    np.testing.assert_allclose(got.adv.numpy(), want, atol=1e-5)
    assert got.n_zero_var == n_zero == 1


@pytest.mark.parametrize("method", ["reinforce_pp", "gdpo"])
def test_batch_std_is_global_over_simulated_ranks(method):
    # each rank whitens with the all-rank statistics that stats_reduce returns: equal to one process
    rng = np.random.default_rng(0)
    r = np.round(rng.random((36, 2)), 1) if method == "gdpo" else rng.integers(0, 3, 36) / 2.0
    one = group_advantages(torch.tensor(r), group_size=4, method=method).adv.numpy()
    shares = [slice(0, 8), slice(8, 28), slice(28, 36)]
    seen = []
    def stats_of(part):  # each rank's [count, sum, sum of squares] as the rank hands it to stats_reduce
        group_advantages(torch.tensor(r[part]), group_size=4, method=method, stats_reduce=lambda s: seen.append(s.clone()) or s)
        return seen[-1]
    total = sum(stats_of(s) for s in shares)  # what an all-reduce (sum) returns
    pre = oracle_advantages(r, [i // 4 for i in range(36)], method, whiten=False)[0]
    np.testing.assert_allclose(total.numpy(), [36, pre.sum(), (pre**2).sum()], atol=1e-9)  # the statistics are the unwhitened ones
    ranks = np.concatenate([group_advantages(torch.tensor(r[s]), group_size=4, method=method,
                                             stats_reduce=lambda s_: total).adv.numpy() for s in shares])
    local = np.concatenate([group_advantages(torch.tensor(r[s]), group_size=4, method=method).adv.numpy() for s in shares])
    np.testing.assert_allclose(ranks, one, atol=1e-5)
    assert np.abs(local - one).max() > 1e-3  # the rank-local std is not the batch's


# ---------------------------------------------------------------- per-token losses and aggregation

def oracle_token_loss(logp, old, adv, mask, method, dual_clip=None):
    "Per-token loss value and d loss / d logp of each token (its own token only), written out per formula."
    B, T = logp.shape
    lo, hi = 1 - CLIP_LOW, 1 + CLIP_HIGH
    val, grad = np.zeros((B, T)), np.zeros((B, T))
    for b in range(B):
        n = int(mask[b].sum())
        s = math.exp(sum(logp[b, t] - old[b, t] for t in range(n)) / n) if n else 1.0  # GSPO's sequence ratio
        for t in range(n):
            a = adv[b]
            rho = s if method == "gspo" else math.exp(logp[b, t] - old[b, t])
            if method == "cispo":
                w = min(rho, hi)  # MiniMax-M1: capped from above only
                val[b, t], grad[b, t] = -w * a * logp[b, t], -w * a
                continue
            unclipped, clipped = -a * rho, -a * min(max(rho, lo), hi)
            val[b, t] = max(unclipped, clipped)
            grad[b, t] = 0.0 if clipped > unclipped else -a * rho  # the clipped branch is a constant
            if dual_clip is not None and a < 0 and val[b, t] > -a * dual_clip:
                val[b, t], grad[b, t] = -a * dual_clip, 0.0
    return val, grad


def oracle_weights(mask, agg, L):
    "The weight of each token in the aggregated loss; rows without tokens count in no denominator."
    B, T = mask.shape
    n_tok = [int(mask[b].sum()) for b in range(B)]
    n_seq = sum(1 for n in n_tok if n > 0)
    w = np.zeros((B, T))
    for b in range(B):
        for t in range(n_tok[b]):
            if agg == "token_mean": w[b, t] = 1 / sum(n_tok)
            elif agg == "seq_mean_token_mean": w[b, t] = 1 / (n_seq * n_tok[b])
            else: w[b, t] = 1 / (n_seq * L)
    return w


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("dual", [None, DUAL])
@pytest.mark.parametrize("method", LOSS_METHODS)
def test_policy_loss_oracle(method, dual, seed):
    logp, old, adv, mask = ragged(seed)
    L = logp.shape[1] + 2
    val, dval = oracle_token_loss(logp, old, adv, mask, method, dual)
    for agg in valid_aggs(method):
        w = oracle_weights(mask, agg, L)
        lp = torch.tensor(logp).requires_grad_()
        # padding holds garbage that must not leak into the loss or the gradient
        old_t = torch.tensor(np.where(mask > 0, old, np.nan))
        got, stats = policy_loss(lp, old_t, torch.tensor(adv), torch.tensor(mask), CLIP_LOW, CLIP_HIGH, dual, method, agg, L)
        (g,) = torch.autograd.grad(got, lp)
        assert abs(got.item() - (w * val).sum()) < 1e-6, (method, agg)
        # GSPO too: d/dlogp_t of (1/B) l_i(s_i) is (1/B) l_i'(s_i) s_i / |o_i|, i.e. the token's weight times -A s_i (or 0)
        np.testing.assert_allclose(g.numpy(), w * dval, atol=1e-6, err_msg=f"{method} {agg}")


def test_gspo_is_the_papers_sequence_objective():
    # GSPO (Zheng et al. 2025): J = mean_i min(s_i A_i, clip(s_i) A_i), s_i the geometric-mean ratio; value and gradient
    logp, old, adv, mask = ragged(7, empty_row=False)
    lp = torch.tensor(logp).requires_grad_()
    n = torch.tensor(mask.sum(-1))
    s = (((lp - torch.tensor(old)) * torch.tensor(mask)).sum(-1) / n).exp()
    a = torch.tensor(adv)
    want = torch.maximum(-a * s, -a * s.clamp(1 - CLIP_LOW, 1 + CLIP_HIGH)).mean()
    got = policy_loss(lp, torch.tensor(old), a, torch.tensor(mask), method="gspo", agg="seq_mean_token_mean")[0]
    assert torch.allclose(got, want)
    assert torch.allclose(torch.autograd.grad(got, lp)[0], torch.autograd.grad(want, lp)[0])


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean_token_sum_norm"])
def test_gspo_rejects_token_level_aggregation(agg):
    logp, old, adv, mask = (torch.tensor(x) for x in ragged(0))
    with pytest.raises(ValueError, match="loss_agg"):
        policy_loss(logp, old, adv, mask, method="gspo", agg=agg, max_len=8)
    with pytest.raises(ValueError, match="loss_agg"):
        grpo_step(lambda mb: logp, [MicroBatch(None, mask, adv)], torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1),
                  LossConfig(method="gspo", agg=agg, max_len=8))
    with pytest.raises(ValueError, match="seq_mean_token_mean"):
        check_loss_config("gspo", agg, 8)


def test_cispo_weight_has_no_lower_bound():
    # MiniMax-M1 clips the IS weight from above only: a token at ratio 0.5 keeps weight 0.5 (a two-sided clip gives 0.8)
    lp = torch.tensor([[math.log(0.5), math.log(2.0)]], requires_grad=True)
    loss, stats = policy_loss(lp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2), method="cispo", agg="token_mean")
    (g,) = torch.autograd.grad(loss, lp)
    assert torch.allclose(-2 * g, torch.tensor([[0.5, 1 + CLIP_HIGH]]))
    assert stats["clip_frac"] == 0.5  # only the token above 1 + clip_high


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("agg", AGGREGATIONS)
def test_aggregate_oracle(agg, seed):
    rng = np.random.default_rng(seed)
    _, _, _, mask = ragged(seed)
    loss = rng.normal(size=mask.shape)
    garbage = np.where(mask > 0, loss, np.nan)  # padding may hold nan
    L = mask.shape[1] + 3
    want = 0.0
    rows = [b for b in range(len(mask)) if mask[b].sum() > 0]
    if agg == "token_mean": want = sum(loss[b, t] for b in rows for t in range(int(mask[b].sum()))) / mask.sum()
    else:
        for b in rows:
            n = int(mask[b].sum())
            want += sum(loss[b, t] for t in range(n)) / (n if agg == "seq_mean_token_mean" else L)
        want /= len(rows)
    assert abs(aggregate(torch.tensor(garbage), torch.tensor(mask), agg, max_len=L).item() - want) < 1e-9


def test_dr_grpo_requires_its_constant():
    # the example: one row of two tokens, one of one, every loss 1; padded-T gave 0.75 whole vs 1.0 split
    loss, mask = torch.ones(2, 2), torch.tensor([[1.0, 1], [1, 0]])
    with pytest.raises(ValueError, match="max_len"):
        aggregate(loss, mask, "seq_mean_token_sum_norm")
    with pytest.raises(ValueError, match="max_len"):
        grpo_step(lambda mb: torch.zeros(2, 2, requires_grad=True), [MicroBatch(None, mask, torch.ones(2))],
                  torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1), LossConfig(agg="seq_mean_token_sum_norm"))
    whole = aggregate(loss, mask, "seq_mean_token_sum_norm", max_len=2)
    split = (aggregate(loss[:1], mask[:1], "seq_mean_token_sum_norm", max_len=2, n_total=2)
             + aggregate(loss[1:, :1], mask[1:, :1], "seq_mean_token_sum_norm", max_len=2, n_total=2))
    assert whole.item() == split.item() == 0.75


# ---------------------------------------------------------------- KL, TIS, overlong

def oracle_kl(lp, ref, kind):
    "Value and d/dlogp of each estimator, with delta = ref - logp."
    d = ref - lp
    return {"k1": (-d, 1.0), "abs": (abs(d), math.copysign(1.0, -d)), "k2": (0.5 * d * d, -d),
            "k3": (math.exp(d) - 1 - d, 1 - math.exp(d))}[kind]


@pytest.mark.parametrize("kind", list(KL_KINDS) + list(KL_ALIASES))
def test_kl_oracle(kind):
    logp, ref, _, mask = ragged(3, empty_row=False, spread=1.0)
    lp = torch.tensor(logp).requires_grad_()
    got = kl_penalty(lp, torch.tensor(ref), kind)
    (g,) = torch.autograd.grad(got.sum(), lp)
    base = KL_ALIASES.get(kind, kind)
    for b in range(logp.shape[0]):
        for t in range(logp.shape[1]):
            v, dv = oracle_kl(logp[b, t], ref[b, t], base)
            assert abs(got[b, t].item() - v) < 1e-9 and abs(g[b, t].item() - dv) < 1e-9, (kind, b, t)


def test_kl_kinds_cover_the_original():
    assert set(KL_KINDS) == {"k1", "abs", "k2", "k3"} and KL_ALIASES == {"kl": "k1", "mse": "k2", "low_var_kl": "k3"}
    with pytest.raises(ValueError, match="kind"):
        kl_penalty(torch.zeros(1, 1), torch.zeros(1, 1), "k4")


def test_tis_oracle():
    a, b, _, _ = ragged(4, spread=1.0)
    want = np.array([[min(math.exp(x - y), 2.0) for x, y in zip(ra, rb)] for ra, rb in zip(a, b)])
    np.testing.assert_allclose(tis_weights(torch.tensor(a), torch.tensor(b), 2.0).numpy(), want, rtol=1e-9)


def test_overlong_penalty_oracle():
    # DAPO eq. 13: 0 up to L_max - L_cache, ((L_max - L_cache) - |y|) / L_cache in the buffer, -1 beyond L_max; scaled
    L_max, L_cache, f = 20, 6, 0.7
    lens = list(range(0, 30))
    want = [0.0 if n <= L_max - L_cache else (f * ((L_max - L_cache) - n) / L_cache if n <= L_max else -f) for n in lens]
    np.testing.assert_allclose(overlong_penalty(lens, L_max, L_cache, f).numpy(), want, atol=1e-6)
    with pytest.raises(ValueError, match="overlong_buffer"):
        overlong_penalty([1], 10, 11)


# ---------------------------------------------------------------- split invariance (micro-batches and ranks)

V, F = 6, 4


def toy_problem(seed, B=10, T=6):
    "Features, ids, old / ref log-probs and a ragged mask for a linear 'model' over V tokens."
    g = torch.Generator().manual_seed(seed)
    x, ids = torch.randn(B, T, F, generator=g), torch.randint(0, V, (B, T), generator=g)
    lens = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None] < lens[:, None]).float()
    adv = torch.randn(B, generator=g)
    old = -torch.rand(B, T, generator=g) * 2 - 1  # far from the model's log-probs: clipping happens
    ref = -torch.rand(B, T, generator=g) * 2 - 1
    return x, ids, mask, adv, old, ref


def micro_batches(prob, rows):
    "One MicroBatch per list of rows, each padded only to its own longest completion (as the trainer does per group)."
    x, ids, mask, adv, old, ref = prob
    out = []
    for r in rows:
        T = int(mask[r].sum(-1).max())
        out.append(MicroBatch(dict(x=x[r, :T], ids=ids[r, :T]), mask[r, :T], adv[r], old_logp=old[r, :T], ref_logp=ref[r, :T]))
    return out


def step_grad(mbs, method, agg, n_total=None):
    "Loss and gradient of one grpo_step (SGD lr 0, so the model stays put) on a fresh seeded linear model."
    torch.manual_seed(0)
    model = nn.Linear(F, V)
    grads = []
    def logp_fn(mb):
        logits = model(mb.inputs["x"])  # (b, T, V)
        return token_logprobs(logits, mb.inputs["ids"]), entropy_from_logits(logits)
    loss = LossConfig(method=method, agg=agg, max_len=8, beta=0.05, kl_kind="k3", entropy_coef=0.01, dual_clip=DUAL)
    st = grpo_step(logp_fn, mbs, torch.optim.SGD(model.parameters(), lr=0.0), loss, max_grad_norm=None, n_total=n_total,
                   reduce_grads=lambda ps: grads.append(torch.cat([p.grad.flatten() for p in ps])))
    return st["loss"], grads[0]


SPLITS = [[[0, 1, 2], [3], [4, 5, 6, 7, 8, 9]], [[9, 0], [5, 3, 1], [2, 4, 6, 7, 8]], [[i] for i in range(10)]]


@pytest.mark.parametrize("method", LOSS_METHODS)
def test_loss_and_gradient_do_not_depend_on_the_micro_batch_split(method):
    prob = toy_problem(0)
    for agg in valid_aggs(method):
        loss1, g1 = step_grad(micro_batches(prob, [list(range(10))]), method, agg)
        for rows in SPLITS:
            mbs = micro_batches(prob, rows)
            assert len({mb.mask.shape[1] for mb in mbs}) > 1  # different padded lengths
            loss, g = step_grad(mbs, method, agg)
            assert abs(loss - loss1) < 1e-5, (method, agg, rows)
            assert torch.allclose(g, g1, atol=1e-6), (method, agg, rows)


@pytest.mark.parametrize("method", LOSS_METHODS)
def test_loss_and_gradient_do_not_depend_on_the_rank_split(method):
    # W simulated ranks with unequal shares, each passing n_total = global denominator / W; DDP averages gradients
    prob = toy_problem(1)
    for agg in valid_aggs(method):
        loss1, g1 = step_grad(micro_batches(prob, [list(range(10))]), method, agg)
        for ranks in ([[[0, 1], [2]], [[3, 4, 5, 6], [7, 8, 9]]], [[[0]], [[1, 2, 3], [4]], [[5, 6, 7, 8, 9]]]):
            W = len(ranks)
            shards = [micro_batches(prob, rows) for rows in ranks]
            n_global = sum(loss_denominator(s, agg) for s in shards)  # what the trainer all-reduces
            outs = [step_grad(s, method, agg, n_total=n_global / W) for s in shards]
            assert abs(sum(l for l, _ in outs) / W - loss1) < 1e-5, (method, agg)
            assert torch.allclose(sum(g for _, g in outs) / W, g1, atol=1e-6), (method, agg)
            local = [step_grad(s, method, agg) for s in shards]  # each rank's own denominator: not the batch's loss
            assert not torch.allclose(sum(g for _, g in local) / W, g1, atol=1e-4), (method, agg)


def test_grpo_step_takes_its_loss_as_one_config():
    "`grpo_step` has at most 8 parameters, the loss settings in one `LossConfig`; `loss_settings` splits loose keywords."
    import inspect
    from easyvideor1.grpo import loss_settings
    assert len(inspect.signature(grpo_step).parameters) <= 8
    loss, rest = loss_settings(dict(method="gspo", agg="seq_mean_token_mean", beta=0.1, max_grad_norm=None))
    assert (loss.method, loss.agg, loss.beta, loss.clip_low) == ("gspo", "seq_mean_token_mean", 0.1, 0.2) and rest == dict(max_grad_norm=None)
