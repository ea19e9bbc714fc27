"""Device-correct by construction, checked on the CPU: what a GPU would catch, caught here.

CI has no GPU, so a tensor the package makes on the CPU by default (`torch.zeros(n)` beside the model's CUDA tensors)
would pass every CPU test and crash on the first GPU, as the default trainer and `shared_prefix=false` once did. Two
checks close that gap: no factory call in the package or the benches leaves its device unnamed (read from the source),
and every config path runs under `tests/device_guard.py`, which sends device-less factories to `meta`, where meeting
the model's tensors fails as on a GPU. The paths are those `bench/gpu_check.py` runs on a lent GPU: its `--cpu` run
here is both the guarded run and the proof that the GPU script does not rot.
"""
import ast, json, os, subprocess, sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from device_guard import FACTORIES, ROOT, meta_guard

sys.path.insert(0, str(ROOT / "bench"))
from gpu_check import PATHS


def _device_less_calls(folder: Path) -> list[str]:
    "Each `torch.<factory>(...)` call in a folder's modules that passes no `device=`."
    out = []
    for p in sorted(folder.glob("*.py")):
        for n in ast.walk(ast.parse(p.read_text())):
            if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
                    and n.func.value.id == "torch" and n.func.attr in FACTORIES
                    and not any(k.arg == "device" for k in n.keywords)):
                out.append(f"{p.relative_to(ROOT)}:{n.lineno} torch.{n.func.attr}")
    return out


def test_every_factory_call_names_its_device():
    "Read from the source: every tensor the package (or a bench) makes from sizes or Python data says where."
    assert _device_less_calls(ROOT / "easyvideor1") == []
    assert _device_less_calls(ROOT / "bench") == []


def test_the_guard_fails_as_a_gpu_would():
    "Under the guard a device-less factory from a watched file makes a meta tensor; meeting a real tensor then fails."
    with meta_guard(watched=(__file__,)) as g:
        x = torch.zeros(3)  # device-less: meta
        y = torch.zeros(3, device="cpu")  # named: untouched
        z = torch.as_tensor(y)  # of a tensor: that tensor
        assert (x.device.type, y.device.type, z is y) == ("meta", "cpu", True)
        with pytest.raises(RuntimeError, match="device"): torch.cat([y, x])
        with pytest.raises(NotImplementedError, match="meta"): x.tolist()
    assert torch.zeros(1).device.type == "cpu"  # uninstalled on exit
    assert len(g.sites) == 1 and next(iter(g.sites)).endswith("torch.zeros")


def test_gpu_check_passes_on_the_cpu_under_the_guard(tmp_path):
    """`bench/gpu_check.sh --cpu`, every process under the guard: the default recipe and its resume, every config path
    (warm start, GRPO with and without the shared prefix, LoRA, the feature cache, FSDP2, ...), the evaluator, the
    benches the GPU run times, FSDP2 with bf16 parameters. No device-less factory may be met, and every row passes."""
    sites = tmp_path / "sites.txt"
    sites.touch()
    env = dict(os.environ, PYTHON=sys.executable, EASYVIDEOR1_META_GUARD=str(sites), OMP_NUM_THREADS="2",
               PYTHONPATH=os.pathsep.join([str(ROOT / "tests" / "guard_site"), str(ROOT)]))
    r = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), "--cpu", "--out", str(tmp_path / "out"),
                        "--suites", str(tmp_path / "suites"), "--work", str(tmp_path / "work")],
                       capture_output=True, text=True, env=env, timeout=1800)
    rows = json.loads((tmp_path / "out" / "gpu_check.json").read_text())["rows"]
    failed = [f"{x['step']} {x['what']}: {x['numbers']}" for x in rows if not x["ok"]]
    assert sites.read_text() == "", f"device-less factories met:\n{sites.read_text()}"
    assert r.returncode == 0 and not failed, "\n".join(failed) + "\n" + r.stdout[-3000:] + r.stderr[-3000:]
    assert {x["step"] for x in rows} == set("abcdef")
    assert {f"path {p}" for p in PATHS} <= {x["what"] for x in rows}
    # what each path must have logged (the variants' checks, once in tests/test_train.py)
    log = lambda name: [json.loads(l) for l in (tmp_path / "work" / f"b_{name}" / "metrics.jsonl").read_text().splitlines()]
    grpo = lambda name: [m for m in log(name) if m["phase"] == "grpo"]
    assert all(m["groups_drawn"] >= m["groups"] and "extra_draws" in m for m in grpo("default"))  # dynamic sampling
    assert (tmp_path / "work" / "b_default" / "reference" / "config.json").exists()  # frozen at the hand-over (beta > 0)
    assert all("kl" in m for m in grpo("default") if not m["no_signal"])
    assert all("masked_truncated" in m for m in grpo("answer_first_naive") if not m["no_signal"])
    assert [m["phase"] for m in log("answer_first_naive")] == ["sft", "sft", "grpo"]
