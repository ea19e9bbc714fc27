"""LoRA through the trainer: only the adapters train, resume is exact (reference included), the merged folder loads, 2-process DDP."""
import json, os, subprocess, sys
from pathlib import Path

import pytest
import torch

from easyvideor1.train import load_config, read_jsonl, train

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(model="qwen2_5_vl:tiny", synthetic_n=4, synthetic_test_n=2, prompts_per_step=2, group_size=2,
            sft_steps=1, sft_batch_size=2, max_new_tokens=6, eval_every=0, eval_n=2, tensorboard=False,
            lr=1e-2, sft_lr=1e-2, warmup_steps=1, synthetic_val_n=1, lr_decay_steps=0,
            lora_rank=4, lora_alpha=8.0, beta=0.05, dynamic_sampling=False)  # beta > 0: the reference is the policy with the hand-over adapters
KEYS = ("loss", "reward", "grad_norm", "entropy", "kl")


def _env():
    return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
                PYTHONPATH=str(ROOT))


@pytest.fixture(scope="module")
def lora_runs(tmp_path_factory):
    "A 3-step LoRA run (warm start + 2 GRPO steps), and the same run stopped after the first GRPO step and resumed."
    root = tmp_path_factory.mktemp("lora")
    full, part = root / "full", root / "part"
    train(load_config(overrides=dict(TINY, output_dir=str(full), max_steps=2)))
    part.mkdir()
    os.symlink(full / "suite", part / "suite")
    train(load_config(overrides=dict(TINY, output_dir=str(part), max_steps=1)))
    train(load_config(overrides=dict(TINY, output_dir=str(part), max_steps=2, resume=True)))
    return full, part


def _base_digest(seed=0):
    from easyvideor1.lora import base_digest
    from easyvideor1.models import qwen_vlm
    return base_digest(qwen_vlm("qwen2_5_vl", "tiny", seed=seed))


def test_only_the_adapters_train(lora_runs):
    "The checkpoint holds a PEFT adapter whose B moved off zero, trained on the untouched base (its digest = a fresh model's)."
    from safetensors.torch import load_file
    ck = sorted((lora_runs[0] / "checkpoints").glob("step_*"))[-1]
    assert not (ck / "model").exists() and (ck / "adapter" / "adapter_config.json").exists()
    assert (ck / "adapter" / "base.sha256").read_text().strip() == _base_digest()
    sd = load_file(str(ck / "adapter" / "adapter_model.safetensors"))
    assert all(k.startswith("base_model.model.model.language_model.") and (".lora_A." in k or ".lora_B." in k) for k in sd)
    assert all(float(v.abs().max()) > 0 for k, v in sd.items() if ".lora_B." in k)  # every adapter learned something
    assert json.loads((ck / "adapter" / "adapter_config.json").read_text())["r"] == 4


def test_reference_is_the_hand_over_policy(lora_runs):
    "beta > 0: at the first GRPO step the policy equals its reference (the warm-started adapters), so the KL is exactly 0."
    grpo = [m for m in read_jsonl(lora_runs[0] / "metrics.jsonl") if m["phase"] == "grpo"]
    assert len(grpo) == 2 and "kl" in grpo[0]
    assert grpo[0]["kl"] == 0.0
    assert (lora_runs[0] / "reference" / "reference_adapters.safetensors").exists()


def test_resume_is_exact(lora_runs):
    "Stopped after the hand-over and resumed (adapter, optimizer, reference adapters from disk): the same metrics and weights."
    full, part = lora_runs
    a, b = read_jsonl(full / "metrics.jsonl"), read_jsonl(part / "metrics.jsonl")
    assert [m["step"] for m in a] == [m["step"] for m in b] == [0, 1, 2]
    for x, y in zip(a, b):
        for k in KEYS:
            if k in x: assert x[k] == pytest.approx(y[k], rel=1e-5, abs=1e-6), (x["step"], k)
    assert (full / "params_rank0.sha256").read_text() == (part / "params_rank0.sha256").read_text()


def test_resume_refuses_other_settings(lora_runs, tmp_path):
    "A LoRA checkpoint resumed as full fine-tuning, or on another base, is refused with the reason."
    from easyvideor1.lora import apply_lora, load_adapter
    from easyvideor1.models import qwen_vlm
    with pytest.raises(ValueError, match="LoRA checkpoint"):
        train(load_config(overrides=dict(TINY, output_dir=str(lora_runs[1]), max_steps=3, lora_rank=0, resume=True)))
    ck = sorted((lora_runs[0] / "checkpoints").glob("step_*"))[-1]
    with pytest.raises(ValueError, match="base weights"): load_adapter(apply_lora(qwen_vlm("qwen2_5_vl", "tiny", seed=1), 4, 8.0), ck / "adapter")


