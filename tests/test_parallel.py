"FSDP2 on 2 gloo processes (one torchrun launch runs every check in tests/fsdp_worker.py) and the pure padding helper."
import json, os, subprocess, sys
from pathlib import Path

import pytest
import torch

from easyvideor1.grpo import MicroBatch
from easyvideor1.parallel import max_over_ranks, pad_micro_batches
from easyvideor1.prefix import GroupChunk, group_micro_batches

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    "Run the worker once on 2 processes; the per-rank results of every case."
    out = tmp_path_factory.mktemp("fsdp") / "results.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(ROOT))
    env.pop("FSDP_WORKER_SKIP_ORACLE", None)
    try:  # a hang (collectives out of step) is a failure, not a stuck CI job; gloo also times out after 90 s
        p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                            str(ROOT / "tests" / "fsdp_worker.py"), str(out)], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=420)
    except subprocess.TimeoutExpired as e: pytest.fail(f"2-process FSDP2 run hung: {str(e.stderr)[-3000:]}")
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(out.read_text())["ranks"]


def result(ranks, name):
    for r, res in enumerate(ranks):
        assert name in res, f"case {name} did not run on rank {r}"
        assert res[name]["ok"], f"rank {r}, {name}: {res[name]['error']}"
    return ranks


@pytest.mark.parametrize("name", ["oracle[qwen2_5_vl-shared]", "oracle[qwen3_vl-shared]", "oracle[qwen3_vl-naive]",
                                  "oracle[qwen3_vl-shared-checkpointing]", "oracle[qwen3_5-shared]"])
def test_fsdp2_gradients_equal_one_process(ranks, name):
    "Each rank one group (video / image, 2 chunks), FSDP2: every gathered gradient equals one process's full-batch gradient."
    for res in result(ranks, name):
        assert res[name]["dtensor"] == "DTensor"
        assert res[name]["rel"] <= 1e-5 and res[name]["gate_abs"] <= 2e-5, res[name]
        if "qwen3_5" in name:  # both layer kinds of the hybrid model are FSDP2 units of their own
            assert {"full_attention", "linear_attention"} <= set(res[name]["block_types"]), res[name]


def test_fsdp2_dummy_vision_rule(ranks):
    "Rank 0: text-only then image-only micro-batches, rank 1: video-only then mixed, then a text vs a video group: no hang, all vision grads."
    for res in result(ranks, "dummy_vision"):
        r = res["dummy_vision"]
        assert r["with_grad"] == r["vision_params"] == r["nonzero"] > 0


@pytest.mark.parametrize("par", ["ddp", "fsdp2"])
def test_unequal_ranks_padded(ranks, par):
    "Rank 0 has 2 micro-batches, rank 1 one: padded to 2 with a zero-weight one, one clipped step equals one process's."
    res = result(ranks, f"unequal[{par}]")
    assert [r[f"unequal[{par}]"]["counts"] for r in res] == [[2, 2], [1, 2]]
    for r in res:
        assert r[f"unequal[{par}]"]["rel"] <= 1e-5
        got, want = r[f"unequal[{par}]"]["grad_norm"]
        assert abs(got - want) <= 1e-5 * want  # clipping saw the global norm


def test_full_state_dict_round_trip(ranks):
    "Gathered on rank 0 (others empty), loaded back into a model of another init, saved and loaded as a transformers folder."
    for res in result(ranks, "state_dict"):
        assert all(res["state_dict"][k] for k in ("rank0_equal", "others_empty", "loaded_equal", "pretrained_equal")), res


def test_sharded_checkpoint_resumes_exactly(ranks):
    for res in result(ranks, "exact_resume"):
        assert res["exact_resume"]["identical"] and res["exact_resume"]["moved"]


def test_generation_of_different_lengths_does_not_hang(ranks):
    "HFEngine on the sharded root: rank 1 decodes 8 tokens, rank 0 3 (inside `gathered`: no collective per step)."
    res = result(ranks, "generate")
    assert [r["generate"]["lengths"] for r in res] == [[3, 3], [8, 8]]
    assert all(r["generate"]["equal"] for r in res)
    assert [r["generate"]["greedy_n"] for r in res] == [2, 2]  # greedy batches (evaluation)
    assert all(r["generate"]["greedy_equal"] for r in res)



