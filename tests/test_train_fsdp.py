"""The trainer under `parallel=fsdp2` on 2 CPU processes (gloo): a mixed image + video suite, shared prefix and naive, a reference
model, exact resume from the sharded checkpoint, a model folder that loads with AutoModelForImageTextToText, and DDP's numbers.

The gradient oracle (one FSDP2 update == one process's full batch, every parameter, rel <= 1e-5) is proven at the library
level in tests/test_parallel.py; here the trainer's wiring is checked against the DDP trainer on the same config."""
import os, subprocess, sys
from pathlib import Path

import pytest
import torch

from easyvideor1.checkpoint import write_param_digest
from easyvideor1.config import TrainConfig, load_config, lr_lambda, prepare_data
from easyvideor1.synthetic import read_jsonl
from easyvideor1.train import train

ROOT = Path(__file__).resolve().parents[1]
# 4 prompts over 2 ranks: a rank may hold a video group (direction: an offline trajectory replaces one sample) and an image
# group (ground: none), i.e. rollouts of different sizes and modalities on one rank; with seed 0, GRPO step 2 gives rank 0 two
# video groups (short offline answers) and rank 1 two image groups: unequal token counts, so a per-rank loss denominator shows
FSDP = dict(model="qwen2_5_vl:tiny", synthetic_tasks="direction,ground", synthetic_n=4, synthetic_test_n=2, synthetic_val_n=1,
            prompts_per_step=4, group_size=2, sft_steps=1, sft_batch_size=2, max_new_tokens=12, eval_every=0, eval_n=2,
            tensorboard=False, lr=1e-2, sft_lr=1e-2, warmup_steps=1, temperature=1.0, lr_decay_steps=0,
            dynamic_sampling=False, beta=0.0)


def _env():
    return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
                ACCELERATE_USE_CPU="true", PYTHONPATH=str(ROOT))


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    "The mixed image + video synthetic suite, generated once and linked into every run folder."
    root = tmp_path_factory.mktemp("fsdp-train")
    train_file, _, _ = prepare_data(load_config(overrides=dict(FSDP, output_dir=str(root / "seed"))), True, lambda: None)
    kinds = {r["data_type"] for r in read_jsonl(train_file)}
    assert kinds == {"video", "image"}, kinds
    return root / "seed" / "suite"


def launch(suite, out: Path, **cfg):
    "`accelerate launch --multi_gpu --num_processes 2 -m easyvideor1.train` on CPU, the suite linked in; returns metrics."
    if not out.exists():
        out.mkdir(parents=True)
        os.symlink(suite, out / "suite")
    args = [f"{k}={v}" for k, v in dict(FSDP, **cfg, output_dir=str(out)).items()]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "easyvideor1.train", *args]
    try: r = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=600)
    except subprocess.TimeoutExpired as e: pytest.fail(f"2-process run hung: {str(e.stderr)[-3000:]}")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    d0, d1 = (out / "params_rank0.sha256").read_text(), (out / "params_rank1.sha256").read_text()
    assert d0 == d1
    return read_jsonl(out / "metrics.jsonl")


def one_process_lrs(**cfg) -> list[float]:
    "The learning rate a 1-process run logs at each step: its LambdaLR stepped once a step."
    c = load_config(overrides=dict(FSDP, **cfg))
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=c.lr)
    sch = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(c))
    out = []
    for _ in range(c.sft_steps + c.max_steps): opt.step(); sch.step(); out.append(sch.get_last_lr()[0])
    return out


SHARED = dict(parallel="fsdp2", shared_prefix=True, beta=0.05, kl_kind="k3", max_steps=2)


@pytest.fixture(scope="module")
def shared_run(suite):
    out = suite.parent.parent / "shared"
    return out, launch(suite, out, **SHARED)


def test_fsdp2_shared_prefix_with_reference(shared_run):
    "Warm start + 2 GRPO steps with a KL reference: the GRPO steps are logged with their KL, lr as one process, best and reference kept."
    out, metrics = shared_run
    assert [(m["step"], m["phase"]) for m in metrics] == [(0, "sft"), (1, "grpo"), (2, "grpo")]
    assert [m["lr"] for m in metrics] == pytest.approx(one_process_lrs(**SHARED), rel=1e-12)
    assert all("kl" in m for m in metrics if m["phase"] == "grpo" and not m["no_signal"])
    assert (out / "reference" / "config.json").exists() and (out / "best" / "best.json").exists()
    assert all(torch.isfinite(torch.tensor(m["loss"])) for m in metrics if "loss" in m)