def test_merged_folder_loads_with_auto_class(lora_runs, tmp_path):
    "python -m easyvideor1.lora merge CKPT OUT: AutoModelForImageTextToText loads it and computes the LoRA policy's function."
    from transformers import AutoModelForImageTextToText
    from easyvideor1.lora import apply_lora, load_adapter
    from easyvideor1.models import qwen_vlm
    ck, out = sorted((lora_runs[0] / "checkpoints").glob("step_*"))[-1], tmp_path / "merged"
    r = subprocess.run([sys.executable, "-m", "easyvideor1.lora", "merge", str(ck), str(out)], capture_output=True, text=True, env=_env())
    assert r.returncode == 0, r.stderr[-3000:]
    merged = AutoModelForImageTextToText.from_pretrained(out)
    policy = load_adapter(apply_lora(qwen_vlm("qwen2_5_vl", "tiny", seed=0), 4, 8.0), ck / "adapter")
    ids = torch.tensor([[151644, 872, 198, 3838, 374, 220, 22, 856, 220, 21, 30, 151645]])  # (1, 12) a text prompt
    with torch.no_grad(): a, b, base = merged(input_ids=ids).logits, policy(input_ids=ids).logits, qwen_vlm("qwen2_5_vl", "tiny")(input_ids=ids).logits
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert float((a - base).abs().max()) > 1e-3  # the adapters changed the function
    assert (out / "tokenizer_config.json").exists() or (out / "processor_config.json").exists()
    assert AutoModelForImageTextToText.from_pretrained(lora_runs[0] / "best")  # best/ is a merged folder too


def test_two_process_ddp_lora_run(tmp_path):
    "ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes 2: LoRA ranks end with identical adapters."
    out = tmp_path / "ddp"
    args = [f"{k}={v}" for k, v in dict(TINY, output_dir=str(out), max_steps=2).items()]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "easyvideor1.train", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(_env(), ACCELERATE_USE_CPU="true"), timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (out / "params_rank0.sha256").read_text() == (out / "params_rank1.sha256").read_text()
    assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == [0, 1, 2]
    ck = sorted((out / "checkpoints").glob("step_*"))[-1]
    assert (ck / "adapter" / "base.sha256").read_text().strip() == _base_digest()


FSDP1 = dict(TINY, parallel="fsdp2", gradient_checkpointing=True)


@pytest.fixture(scope="module")
def fsdp2_run(lora_runs, tmp_path_factory):
    "The LoRA run under parallel=fsdp2 on one process (a one-rank group), with gradient checkpointing."
    out = tmp_path_factory.mktemp("fsdp2") / "full"
    out.mkdir()
    os.symlink(lora_runs[0] / "suite", out / "suite")
    train(load_config(overrides=dict(FSDP1, output_dir=str(out), max_steps=2)))
    return out


def test_fsdp2_lora_on_one_process_matches_the_plain_run(lora_runs, fsdp2_run):
    "parallel=fsdp2 (a one-rank group) with gradient checkpointing: the LoRA run's numbers are the plain run's; the adapter is saved gathered."
    out = fsdp2_run
    a, b = read_jsonl(lora_runs[0] / "metrics.jsonl"), read_jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in b] == [0, 1, 2]
    for x, y in zip(a, b):
        for k in KEYS:
            if k in x: assert x[k] == pytest.approx(y[k], rel=1e-4, abs=1e-6), (x["step"], k)
    ck = sorted((out / "checkpoints").glob("step_*"))[-1]
    assert (ck / "sharded").is_dir() and (ck / "adapter" / "base.sha256").read_text().strip() == _base_digest()


def test_two_process_fsdp2_lora_run(lora_runs, tmp_path):
    "accelerate launch --num_processes 2 with parallel=fsdp2: sharded adapters (frozen base shards beside them) train alike on both ranks."
    out = tmp_path / "fsdp2x2"
    out.mkdir()
    os.symlink(lora_runs[0] / "suite", out / "suite")
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
    "FSDP2: stopped after the hand-over, resumed from the sharded state with the reference adapters cut into shards: the same run."
    part = tmp_path / "part"
    part.mkdir()
    os.symlink(fsdp2_run / "suite", part / "suite")
    train(load_config(overrides=dict(FSDP1, output_dir=str(part), max_steps=1)))
    train(load_config(overrides=dict(FSDP1, output_dir=str(part), max_steps=2, resume=True)))
    a, b = read_jsonl(fsdp2_run / "metrics.jsonl"), read_jsonl(part / "metrics.jsonl")
    assert [m["step"] for m in b] == [0, 1, 2]
    for x, y in zip(a, b):
        for k in KEYS:
            if k in x: assert x[k] == pytest.approx(y[k], rel=1e-5, abs=1e-6), (x["step"], k)
    assert (fsdp2_run / "params_rank0.sha256").read_text() == (part / "params_rank0.sha256").read_text()


def test_one_weight_digest_for_the_lora_base_the_ranks_and_the_evaluator(tmp_path):
    "The LoRA base digest, the trainer's per-rank digest and the evaluator's in-memory digest hash the same bytes."
    from easyvideor1.evaluate import state_dict_digest
    from easyvideor1.lora import base_digest
    from easyvideor1.models import qwen_vlm
    from easyvideor1.train import write_param_digest
    m = qwen_vlm("qwen2_5_vl", "tiny", seed=0, dtype=torch.bfloat16)
    digests = {"lora.base_digest": base_digest(m), "evaluate.state_dict_digest": state_dict_digest(m),
               "train.write_param_digest": write_param_digest(m, tmp_path / "p.sha256")}
    assert len(set(digests.values())) == 1, digests