def test_fsdp2_cached_vision_features_ranks_hit_and_miss_unequally(ranks):
    "A cached frozen tower out of FSDP2: rank 0 reads its clip's features, rank 1 runs the tower alone; exact gradients."
    res = result(ranks, "cached_vision")
    assert [(r["cached_vision"]["tower_calls"], r["cached_vision"]["misses"]) for r in res] == [(0, 0), (1, 1)]
    assert [r["cached_vision"]["hits"] for r in res] == [3, 2]  # the prefix pass reads once, the 2 naive chunks once each
    for r in res: assert r["cached_vision"]["rel"] <= 1e-5, r


@pytest.mark.parametrize("reduce", ["float32", "bfloat16"])
def test_fsdp2_mixed_precision_two_ranks(ranks, reduce):
    "fp32 shards gathered in bf16 (gloo): bf16 compute, fp32 shards and gradients; the reduce-scatter runs in reduce_dtype."
    for r in result(ranks, f"mixed_precision[{reduce}]"):
        res = r[f"mixed_precision[{reduce}]"]
        assert res["seen"] == [["torch.bfloat16", "torch.bfloat16"]]  # the gathered weight and the activation
        assert res["dtypes"] == ["torch.float32/torch.float32"]  # every shard and its gradient
        assert 1e-4 < res["rel"] <= 5e-2, res  # near the fp32 one-process gradient, but not equal: computed in bf16
        # one reduction of bf16 gradients: a bf16 mean stays bf16-valued, an fp32 mean of two mostly is not
        assert (res["off_bf16"] > 0.2) if reduce == "float32" else (res["off_bf16"] == 0), res


def _mbs(sizes, chunk=2):
    p = type("P", (), {"sample_id": "p"})()  # group_micro_batches only reads the prompt's sample_id
    return group_micro_batches([p] * len(sizes), [torch.arange(g * 3).view(g, 3) for g in sizes],
                               [torch.ones(g, 3) for g in sizes], [torch.ones(g) for g in sizes], chunk)


def test_pad_micro_batches_pure():
    mine = _mbs([2, 3])  # 1 + 2 micro-batches
    out = pad_micro_batches(mine, 5)
    assert len(out) == 5 and out[:3] == mine
    for i, mb in enumerate(out[3:]):
        assert isinstance(mb, MicroBatch) and float(mb.mask.sum()) == 0 and float(mb.adv.abs().sum()) == 0
        assert isinstance(mb.inputs, GroupChunk) and (mb.inputs.key, mb.inputs.index, mb.inputs.n_chunks) == (("pad", i), 0, 1)
        assert torch.equal(mb.inputs.ids, mine[-1].inputs.ids)  # same shapes: the same calls as a real micro-batch
    assert pad_micro_batches(mine, 3) == mine
    with pytest.raises(ValueError, match="more than the 2"): pad_micro_batches(mine, 2)
    with pytest.raises(ValueError, match="nothing to copy"): pad_micro_batches([], 1)
    assert max_over_ranks(7) == 7  # one process


def test_equal_chunks_per_group():
    "FSDP2's shared-prefix rule: every group in the same number of near-equal chunks, whatever its size."
    for sizes in ([4, 4], [4, 5], [3, 6]):
        mbs = _mbs(sizes, chunk=2)
        k = 3
        eq = group_micro_batches([mbs[0].inputs.prompt] * len(sizes), [torch.zeros(g, 3) for g in sizes], [torch.ones(g, 3) for g in sizes],
                                 [torch.ones(g) for g in sizes], 2, n_chunks=k)
        assert [mb.inputs.n_chunks for mb in eq] == [k] * (k * len(sizes))
        assert [sum(len(mb.inputs.ids) for mb in eq[i * k:(i + 1) * k]) for i in range(len(sizes))] == sizes
    with pytest.raises(ValueError, match="fewer than 3 chunks"):
        group_micro_batches([mbs[0].inputs.prompt], [torch.zeros(2, 3)], [torch.ones(2, 3)], [torch.ones(2)], 2, n_chunks=3)