def test_fsdp2_checkpoint_folder_loads_with_automodel(shared_run):
    "The checkpoint's model folder (gathered on rank 0) holds exactly the trained weights: its digest is the ranks' digest."
    from transformers import AutoModelForImageTextToText
    out, _ = shared_run
    ck = out / "checkpoints" / "step_000003"
    assert (ck / "sharded").is_dir() and not (ck / "optimizer.pt").exists()
    m = AutoModelForImageTextToText.from_pretrained(ck / "model", local_files_only=True)
    assert write_param_digest(m, out / "loaded.sha256") + "\n" == (out / "params_rank0.sha256").read_text()


def test_fsdp2_checkpoint_refused_by_ddp(shared_run):
    "A parallel=ddp run cannot resume an FSDP2 checkpoint (no optimizer.pt): the error says which `parallel` wrote it."
    from easyvideor1.models import qwen_vlm
    from easyvideor1.checkpoint import load_checkpoint
    out, _ = shared_run
    m = qwen_vlm("qwen2_5_vl", "tiny")
    opt = torch.optim.AdamW(m.parameters())
    with pytest.raises(ValueError, match="parallel=fsdp2"):
        load_checkpoint(m, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0), out)


def test_fsdp2_resume_is_exact(suite, shared_run):
    "Stopped right after the hand-over (the reference frozen there), resumed from the sharded state: the final weights are the uninterrupted run's."
    full, want = shared_run
    part = suite.parent.parent / "part"
    launch(suite, part, **dict(SHARED, max_steps=1))
    got = launch(suite, part, **dict(SHARED, resume=True))
    assert [m["step"] for m in got] == [0, 1, 2]
    for a, b in zip(want, got):
        for k in ("loss", "reward", "grad_norm", "kl"):
            if k in a: assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-6), (a["step"], k)
    assert (part / "params_rank0.sha256").read_text() == (full / "params_rank0.sha256").read_text()


def test_fsdp2_naive_equals_ddp(suite):
    "shared_prefix=false under FSDP2 and under DDP, same config and seeds: the same losses, gradient norms and final weights."
    naive = dict(shared_prefix=False, max_steps=2)
    a = launch(suite, suite.parent.parent / "naive-fsdp2", parallel="fsdp2", **naive)
    b = launch(suite, suite.parent.parent / "naive-ddp", parallel="ddp", **naive)
    assert [(m["step"], m["phase"]) for m in a] == [(0, "sft"), (1, "grpo"), (2, "grpo")]
    assert [m["lr"] for m in a] == pytest.approx(one_process_lrs(**naive), rel=1e-12)
    for x, y in zip(a, b):
        for k in ("loss", "grad_norm", "reward", "n_tokens"):
            if k in x: assert x[k] == pytest.approx(y[k], rel=1e-4, abs=1e-6), (x["step"], k)
    assert_same_weights(suite.parent.parent / "naive-fsdp2", suite.parent.parent / "naive-ddp", "step_000003")


def assert_same_weights(run_a: Path, run_b: Path, step: str):
    "The checkpoints' model folders of two runs hold the same weights (rel <= 1e-5 per tensor)."
    from transformers import AutoModelForImageTextToText
    load = lambda run: AutoModelForImageTextToText.from_pretrained(run / "checkpoints" / step / "model",
                                                                    local_files_only=True).state_dict()
    wa, wb = load(run_a), load(run_b)
    # a key bias has a zero gradient in exact arithmetic (softmax ignores a shift shared by all keys): AdamW's first step turns
    # its rounding noise into +-lr, so it differs between any two reduction orders; every other tensor agrees
    rel = {k: float((wa[k] - wb[k]).norm() / wb[k].norm().clamp(min=1e-12)) for k in wb if not k.endswith("k_proj.bias")}
    assert max(rel.values()) <= 1e-5, max(rel.items(), key=lambda kv: kv[1])


# the warm start's format-only samples (colour: no offline trajectory) from its first step, with option smoothing: their
# letter's target trains only the output layer's rows of the letters (`prior_logits`), which reads lm_head.weight directly
PRIOR = dict(synthetic_tasks="color,direction", sft_steps=2, max_steps=0, sft_answer_steps=0, sft_option_smoothing=0.1,
             sft_format_prior="rows", sft_format_sources="synthetic/color")


