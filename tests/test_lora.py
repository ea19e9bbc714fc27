"""LoRA through the trainer: only the adapters train, resume is exact (reference included), the merged folder loads,
2-process DDP and FSDP2; a frozen tower's cached vision features give every pass the numbers of the tower run anew.

Runs are shared: the uninterrupted run of each mode (plain, FSDP2 on one process) also checkpoints after its first GRPO
step, and its resume test restarts a copy of it from there, as after a crash; every run reads one synthetic suite."""
import json, os, shutil, subprocess, sys
from pathlib import Path

import pytest
import torch

from easyvideor1.config import load_config
from easyvideor1.synthetic import read_jsonl
from easyvideor1.train import train

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(model="qwen2_5_vl:tiny", synthetic_n=4, synthetic_test_n=2, prompts_per_step=2, group_size=2,
            sft_steps=1, sft_batch_size=2, max_new_tokens=6, eval_every=0, eval_n=2, tensorboard=False,
            lr=1e-2, sft_lr=1e-2, warmup_steps=1, synthetic_val_n=1, lr_decay_steps=0,
            lora_rank=4, lora_alpha=8.0, beta=0.05, dynamic_sampling=False)  # beta > 0: the reference is the policy with the hand-over adapters
ONE = dict(TINY, eval_n=1, save_every=2)  # one process: 1 held-out sample (2 ranks need 2); a checkpoint at step 2 to resume
KEYS = ("loss", "reward", "grad_norm", "entropy", "kl")


def _env():
    return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
                PYTHONPATH=str(ROOT))


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    "One intra-op thread, as the 2-process runs have."
    # the tiny model's ops gain nothing from a second thread, and on shared busy cores (CI, a niced run) every op waits
    # for it: the in-process runs took 4-5x longer with two
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _linked(out: Path, suite: Path) -> Path:
    "A new run folder that reads the shared synthetic suite."
    out.mkdir(parents=True)
    os.symlink(suite, out / "suite")
    return out


def _resumed_copy(run: Path, out: Path, cfg: dict) -> Path:
    "A copy of a finished run without its newest checkpoint (a crash during the last step), resumed to the end."
    shutil.copytree(run, out, symlinks=True)
    shutil.rmtree(sorted((out / "checkpoints").glob("step_*"))[-1])
    (out / "params_rank0.sha256").unlink()  # written again only by a run that finishes
    train(load_config(overrides=dict(cfg, output_dir=str(out), resume=True)))
    return out


@pytest.fixture(scope="module")
def lora_runs(tmp_path_factory):
    "A 3-step LoRA run (warm start + 2 GRPO steps), the same with the feature cache off (2 steps), the first resumed."
    root = tmp_path_factory.mktemp("lora")
    full = root / "full"
    train(load_config(overrides=dict(ONE, output_dir=str(full), max_steps=2)))
    off = _linked(root / "off", full / "suite")
    train(load_config(overrides=dict(ONE, output_dir=str(off), max_steps=1, vision_feature_cache="off")))
    return dict(full=full, off=off, resumed=_resumed_copy(full, root / "resumed", dict(ONE, max_steps=2)))


def _base_digest(seed=0):
    from easyvideor1.lora import base_digest
    from easyvideor1.models import qwen_vlm
    return base_digest(qwen_vlm("qwen2_5_vl", "tiny", seed=seed))


def test_only_the_adapters_train(lora_runs):
    "The checkpoint holds a PEFT adapter whose B moved off zero, trained on the untouched base (its digest = a fresh model's)."
    from safetensors.torch import load_file
    ck = sorted((lora_runs["full"] / "checkpoints").glob("step_*"))[-1]
    assert not (ck / "model").exists() and (ck / "adapter" / "adapter_config.json").exists()
    assert (ck / "adapter" / "base.sha256").read_text().strip() == _base_digest()
    sd = load_file(str(ck / "adapter" / "adapter_model.safetensors"))
    assert all(k.startswith("base_model.model.model.language_model.") and (".lora_A." in k or ".lora_B." in k) for k in sd)
    assert all(float(v.abs().max()) > 0 for k, v in sd.items() if ".lora_B." in k)  # every adapter learned something
    assert json.loads((ck / "adapter" / "adapter_config.json").read_text())["r"] == 4


