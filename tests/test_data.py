"Data pipeline checks too slow or too broad for the notebook: every shared benchmark file, both families, cache path."
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from easyvideor1.data import (DataError, Media, PlaceholderMismatch, check_inputs, collate, forward_vlm, load_media,
                              prompt_inputs, prompt_text, read_samples, split, with_completion)
from easyvideor1.video import ImageContract, VideoContract

BENCH = Path(__file__).resolve().parent / "fixtures" / "benchmarks"  # samples of the real annotation files
FAMILIES = ("qwen2_5_vl", "qwen3_vl")


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    "A synthetic clip and image (standing in for benchmark media that is not on this machine)."
    from easyvideor1.synthetic import make_suite
    return make_suite(tmp_path_factory.mktemp("suite"), n_per_task=1, n_test=1, seed=0, tasks=["direction", "ground"])


@pytest.fixture(scope="module")
def procs():
    from easyvideor1.models import qwen_processor
    return {fam: qwen_processor(fam) for fam in FAMILIES}


def stand_in_media(suite, fam):
    "Frames of the synthetic clip and image under small contracts of the family."
    vc = VideoContract.for_family(fam, max_pixels=64 * 64, min_pixels=32 * 32)
    ic = ImageContract.for_family(fam, max_pixels=112 * 112)
    rows = read_samples(suite / "train.jsonl")
    video = load_media(rows[0], vc, ic)
    image = load_media(rows[1], vc, ic)
    return video, image


@pytest.mark.skipif(not BENCH.exists(), reason="shared benchmark samples not present")
@pytest.mark.parametrize("fam", FAMILIES)
def test_every_benchmark_file_builds_prompts_and_inputs(fam, suite, procs):
    video, image = stand_in_media(suite, fam)
    files = sorted(BENCH.glob("*.json*"))
    assert len(files) >= 20
    n = 0
    for f in files:
        samples = read_samples(f, media_root="/nonexistent")
        assert samples, f
        for s in samples:
            assert s.videos and all(p.startswith("/nonexistent/") for p in s.videos + s.images), s.where
            media = Media(videos=video.videos * len(s.videos), video_meta=video.video_meta * len(s.videos),
                          images=image.images * len(s.images))
            text = prompt_text(procs[fam], s)
            assert "<answer>" in text and "<|vision_start|>" in text, s.where
            if s.problem_type == "multiple choice" and s.options:
                assert f"Options:\nA. " in text, s.where
            x = prompt_inputs(procs[fam], s, media)
            check_inputs(x, procs[fam])
            assert (x.video_grid_thw is not None) == bool(s.videos)
            assert (x.image_grid_thw is not None) == bool(s.images)
            n += 1
    assert n == sum(len(json.loads(f.read_text())) for f in files)


@pytest.mark.skipif(not BENCH.exists(), reason="shared benchmark samples not present")
def test_benchmark_answers_and_special_rows():
    charades = read_samples(BENCH / "charades_sta.json")
    assert all(json.loads(s.answer)["time"] for s in charades)  # <think>...</think><[PLHD..]> unwrapped
    with_image = [s for s in read_samples(BENCH / "videommmu_with_image.json") if s.images]
    assert with_image and all(len(s.videos) == 1 for s in with_image)
    caption = read_samples(BENCH / "videommlu.json")[0]
    assert caption.problem == "" and caption.options == []
    mvbench = [s for s in read_samples(BENCH / "mvbench.json") if "start" in s.extra]
    assert mvbench and "answer" in mvbench[0].extra  # the raw text answer is kept beside the unwrapped solution


def test_malformed_json_array_names_line(tmp_path):
    rows = [{"problem": "Q", "solution": "<answer>1</answer>", "problem_type": "numerical", "data_type": "text"}] * 2
    text = json.dumps(rows, indent=1).replace('"data_type": "text"\n }\n]', '"data_type": "video"\n }\n]')
    (tmp_path / "b.json").write_text(text)
    line = text.splitlines().index(" {", 2) + 1  # the second item's opening line
    with pytest.raises(DataError, match=rf"b.json:{line}: data_type is 'video' but the row names no video"):
        read_samples(tmp_path / "b.json")
    skipped = []
    assert len(read_samples(tmp_path / "b.json", skipped=skipped)) == 1 and len(skipped) == 1


