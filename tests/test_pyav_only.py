"""A machine without decord: the package imports, "auto" picks PyAV, the tiny trainer runs and records PyAV."""
import json, os, subprocess, sys
from dataclasses import replace
from pathlib import Path

import av
import numpy as np
import pytest

from easyvideor1 import video as V
from easyvideor1.config import TrainConfig, contracts, load_config
from easyvideor1.synthetic import read_jsonl
from easyvideor1.validate import InvalidRow, probe_media

ROOT = Path(__file__).resolve().parents[1]
# what `import decord` does where it has no wheel: ImportError (None in sys.modules makes every import raise)
NO_DECORD = "import sys; sys.modules['decord'] = None; "
TINY = dict(model="qwen2_5_vl:tiny", synthetic_n=4, synthetic_test_n=2, synthetic_val_n=1, prompts_per_step=2,
            group_size=2, sft_steps=1, sft_batch_size=2, max_new_tokens=8, eval_every=0, eval_n=2,
            tensorboard="false", dynamic_sampling="false", beta=0.0, max_steps=2)


def _env():
    return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1",
                PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


@pytest.fixture
def no_decord(monkeypatch):
    monkeypatch.setitem(sys.modules, "decord", None)


def test_auto_is_decord_where_it_imports():
    pytest.importorskip("decord")
    assert V.video_backend() == "decord" and V.VideoContract().backend == "decord"
    # "auto" is stored as the decoder it picked: the hashes of default runs made before "auto" existed hold
    assert V.VideoContract().hash == V.VideoContract(backend="decord").hash
    assert V.VideoContract.for_family("qwen2_5_vl").hash.startswith("9a88f843ad35")  # 02_video's stored output
    assert contracts(TrainConfig(), "qwen2_5_vl")[0].hash.startswith("45abfdcd8bc9")  # 09e_config's


def test_auto_is_pyav_without_decord(no_decord):
    assert V.video_backend() == "pyav"
    vc, _ = contracts(load_config(overrides={}), "qwen2_5_vl")
    assert vc.backend == "pyav" and vc.to_dict()["backend"] == "pyav"
    assert V.VideoContract.for_family("qwen3_vl", backend="auto").backend == "pyav"


def test_a_missing_backend_by_name_fails_with_how_to_install_it(no_decord):
    with pytest.raises(ImportError, match=r"'decord' is not installed: `pip install decord`"):
        V.VideoContract(backend="decord")
    with pytest.raises(ValueError, match=r"config: video_backend='decord': .*pip install decord"):
        load_config(overrides={"video_backend": "decord"})
    with pytest.raises(ValueError, match=r"video_backend='opencv' is out of range"):
        load_config(overrides={"video_backend": "opencv"})


def test_no_decoder_at_all_fails_naming_both(monkeypatch):
    monkeypatch.setitem(sys.modules, "decord", None)
    monkeypatch.setitem(sys.modules, "av", None)
    with pytest.raises(ImportError, match=r"pip install decord.*pip install av"): V.video_backend()


def test_the_pyav_probe_finds_a_cut_file(tmp_path, no_decord):
    "Without decord the probe counts packets against the header: a faststart file cut in half is refused."
    path = tmp_path / "fs.mp4"
    frames = np.random.default_rng(0).integers(0, 256, (20, 32, 32, 3), dtype=np.uint8)
    with av.open(str(path), "w", options={"movflags": "faststart"}) as c:  # the index first: it outlives the cut
        s = c.add_stream("libx264", rate=10)
        s.width, s.height, s.pix_fmt = 32, 32, "yuv420p"
        for f in frames: c.mux(s.encode(av.VideoFrame.from_ndarray(f, format="rgb24")))
        c.mux(s.encode())
    probe_media(path, "video")
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(InvalidRow, match=r"cut.mp4 is truncated: 20 frames announced"): probe_media(cut, "video")
    with pytest.raises(InvalidRow, match="pixels a frame"): probe_media(path, "video", max_pixels=32 * 31)


def test_the_package_imports_without_media_libraries():
    "No module imports decord or PyAV at import time: they load in the functions that decode or write."
    code = ("import sys; sys.modules['decord'] = sys.modules['av'] = None; import importlib, pkgutil, easyvideor1; "
            "[importlib.import_module('easyvideor1.' + m.name) for m in pkgutil.iter_modules(easyvideor1.__path__)]")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def test_tiny_trainer_runs_with_pyav_only(tmp_path):
    "The default recipe, shrunk, in a process where `import decord` fails: it trains and records PyAV."
    out = tmp_path / "run"
    code = NO_DECORD + "import runpy; runpy.run_module('easyvideor1.train', run_name='__main__', alter_sys=True)"
    args = [f"{k}={v}" for k, v in dict(TINY, output_dir=str(out)).items()]
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=_env(), cwd=tmp_path,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == [0, 1, 2]  # the warm start's step, GRPO's 2
    state = json.loads(sorted((out / "checkpoints").glob("step_*"))[-1].joinpath("trainer_state.json").read_text())
    assert state["step"] == 3 and state["video_contract"]["backend"] == "pyav"
    vc, _ = contracts(load_config(overrides=TINY), "qwen2_5_vl")  # the same settings, decoder "auto" here
    assert state["contract_hash"] == replace(vc, backend="pyav").hash  # the hash the checkpoints and cache key on
    entries = [json.loads(p.read_text()) for p in (out / "cache" / "entries").rglob("*.json")]
    videos = [e for e in entries if e["contract"]["kind"] == "video"]
    assert videos and all(e["contract"]["backend"] == "pyav" and "decord" not in e["versions"] for e in videos)