def test_reference_is_the_hand_over_policy(lora_runs):
    "beta > 0: at the first GRPO step the policy equals its reference (the warm-started adapters), so the KL is exactly 0."
    grpo = [m for m in read_jsonl(lora_runs["full"] / "metrics.jsonl") if m["phase"] == "grpo"]
    assert len(grpo) == 2 and "kl" in grpo[0]
    assert grpo[0]["kl"] == 0.0
    assert (lora_runs["full"] / "reference" / "reference_adapters.safetensors").exists()


def _same_run(a: Path, b: Path, rel: float = 1e-5, keys=KEYS):
    "Two runs logged the same steps and the same numbers (`keys`; None: every number but the timings)."
    x, y = read_jsonl(a / "metrics.jsonl"), read_jsonl(b / "metrics.jsonl")
    assert [m["step"] for m in x][:len(y)] == [m["step"] for m in y], (a, b)
    for p, q in zip(x, y):
        for k in keys or [k for k, v in q.items() if isinstance(v, (int, float)) and not k.startswith("time/")]:
            if k in q: assert q[k] == pytest.approx(p[k], rel=rel, abs=1e-6, nan_ok=True), (q["step"], k)


def test_resume_is_exact(lora_runs):
    "Restarted after the first GRPO step (adapter, optimizer, reference adapters from disk): the same metrics and weights."
    full, resumed = lora_runs["full"], lora_runs["resumed"]
    assert [m["step"] for m in read_jsonl(resumed / "metrics.jsonl")] == [0, 1, 2]  # step 2, logged before the crash: once
    _same_run(full, resumed)
    assert (full / "params_rank0.sha256").read_text() == (resumed / "params_rank0.sha256").read_text()
    assert read_jsonl(full / "evals.jsonl") == read_jsonl(resumed / "evals.jsonl")


def test_feature_cache_on_and_off_log_the_same_metrics(lora_runs):
    "vision_feature_cache=auto (the tower's features stored once, read back) and off (the tower in every pass): one run."
    full, off = lora_runs["full"], lora_runs["off"]
    _same_run(full, off, keys=None)
    ev = {e["step"]: e for e in read_jsonl(full / "evals.jsonl")}
    assert [e for e in read_jsonl(off / "evals.jsonl") if e["step"] in ev] == [ev[0], ev[1]]  # the evaluations both made
    (ns,) = (full / "cache" / "features").iterdir()  # one namespace: the tower never changed
    assert json.loads((ns / "namespace.json").read_text())["tower"] and len(list(ns.rglob("*.npy"))) >= 4
    assert not (off / "cache" / "features").exists()


def test_resume_refuses_other_settings(lora_runs, tmp_path):
    "A LoRA checkpoint resumed as full fine-tuning, or on another base, is refused with the reason."
    from easyvideor1.lora import apply_lora, load_adapter
    from easyvideor1.models import qwen_vlm
    with pytest.raises(ValueError, match="LoRA checkpoint"):
        train(load_config(overrides=dict(ONE, output_dir=str(lora_runs["resumed"]), max_steps=3, lora_rank=0,
                                         resume=True)))
    ck = sorted((lora_runs["full"] / "checkpoints").glob("step_*"))[-1]
    with pytest.raises(ValueError, match="base weights"): load_adapter(apply_lora(qwen_vlm("qwen2_5_vl", "tiny", seed=1), 4, 8.0), ck / "adapter")