def test_missing_media_is_a_named_error(suite):
    s = read_samples(suite / "train.jsonl", media_root="/nonexistent")[0]
    with pytest.raises(Exception, match="/nonexistent/videos/direction-train-0000.mp4"):
        load_media(s, VideoContract.for_family("qwen3_vl"), ImageContract.for_family("qwen3_vl"))


def test_cache_and_direct_media_give_identical_inputs(suite, procs, tmp_path):
    from easyvideor1.cache import FrameCache
    fam = "qwen3_vl"
    vc, ic = VideoContract.for_family(fam, max_pixels=64 * 64, min_pixels=32 * 32), ImageContract.for_family(fam)
    cache = FrameCache(tmp_path / "cache")
    for s in read_samples(suite / "train.jsonl"):
        direct, cached = load_media(s, vc, ic), load_media(s, vc, ic, cache)
        a, b = prompt_inputs(procs[fam], s, direct), prompt_inputs(procs[fam], s, cached)
        assert torch.equal(a.input_ids, b.input_ids)
        for k in ("pixel_values", "pixel_values_videos"):
            assert (getattr(a, k) is None and getattr(b, k) is None) or torch.equal(getattr(a, k), getattr(b, k))


@pytest.mark.parametrize("fam", FAMILIES)
def test_dummy_vision_leaves_loss_and_language_grads_unchanged(fam, suite, procs):
    "On a mixed batch with no image, forward_vlm's loss and every non-vision gradient equal the plain forward's."
    from easyvideor1.models import qwen_vlm
    p = procs[fam]
    video, _ = stand_in_media(suite, fam)
    s = read_samples(suite / "train.jsonl")[0]
    text = replace(s, id="text", videos=[], data_type="text", problem="What is 6 times 7?")
    items = [with_completion(prompt_inputs(p, x, m), p.tokenizer("<answer>B</answer>").input_ids, p)
             for x, m in ((s, video), (text, Media()))]
    batch = collate(items, p.tokenizer.pad_token_id, pad_side="left")
    model = qwen_vlm(fam, "tiny", seed=0)
    model.get_input_embeddings().weight.requires_grad_(False)
    K = int(batch.completion_mask.sum(1).max()) + 1

    def loss_and_grads(logits_fn):
        model.zero_grad(set_to_none=True)
        logits = logits_fn()
        mask = batch.completion_mask[:, -K + 1:]
        loss = torch.nn.functional.cross_entropy(logits[:, :-1][mask].float(), batch.input_ids[:, -K + 1:][mask])
        loss.backward()
        return loss.detach(), {n: q.grad.clone() for n, q in model.named_parameters() if q.grad is not None}

    l0, g0 = loss_and_grads(lambda: model(**batch.model_kwargs(), logits_to_keep=K).logits)
    l1, g1 = loss_and_grads(lambda: forward_vlm(model, batch, logits_to_keep=K).logits)
    assert torch.equal(l0, l1)
    vision = {n for n, _ in model.model.visual.named_parameters()}
    assert {n.removeprefix("model.visual.") for n in g1 if n.startswith("model.visual.")} == vision
    for n, g in g0.items(): assert torch.equal(g, g1[n]), n
    # the regrouped micro-batch gives the same logits as the original batch rows
    sub = split(batch, [1])
    with torch.no_grad():
        torch.testing.assert_close(forward_vlm(model, sub, logits_to_keep=K).logits[0],
                                   forward_vlm(model, batch, logits_to_keep=K).logits[1], atol=1e-4, rtol=1e-4)


