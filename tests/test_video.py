"Oracle tests of easyvideor1.video against qwen-vl-utils 0.0.14 (sampling, resizing, the full fetch_video path)."
import os, random, time
from fractions import Fraction

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["FORCE_QWENVL_VIDEO_READER"] = "decord"  # read at import: the oracle must decode like us

import av
import numpy as np
import pytest
import torch
from PIL import Image

import qwen_vl_utils.vision_process as qv
from easyvideor1 import video as V

# (height, width, fps, frames): small clips of varied shapes, rates (incl. NTSC 29.97) and lengths
CLIPS = [(48, 64, 25, 100), (64, 36, 30, 90), (50, 50, 10, 35), (36, 120, 24, 200),
         (72, 40, Fraction(30000, 1001), 150), (40, 56, 5, 12)]


def write_clip(path, H, W, fps, T, seed=0):
    "A small noisy mp4 with a moving bar."
    rng = np.random.default_rng(seed)
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=fps)
        s.width, s.height, s.pix_fmt = W, H, "yuv420p"
        for t in range(T):
            img = rng.integers(0, 255, (H, W, 3), dtype=np.uint8)
            img[:, (t * 2) % W:(t * 2) % W + 4] = 255
            for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")): c.mux(p)
        for p in s.encode(): c.mux(p)
    return str(path)


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("clips")
    return [write_clip(d / f"c{i}.mp4", *spec, seed=i) for i, spec in enumerate(CLIPS)]


def outcome(fn):
    "('ok', value) or ('err', None): the oracle and ours must agree on which inputs fail."
    try: return "ok", fn()
    except Exception: return "err", None  # any failure type; only agreement on failing is checked


def test_smart_resize_oracle():
    rng = random.Random(0)
    n = 0
    for factor in (28, 32):
        for _ in range(3000):
            h, w = rng.randint(1, 4000), rng.randint(1, 4000)
            mn = rng.choice([None, 4 * factor**2, 128 * factor**2, rng.randint(1, 2_000_000)])
            mx = rng.choice([None, 262144, 768 * factor**2, rng.randint(1, 4_000_000)])
            a = outcome(lambda: V.smart_resize(h, w, factor, mn, mx))
            b = outcome(lambda: qv.smart_resize(h, w, factor, mn, mx))
            assert a == b, (h, w, factor, mn, mx, a, b)
            n += a[0] == "ok"
    assert n > 4000  # most settings are valid ones


def test_smart_nframes_oracle():
    rng = random.Random(1)
    for _ in range(5000):
        total, vfps = rng.randint(1, 20000), rng.choice([5, 10, 23.976, 24, 25, 29.97, 30, 60, 120])
        ele = {}
        if rng.random() < 0.3: ele["nframes"] = rng.randint(1, 300)
        else:
            if rng.random() < 0.8: ele["fps"] = rng.choice([0.25, 0.5, 1, 2, 3.3, 4, 8])
            if rng.random() < 0.5: ele["min_frames"] = rng.randint(1, 16)
            if rng.random() < 0.5: ele["max_frames"] = rng.randint(2, 1000)
        a = outcome(lambda: V.smart_nframes(total, vfps, **ele))
        b = outcome(lambda: qv.smart_nframes(ele, total, vfps))
        assert a == b, (total, vfps, ele, a, b)


def random_setting(rng, factor):
    "One fetch_video setting: fps or nframes, frame bounds, window, pixel budgets."
    s = {}
    if rng.random() < 0.3: s["nframes"] = rng.choice([2, 4, 5, 7, 8, 11, 16])
    else:
        s["fps"] = rng.choice([0.5, 1.0, 2.0, 3.3, 5.0])
        if rng.random() < 0.5: s["min_frames"] = rng.choice([2, 4, 5, 8])
        if rng.random() < 0.5: s["max_frames"] = rng.choice([6, 8, 13, 32])
    win = rng.choice([None, None, (0.5, None), (None, 2.5), (0.3, 2.9), (1.0, 1.2)])
    if win: s["video_start"], s["video_end"] = win
    if rng.random() < 0.7: s["min_pixels"] = rng.choice([4, 16, 64]) * factor**2
    if rng.random() < 0.6: s["max_pixels"] = rng.choice([8, 40, 200]) * factor**2
    if rng.random() < 0.4: s["total_pixels"] = rng.choice([64, 500, 5000]) * factor**2
    return s