def test_merged_folder_loads_with_auto_class(lora_runs, tmp_path):
    "python -m easyvideor1.lora merge CKPT OUT: AutoModelForImageTextToText loads it and computes the LoRA policy's function."
    from transformers import AutoModelForImageTextToText
    from easyvideor1.lora import apply_lora, load_adapter
    from easyvideor1.models import qwen_vlm
    ck, out = sorted((lora_runs["full"] / "checkpoints").glob("step_*"))[-1], tmp_path / "merged"
    r = subprocess.run([sys.executable, "-m", "easyvideor1.lora", "merge", str(ck), str(out)], capture_output=True, text=True, env=_env())
    assert r.returncode == 0, r.stderr[-3000:]
    merged = AutoModelForImageTextToText.from_pretrained(out)
    policy = load_adapter(apply_lora(qwen_vlm("qwen2_5_vl", "tiny", seed=0), 4, 8.0), ck / "adapter")
    ids = torch.tensor([[151644, 872, 198, 3838, 374, 220, 22, 856, 220, 21, 30, 151645]])  # (1, 12) a text prompt
    with torch.no_grad(): a, b, base = merged(input_ids=ids).logits, policy(input_ids=ids).logits, qwen_vlm("qwen2_5_vl", "tiny")(input_ids=ids).logits
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert float((a - base).abs().max()) > 1e-3  # the adapters changed the function
    assert (out / "tokenizer_config.json").exists() or (out / "processor_config.json").exists()
    assert AutoModelForImageTextToText.from_pretrained(lora_runs["full"] / "best")  # best/ is a merged folder too


def test_two_process_ddp_lora_run(lora_runs, tmp_path):
    "ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes 2: LoRA ranks end with identical adapters."
    out = _linked(tmp_path / "ddp", lora_runs["full"] / "suite")
    args = [f"{k}={v}" for k, v in dict(TINY, output_dir=str(out), max_steps=2).items()]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "easyvideor1.train", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(_env(), ACCELERATE_USE_CPU="true"), timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (out / "params_rank0.sha256").read_text() == (out / "params_rank1.sha256").read_text()
    assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == [0, 1, 2]
    ck = sorted((out / "checkpoints").glob("step_*"))[-1]
    assert (ck / "adapter" / "base.sha256").read_text().strip() == _base_digest()


FSDP1 = dict(ONE, parallel="fsdp2", gradient_checkpointing=True)


@pytest.fixture(scope="module")
def fsdp2_run(lora_runs, tmp_path_factory):
    "The LoRA run under parallel=fsdp2 on one process (a one-rank group), with gradient checkpointing."
    out = _linked(tmp_path_factory.mktemp("fsdp2") / "full", lora_runs["full"] / "suite")
    train(load_config(overrides=dict(FSDP1, output_dir=str(out), max_steps=2)))
    return out


def test_fsdp2_lora_on_one_process_matches_the_plain_run(lora_runs, fsdp2_run):
    "parallel=fsdp2 (a one-rank group) with gradient checkpointing: the LoRA run's numbers are the plain run's; the adapter is saved gathered."
    out = fsdp2_run
    assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == [0, 1, 2]
    _same_run(lora_runs["full"], out, rel=1e-4)
    ck = sorted((out / "checkpoints").glob("step_*"))[-1]
    assert (ck / "sharded").is_dir() and (ck / "adapter" / "base.sha256").read_text().strip() == _base_digest()


def test_two_process_fsdp2_lora_run(lora_runs, tmp_path):
    "accelerate launch --num_processes 2 with parallel=fsdp2: sharded adapters (frozen base shards beside them) train alike on both ranks."
    out = _linked(tmp_path / "fsdp2x2", lora_runs["full"] / "suite")
    args = [f"{k}={v}" for k, v in dict(TINY, output_dir=str(out), max_steps=2, parallel="fsdp2").items()]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "easyvideor1.train", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(_env(), ACCELERATE_USE_CPU="true"), timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (out / "params_rank0.sha256").read_text() == (out / "params_rank1.sha256").read_text()
    grpo = [m for m in read_jsonl(out / "metrics.jsonl") if m["phase"] == "grpo"]
    assert len(grpo) == 2 and grpo[0].get("kl", 0.0) == 0.0  # a step without signal logs no KL
    ck = sorted((out / "checkpoints").glob("step_*"))[-1]
    assert (ck / "adapter" / "base.sha256").read_text().strip() == _base_digest()