def test_truncated_prompt_is_caught(suite, procs):
    p = procs["qwen2_5_vl"]
    video, _ = stand_in_media(suite, "qwen2_5_vl")
    x = prompt_inputs(p, read_samples(suite / "train.jsonl")[0], video)
    cut = replace(x, input_ids=x.input_ids[:20], mm_token_type_ids=x.mm_token_type_ids[:20], prompt_len=20)
    with pytest.raises(PlaceholderMismatch, match="sample direction-train-0000"):
        check_inputs(cut, p)


@pytest.mark.parametrize("fam", FAMILIES)
def test_every_micro_batch_calls_the_tower_twice_and_grads_every_vision_param(fam, suite, procs):
    "Text-only, image-only, video-only and mixed micro-batches: 2 tower calls, a gradient on every vision parameter."
    from easyvideor1.models import qwen_vlm
    p, model = procs[fam], qwen_vlm(fam, "tiny", seed=0)
    model.get_input_embeddings().weight.requires_grad_(False)
    video, image = stand_in_media(suite, fam)
    v, i = read_samples(suite / "train.jsonl")
    t = replace(v, id="text", videos=[], data_type="text", problem="Which direction is left of right?")
    items = [with_completion(prompt_inputs(p, s, m), p.tokenizer("<answer>B</answer>").input_ids, p)
             for s, m in ((t, Media()), (i, image), (v, video))]
    big = collate(items, p.tokenizer.pad_token_id, pad_side="left")
    calls = []
    model.model.visual.register_forward_hook(lambda *_: calls.append(1))
    for idx in ([0], [1], [2], [0, 1, 2]):
        mb = split(big, idx)
        model.zero_grad(set_to_none=True)
        calls.clear()
        logits = forward_vlm(model, mb, logits_to_keep=8).logits
        assert len(calls) == 2, idx
        mask = mb.completion_mask[:, -7:]
        torch.nn.functional.cross_entropy(logits[:, :-1][mask].float(), mb.input_ids[:, -7:][mask]).backward()
        assert all(q.grad is not None for q in model.model.visual.parameters()), idx


@pytest.mark.parametrize("fam", FAMILIES)
def test_generate_on_left_padded_mixed_batch(fam, suite, procs):
    "HF generate takes a left-padded batch's model_kwargs; batched and one-by-one greedy outputs agree."
    from easyvideor1.models import qwen_vlm
    p, model = procs[fam], qwen_vlm(fam, "tiny", seed=0)
    video, image = stand_in_media(suite, fam)
    samples = read_samples(suite / "train.jsonl")
    xs = [prompt_inputs(p, s, m) for s, m in zip(samples, (video, image))]
    out = model.generate(**collate(xs, p.tokenizer.pad_token_id, "left").model_kwargs(), max_new_tokens=3, do_sample=False)
    for i, x in enumerate(xs):
        one = model.generate(**collate([x], p.tokenizer.pad_token_id, "left").model_kwargs(), max_new_tokens=3, do_sample=False)
        assert one[0, -3:].tolist() == out[i, -3:].tolist()


def test_qwen3_5_contract_is_its_processors_grid(suite):
    "Qwen3.5's contract (factor 32) sizes frames its processor takes unresized: grid = frames / 2 x H / 16 x W / 16."
    from easyvideor1.models import qwen_processor
    from easyvideor1.video import FAMILY_FACTOR
    p = qwen_processor("qwen3_5")
    assert FAMILY_FACTOR["qwen3_5"] == p.video_processor.patch_size * p.video_processor.merge_size == 32
    video, image = stand_in_media(suite, "qwen3_5")
    rows = read_samples(suite / "train.jsonl")
    for s, m in ((rows[0], video), (rows[1], image)):
        x = prompt_inputs(p, s, m)
        check_inputs(x, p)
        frames = (m.videos or m.images)[0]
        T, H, W = (frames.shape[0], *frames.shape[-2:]) if m.videos else (2, *frames.shape[-2:])
        assert (x.video_grid_thw if m.videos else x.image_grid_thw).tolist() == [[T // 2, H // 16, W // 16]]
        assert int((x.input_ids == (p.video_token_id if m.videos else p.image_token_id)).sum()) == T // 2 * H * W // 32**2