@pytest.mark.parametrize("factor", [28, 32])
def test_fetch_video_oracle(clips, factor):
    rng = random.Random(factor)
    n_ok = n_err = 0
    for i in range(300):
        path = rng.choice(clips)
        s = random_setting(rng, factor)
        start, end = s.pop("video_start", None), s.pop("video_end", None)
        ele = {"video": path, **s}
        if start is not None: ele["video_start"] = start
        if end is not None: ele["video_end"] = end
        a = outcome(lambda: V.load_video(path, V.VideoContract(**s, factor=factor), start=start, end=end))
        b = outcome(lambda: qv.fetch_video(ele, image_patch_size=factor // 2, return_video_metadata=True))
        assert a[0] == b[0], (i, ele, a[0], b[0])
        if a[0] == "err":
            n_err += 1
            continue
        (frames, meta), (ref, ref_meta) = a[1], b[1]
        assert frames.dtype == torch.uint8 and ref.dtype == torch.float32
        assert frames.shape == ref.shape, (i, ele)
        assert torch.equal(frames.float(), ref), (i, ele)
        assert meta.frames_indices == list(ref_meta["frames_indices"]), (i, ele)
        assert meta.total_num_frames == ref_meta["total_num_frames"] and meta.fps == ref_meta["fps"], (i, ele)
        n_ok += 1
    print(f"factor {factor}: {n_ok} settings identical to qwen-vl-utils, {n_err} rejected by both")
    assert n_ok >= 200, (n_ok, n_err)  # the grid is mostly valid settings
    assert n_err > 0  # and exercises some failing ones (empty windows, too few frames)


def test_pyav_equals_decord(clips):
    for path in clips:
        for c in [V.VideoContract(fps=2.0, min_pixels=64 * 28**2), V.VideoContract(nframes=4, factor=32)]:
            f1, m1 = V.load_video(path, c)
            f2, m2 = V.load_video(path, V.VideoContract(**{**c.__dict__, "backend": "pyav"}))
            assert torch.equal(f1, f2), path
            assert (m1.frames_indices, m1.total_num_frames, m1.width, m1.height) == \
                   (m2.frames_indices, m2.total_num_frames, m2.width, m2.height)
            assert abs(m1.fps - m2.fps) < 1e-9 and m2.backend == "pyav"


def test_metadata_to_hf(clips):
    from transformers.video_utils import VideoMetadata as HFMeta
    _, meta = V.load_video(clips[0], V.VideoContract())
    hf = HFMeta(**meta.to_hf())  # field names must match transformers'
    assert hf.timestamps == [i / meta.fps for i in meta.frames_indices]
    assert abs(hf.sampled_fps - meta.sample_fps) < 1e-9


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "P"])
def test_load_image_oracle(tmp_path, mode):
    rng = np.random.default_rng(0)
    for i, (h, w) in enumerate([(37, 53), (480, 640), (1000, 90), (20, 20)]):
        arr = rng.integers(0, 256, (h, w, 4), dtype=np.uint8)
        img = Image.fromarray(arr, "RGBA").convert(mode)
        p = tmp_path / f"im{i}.png"
        img.save(p)
        for factor in (28, 32):
            for mn, mx in [(None, None), (4 * factor**2, 200 * factor**2), (256 * factor**2, 1048576)]:
                ours = V.load_image(p, V.ImageContract(min_pixels=mn, max_pixels=mx, factor=factor))
                ele = {"image": str(p)}
                if mn: ele["min_pixels"] = mn
                if mx: ele["max_pixels"] = mx
                ref = torch.from_numpy(np.array(qv.fetch_image(ele, image_patch_size=factor // 2))).permute(2, 0, 1)
                assert torch.equal(ours, ref), (mode, h, w, factor, mn, mx)


def test_decode_timeout(clips, monkeypatch):
    def hang(path, pick): time.sleep(10)
    monkeypatch.setattr(V, "_decode_decord", hang)
    t0 = time.time()
    with pytest.raises(V.VideoDecodeTimeout, match="c0.mp4"):
        V.load_video(clips[0], V.VideoContract(), timeout=0.2)
    assert time.time() - t0 < 5


@pytest.mark.parametrize("backend", ["decord", "pyav"])
def test_bad_files_name_the_file(tmp_path, clips, backend):
    data = open(clips[3], "rb").read()
    (tmp_path / "empty.mp4").write_bytes(b"")
    (tmp_path / "half.mp4").write_bytes(data[: len(data) // 2])
    (tmp_path / "junk.mp4").write_bytes(os.urandom(3000))
    (tmp_path / "text.mp4").write_text("hello")
    for name in ["missing.mp4", "empty.mp4", "half.mp4", "junk.mp4", "text.mp4"]:
        with pytest.raises(V.VideoDecodeError, match=name):
            V.load_video(tmp_path / name, V.VideoContract(backend=backend))


def test_contract_hash_stable():
    c = V.VideoContract.for_family("qwen3_vl")
    assert c.hash == V.VideoContract(fps=2, max_frames=128.0, max_pixels=262144, factor=32).hash
    assert len({V.VideoContract(fps=f).hash for f in (1, 2, 3)}) == 3
    assert V.ImageContract().hash != V.ImageContract(factor=32).hash
    with pytest.raises(ValueError): V.VideoContract(max_frames=7.5)
    with pytest.raises(ValueError): V.VideoContract(backend="opencv")