def test_sync_weights_are_a_plain_state_dict():
    "`merged_state_items` (what a vLLM sync pushes): a plain model's names, PEFT's merge_and_unload values bit for bit, the LoRA model untouched."
    from peft import PeftModel
    from easyvideor1.lora import apply_lora, base_digest, merged_state_items, save_adapter
    from easyvideor1.models import qwen_vlm
    import tempfile
    plain = qwen_vlm("qwen2_5_vl", "tiny", seed=0).state_dict()
    model = apply_lora(qwen_vlm("qwen2_5_vl", "tiny", seed=0), 4, 8.0)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".lora_B." in n: p.normal_(0, 0.1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    items = list(merged_state_items(model))
    assert [k for k, _ in items] == list(plain)  # the order and names vLLM's load_weights gets from a plain model
    with tempfile.TemporaryDirectory() as d:
        save_adapter(model, d)
        oracle = PeftModel.from_pretrained(qwen_vlm("qwen2_5_vl", "tiny", seed=0), d).merge_and_unload().state_dict()
    assert all(torch.equal(v, oracle[k]) for k, v in items)
    changed = [k for k, v in items if not torch.equal(v, plain[k])]
    assert changed and all("language_model.layers" in k and k.endswith("proj.weight") for k in changed)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # out of place: nothing written
    assert base_digest(model) == base_digest(qwen_vlm("qwen2_5_vl", "tiny", seed=0))


def test_fsdp2_lora_resume_is_exact(fsdp2_run, tmp_path):
    "FSDP2: restarted from the sharded state after the first GRPO step, reference adapters cut into shards: the same run."
    resumed = _resumed_copy(fsdp2_run, tmp_path / "resumed", dict(FSDP1, max_steps=2))
    assert [m["step"] for m in read_jsonl(resumed / "metrics.jsonl")] == [0, 1, 2]
    _same_run(fsdp2_run, resumed)
    assert (fsdp2_run / "params_rank0.sha256").read_text() == (resumed / "params_rank0.sha256").read_text()


def test_one_weight_digest_for_the_lora_base_the_ranks_and_the_evaluator(tmp_path):
    "The LoRA base digest, the trainer's per-rank digest and the evaluator's in-memory digest hash the same bytes."
    from easyvideor1.evaluate import state_dict_digest
    from easyvideor1.lora import base_digest
    from easyvideor1.models import qwen_vlm
    from easyvideor1.checkpoint import write_param_digest
    m = qwen_vlm("qwen2_5_vl", "tiny", seed=0, dtype=torch.bfloat16)
    digests = {"lora.base_digest": base_digest(m), "evaluate.state_dict_digest": state_dict_digest(m),
               "train.write_param_digest": write_param_digest(m, tmp_path / "p.sha256")}
    assert len(set(digests.values())) == 1, digests


def _keyed_prompts(fam):
    "Two video prompts (other clips), an image and a text prompt of the family, media named as the frame cache names them."
    from dataclasses import replace
    sys.path.insert(0, str(Path(__file__).parent))
    from test_prefix import toy_prompt
    return [replace(toy_prompt(fam, "video"), video_keys=(f"{fam}-v",)), replace(toy_prompt(fam, "image"), image_keys=(f"{fam}-i",)),
            replace(toy_prompt(fam, "video", n_frames=4), video_keys=(f"{fam}-w",)), toy_prompt(fam, "text")]


def _moved_lora(fam):
    "A LoRA model whose adapters moved off B = 0 (a trained policy), with the trainer's position rule."
    from easyvideor1.lora import apply_lora
    from easyvideor1.models import qwen_vlm
    from easyvideor1.rollout import use_released_positions
    m = apply_lora(qwen_vlm(fam, "tiny", seed=0), 4, 8.0)
    use_released_positions(m)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if ".lora_B." in n: p.copy_(torch.linspace(-0.05, 0.05, p.numel()).view_as(p))
    return m


def _every_pass(m, proc, prompts):
    "Log-probs (shared prefix, naive, a padded batch), an update's loss and gradients, rollouts; and the tower calls."
    from easyvideor1.data import collate, forward_vlm, with_completion
    from easyvideor1.lora import vision_tower
    from easyvideor1.prefix import PrefixLogp, group_logprobs, group_micro_batches
    from easyvideor1.rollout import HFEngine, SamplingConfig
    calls, out = [], {}
    hook = vision_tower(m).register_forward_hook(lambda *_: calls.append(1))
    ids = torch.tensor([proc.tokenizer.encode(f"<answer>{c}</answer>") for c in "AB"])  # (2, T)
    with torch.no_grad():
        for i, x in enumerate(prompts):
            out[f"shared{i}"], out[f"naive{i}"] = (group_logprobs(m, x, ids, shared_prefix=s) for s in (True, False))
        b = collate([with_completion(x, ids[0], proc) for x in prompts], proc.tokenizer.pad_token_id, pad_side="left")
        out["batch"] = forward_vlm(m, b, logits_to_keep=ids.shape[1] + 1).logits
    n = len(prompts)
    adv = [torch.tensor([1.0, -1.0])] * n
    mbs = group_micro_batches(prompts, [ids] * n, [torch.ones(ids.shape)] * n, adv, chunk_size=1)
    m.zero_grad(set_to_none=True)
    fn, losses = PrefixLogp(m), []  # two chunks per group: the prompt's gradient waits for the last (as in the update)
    for mb in mbs:
        losses.append((-fn(mb) * mb.adv[:, None]).sum())
        losses[-1].backward()
    out["loss"] = torch.stack(losses).detach()
    out["grads"] = torch.cat([p.grad.flatten() for p in m.parameters() if p.requires_grad])
    greedy = SamplingConfig(n=1, temperature=0.0, max_new_tokens=4)
    tokens = [[c.token_ids for c in g] for g in HFEngine(m, proc).generate(prompts, greedy)]
    for shared in (True, False):
        sc = SamplingConfig(n=2, temperature=1.0, max_new_tokens=4, seed=0)
        tokens += [[c.token_ids for c in g] for g in HFEngine(m, proc, shared_prefix=shared).generate(prompts[:2], sc)]
    hook.remove()
    return out, tokens, len(calls)


@pytest.mark.parametrize("fam", ["qwen2_5_vl", "qwen3_vl"])
def test_cached_vision_features_give_the_recomputed_numbers(fam, tmp_path):
    "A frozen tower's features read back (Qwen3-VL: deepstack too) give every pass the numbers of the tower run anew."
    from easyvideor1.data import encode_vision
    from easyvideor1.lora import use_vision_features
    from easyvideor1.models import qwen_processor
    proc, m, prompts = qwen_processor(fam), _moved_lora(fam), _keyed_prompts(fam)
    want, want_tokens, calls = _every_pass(m, proc, prompts)
    assert calls > 0
    feats = use_vision_features(m, tmp_path, proc)
    for x in prompts[:3]: encode_vision(m, x)  # computes and stores the three media's features
    assert (feats.misses, sorted(p.stem for p in feats.root.rglob("*.npy"))) == (3, [f"{fam}-{k}" for k in "ivw"])
    got, got_tokens, calls = _every_pass(m, proc, prompts)
    assert calls == 0 and feats.misses == 3 and feats.hits > 0  # every pass read the cache
    assert got_tokens == want_tokens
    for k, v in want.items(): torch.testing.assert_close(got[k], v, rtol=1e-5, atol=1e-5, msg=k)
    use_vision_features(m, None)
    assert not hasattr(m, "vision_feature_cache") and "video" in encode_vision(m, prompts[0])[0]  # off again


def test_a_changed_tower_misses(tmp_path):
    "The namespace is the tower's weights (dtype, device, kernel, pixel settings): a changed weight or another model misses."
    from easyvideor1.data import encode_vision
    from easyvideor1.lora import VisionFeatures, use_vision_features, vision_tower
    from easyvideor1.models import qwen_processor, qwen_vlm
    proc, m, (video, *_) = qwen_processor("qwen2_5_vl"), _moved_lora("qwen2_5_vl"), _keyed_prompts("qwen2_5_vl")
    first = use_vision_features(m, tmp_path, proc)
    before = encode_vision(m, video)[0]["video"].pooler_output[0].clone()
    again = use_vision_features(m, tmp_path, proc)  # the same tower: the same folder, a hit
    encode_vision(m, video)
    assert again.root == first.root and (again.hits, again.misses) == (1, 0)
    with torch.no_grad(): vision_tower(m).blocks[0].mlp.up_proj.weight[0, 0] += 1e-2
    moved = use_vision_features(m, tmp_path, proc)
    after = encode_vision(m, video)[0]["video"].pooler_output[0]
    assert moved.root != first.root and (moved.hits, moved.misses) == (0, 1) and not torch.equal(after, before)
    other = VisionFeatures(qwen_vlm("qwen2_5_vl", "tiny", seed=1).requires_grad_(False), tmp_path, proc)
    assert other.root not in (first.root, moved.root)
    assert VisionFeatures(m, tmp_path).root != moved.root  # other pixel settings (none given)
    with pytest.raises(ValueError, match="trainable"):  # full fine-tuning: the tower trains
        VisionFeatures(qwen_vlm("qwen2_5_vl", "tiny", seed=0), tmp_path)
    vision_tower(m).blocks[0].mlp.up_proj.weight.requires_grad_(True)  # unfrozen after the cache was made
    with pytest.raises(RuntimeError, match="stale"): encode_vision(m, video)


def test_vision_feature_cache_key_is_range_checked():
    "vision_feature_cache is auto or off; anything else is refused before the run, naming the key."
    assert load_config(overrides=dict(vision_feature_cache="off")).vision_feature_cache == "off"
    with pytest.raises(ValueError, match="vision_feature_cache='on' is out of range"): load_config(overrides=dict(vision_feature_cache="on"))


def test_qwen3_5_lora_targets_both_layer_kinds():
    "Qwen3.5: the default target adapts the linear-attention layers' projections and the full-attention layer's, MLPs too."
    import re
    from easyvideor1.lora import apply_lora, lora_layers, param_counts
    from easyvideor1.models import qwen_vlm
    model = qwen_vlm("qwen3_5", "tiny", seed=0)
    ids = torch.tensor([[248045, 872, 198, 3838, 374, 220, 22, 248046]])  # (1, 8) a text prompt
    with torch.no_grad(): base = model(input_ids=ids).logits
    apply_lora(model, rank=4, alpha=8.0)
    got = {re.sub(r"\.layers\.\d+\.", ".layers.N.", n).split("language_model.")[1] for n in lora_layers(model)}
    mlp = {f"layers.N.mlp.{p}_proj" for p in ("gate", "up", "down")}
    assert got == mlp | {f"layers.N.linear_attn.{p}" for p in ("in_proj_qkv", "in_proj_z", "out_proj")} | {
        f"layers.N.self_attn.{p}_proj" for p in "qkvo"}
    kinds = model.config.text_config.layer_types
    per_layer = [sum(f"layers.{i}." in n for n in lora_layers(model)) for i in range(len(kinds))]
    assert per_layer == [6, 6, 6, 7] and kinds[3] == "full_attention"
    assert not any("visual" in n for n in lora_layers(model))
    out = model(input_ids=ids).logits
    assert torch.equal(out, base)  # B = 0: the adapted model is the base model
    out.square().mean().backward()
    trained = {n for n, p in model.named_parameters() if p.grad is not None}
    assert trained and all("lora_" in n for n in trained)
    assert param_counts(model)["trainable"] == param_counts(model)["adapter"]
