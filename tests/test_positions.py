"""One Qwen2.5-VL position rule everywhere (the released model's = vLLM's: the text after a video starts at the video's
largest id + 1): the HF engine's `generate`, the trainer's shared-prefix and naive passes, copies of the policy; and
Qwen3-VL, whose transformers rule already agrees."""
import copy

import numpy as np
import pytest
import torch

from easyvideor1.data import Media, Sample, prompt_inputs
from easyvideor1.models import qwen_processor, qwen_vlm
from easyvideor1.prefix import group_logprobs, prompt_positions
from easyvideor1.rollout import HFEngine, SamplingConfig, logprob_parity, use_released_positions
from easyvideor1.synthetic import direction_clip
from easyvideor1.video import VideoMetadata

torch.set_num_threads(1)


def long_clip(fam, n_frames=32):
    "A video sample whose time ids (16 groups, 2 per second) outrun its 2 x 2 merged grid: the rules disagree after it."
    proc, side = qwen_processor(fam), {"qwen2_5_vl": 56, "qwen3_vl": 64}[fam]
    ex = direction_clip(np.random.default_rng(0), size=side, n_frames=n_frames, square=12, speed=(0, 0))
    meta = VideoMetadata(ex.fps, list(range(n_frames)), n_frames, n_frames / ex.fps, side, side, "synthetic")
    s = Sample("v", ex.problem, "multiple choice", ex.answer, "video", videos=["x.mp4"], options=ex.options)
    return proc, prompt_inputs(proc, s, Media(videos=[ex.frames], video_meta=[meta]))


def text_after_vision_at_max_plus_one(pos, types) -> bool:
    "The released rule, checked on (3, L) ids: every text token right after a vision run sits at that run's largest id + 1."
    ok, t = True, types.tolist()
    for i in range(1, len(t)):
        if t[i] == 0 and t[i - 1] != 0:
            j = i - 1
            while j > 0 and t[j - 1] == t[i - 1]: j -= 1
            ok &= int(pos[0, i]) == int(pos[:, j:i].max()) + 1
    return ok


def test_qwen2_5_rule_in_the_trainer_passes():
    proc, p = long_clip("qwen2_5_vl")
    m = qwen_vlm("qwen2_5_vl", "tiny", seed=0)
    P = p.prompt_len
    pos_hf, _ = prompt_positions(m, p)
    assert not text_after_vision_at_max_plus_one(pos_hf[:, 0], p.mm_token_type_ids[:P])  # transformers 5's rule: the test can fail
    rel = copy.deepcopy(m)
    assert use_released_positions(rel)
    pos, delta = prompt_positions(rel, p)
    assert text_after_vision_at_max_plus_one(pos[:, 0], p.mm_token_type_ids[:P])
    ids = torch.randint(100, 20000, (3, 5), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        shared, naive = group_logprobs(rel, p, ids), group_logprobs(rel, p, ids, shared_prefix=False)
        assert (shared - naive).abs().max() <= 1e-5  # the prefix pass and a full forward use the same rule
        assert (shared - group_logprobs(m, p, ids)).abs().max() > 1e-4  # and it is not transformers' rule
    assert copy.deepcopy(rel).model.get_rope_index.__func__ is rel.model.get_rope_index.__func__  # frozen copies keep it


def test_hf_engine_samples_at_the_released_positions():
    "HFEngine's log-probs equal the trainer's pass on a long clip, shared and naive; that pass is at the released rule."
    proc, p = long_clip("qwen2_5_vl")
    m = qwen_vlm("qwen2_5_vl", "tiny", seed=0)
    sc = SamplingConfig(n=2, temperature=1.0, max_new_tokens=6, seed=0)
    for shared in (True, False):
        groups = HFEngine(m, proc, shared_prefix=shared).generate([p], sc)
        par = logprob_parity(m, [p], groups, 1.0)
        assert par.max_abs < 1e-4, (shared, par)
    assert text_after_vision_at_max_plus_one(prompt_positions(m, p)[0][:, 0], p.mm_token_type_ids[:p.prompt_len])


def test_qwen3_vl_rules_agree():
    "Qwen3-VL (time as text timestamps, one frame per vision run): transformers' ids already follow max id + 1; nothing to patch."
    proc, p = long_clip("qwen3_vl", n_frames=8)
    m = qwen_vlm("qwen3_vl", "tiny", seed=0)
    pos, _ = prompt_positions(m, p)
    types = p.mm_token_type_ids[:p.prompt_len]
    assert int((types[1:] != types[:-1]).sum()) > 4  # several vision runs (one per frame)
    assert text_after_vision_at_max_plus_one(pos[:, 0], types)
    assert not use_released_positions(m)


def test_the_evaluators_hf_engine_uses_the_released_rule(tmp_path):
    "The evaluator's HF engine (the rollout `HFEngine`, from a model folder) runs a Qwen2.5-VL model at the released rule."
    from easyvideor1.evaluate import load_hf_engine
    from easyvideor1.models import save_vlm
    from easyvideor1.rollout import released_rope_index
    m = qwen_vlm("qwen2_5_vl", "tiny", seed=0)
    assert getattr(m.model.get_rope_index, "__func__", None) is not released_rope_index
    engine = load_hf_engine(save_vlm(tmp_path / "tiny", model=m, processor=qwen_processor("qwen2_5_vl")))
    assert engine.vlm.model.get_rope_index.__func__ is released_rope_index and not engine.vlm.training