def test_fsdp2_format_prior_warm_start_equals_ddp(tmp_path_factory):
    "The warm start with format-only samples and smoothing under FSDP2 and under DDP: the same NLL, gradient norms and weights."
    root = tmp_path_factory.mktemp("fsdp-prior")
    prepare_data(load_config(overrides=dict(FSDP, **PRIOR, output_dir=str(root / "seed"))), True, lambda: None)
    a = launch(root / "seed" / "suite", root / "prior-fsdp2", parallel="fsdp2", **PRIOR)
    b = launch(root / "seed" / "suite", root / "prior-ddp", parallel="ddp", **PRIOR)
    assert [(m["step"], m["phase"]) for m in a] == [(0, "sft"), (1, "sft")]
    assert all(m["format_only"] > 0 and not m["answer_only"] for m in a), a  # the path under test ran
    for x, y in zip(a, b):
        for k in ("loss", "grad_norm", "nll", "n_tokens", "format_only"):
            assert x[k] == pytest.approx(y[k], rel=1e-4, abs=1e-6), (x["step"], k)
    assert_same_weights(root / "prior-fsdp2", root / "prior-ddp", "step_000002")


def test_parallel_must_be_ddp_or_fsdp2(tmp_path):
    with pytest.raises(ValueError, match="parallel='zero3'"):
        train(load_config(overrides=dict(parallel="zero3", output_dir=str(tmp_path))))
    assert TrainConfig().parallel == "ddp"


@pytest.mark.parametrize("mp", [{}, dict(fsdp_param_dtype="bfloat16")], ids=["fp32", "bf16-compute"])
def test_fsdp2_on_one_process(suite, tmp_path, mp):
    "parallel=fsdp2 without a launcher: FSDP2 over a one-rank group of the trainer's own (gone afterwards), with gradient checkpointing."
    import torch.distributed as dist
    from safetensors import safe_open
    out = tmp_path / "one"
    out.mkdir()
    os.symlink(suite, out / "suite")
    train(load_config(overrides=dict(FSDP, **mp, parallel="fsdp2", gradient_checkpointing=True, max_steps=1, output_dir=str(out))))
    assert [m["phase"] for m in read_jsonl(out / "metrics.jsonl")] == ["sft", "grpo"]
    assert (out / "checkpoints" / "step_000002" / "sharded").is_dir()
    assert not dist.is_initialized()
    with safe_open(out / "checkpoints" / "step_000002" / "model" / "model.safetensors", "pt") as f:  # bf16 compute: fp32 shards
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"F32"}


@pytest.fixture
def one_rank():
    "A one-rank gloo group in this process, as `launch` makes one for parallel=fsdp2 without a launcher."
    import torch.distributed as dist
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("dtype,fsdp_param_dtype,want", [
    ("bfloat16", "auto", (None, torch.float32)),  # a bf16 run: bf16 compute (the model's own: nothing cast), fp32 reduction
    ("float32", "bfloat16", (torch.bfloat16, torch.float32)),  # fp32 shards and optimizer state, bf16 compute
    ("float32", "auto", (None, torch.float32))])  # nothing cast; an fp32 reduction is the gradients' own
def test_make_policy_shards_in_the_config_dtypes(one_rank, dtype, fsdp_param_dtype, want):
    "make_policy gives every unit the policy of `fsdp_dtypes` (param_dtype None where it is the model's); shards keep the model's dtype."
    from easyvideor1.models import qwen_vlm
    from easyvideor1.parallel import fsdp_modules
    from easyvideor1.step import make_policy
    cfg = load_config(overrides=dict(parallel="fsdp2", dtype=dtype, fsdp_param_dtype=fsdp_param_dtype))
    model = qwen_vlm("qwen2_5_vl", "tiny", seed=0, dtype=getattr(torch, dtype))
    units = fsdp_modules(make_policy(model, cfg, None, None, torch.device("cpu"), 1))
    assert len(units) == 4  # a vision block, 2 decoder layers, the root
    mps = {(u._get_fsdp_state()._mp_policy.param_dtype, u._get_fsdp_state()._mp_policy.reduce_dtype) for u in units}
    assert mps == {want}
    assert {p.dtype for p in model.parameters()} == {getattr(torch, dtype)}
