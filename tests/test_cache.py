"FrameCache: bitwise equality with decoding, stale/damaged entries, concurrent writers, digest memo."
import json, multiprocessing as mp, os, time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import pytest
import torch

from easyvideor1.cache import FrameCache, CacheContractError, CacheEntryError, DigestMemo
from easyvideor1.synthetic import write_video, write_image
from easyvideor1.video import VideoContract, ImageContract, load_video, load_image


def clip(path, T=40, H=72, W=96, fps=10, seed=0):
    "A noisy clip with a moving bar."
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 255, (T, H, W, 3), dtype=np.uint8)
    for t in range(T): x[t, :, (3 * t) % W:(3 * t) % W + 6] = 255
    return write_video(path, x, fps)


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    d = tmp_path_factory.mktemp("media")
    vids = [clip(d / f"v{i}.mp4", T=T, H=H, W=W, fps=fps, seed=i)
            for i, (T, H, W, fps) in enumerate([(40, 72, 96, 10), (75, 48, 128, 25), (30, 100, 60, 30)])]
    img = write_image(d / "i.png", np.random.default_rng(9).integers(0, 255, (90, 130, 3), dtype=np.uint8))
    return vids, img


CONTRACTS = [VideoContract(), VideoContract.for_family("qwen3_vl"), VideoContract(nframes=6, min_pixels=8 * 28**2),
             VideoContract(fps=1.0, min_pixels=8 * 28**2, max_pixels=40 * 28**2, backend="pyav"), VideoContract(fps=4.0, total_pixels=3000 * 32**2, factor=32)]


def test_cache_equals_decode(tmp_path, media):
    vids, img = media
    cache = FrameCache(tmp_path / "c")
    for c in CONTRACTS:
        for v in vids:
            for win in [(None, None), (0.5, 2.5)]:
                ref = load_video(v, c, *win)
                miss = cache.get(v, c, *win)
                hit = cache.get(v, c, *win)
                mm = cache.get(v, c, *win, mmap=True)
                for f, m in (miss, hit, mm):
                    assert f.dtype == torch.uint8 and torch.equal(f, ref[0]) and m == ref[1]
    n = len(CONTRACTS) * len(vids) * 2
    assert (cache.stats.misses, cache.stats.hits) == (n, 2 * n)
    ic = ImageContract(min_pixels=4 * 28**2, max_pixels=64 * 28**2)
    assert torch.equal(cache.get(img, ic)[0], load_image(img, ic)) and torch.equal(cache.get(img, ic)[0], load_image(img, ic))
    assert cache.get(img, ic)[1] is None


def test_stale_contract_and_damaged_entries(tmp_path, media):
    v = media[0][0]
    cache, c = FrameCache(tmp_path / "c"), VideoContract()
    cache.get(v, c)
    npy, js = cache.paths(cache.key(v, c))
    info = json.loads(js.read_text())
    info["contract"]["fps"] = 1.0
    js.write_text(json.dumps(info))
    with pytest.raises(CacheContractError, match="fps"): cache.get(v, c)
    info["contract"] = c.to_dict()
    js.write_text(json.dumps(info))
    npy.write_bytes(npy.read_bytes()[:1000])  # truncated array
    with pytest.raises(CacheEntryError, match=npy.name): cache.get(v, c)
    npy.unlink()
    with pytest.raises(CacheEntryError, match=npy.name): cache.get(v, c)


def test_orphan_array_is_a_miss(tmp_path, media):
    v = media[0][1]
    cache, c = FrameCache(tmp_path / "c"), VideoContract()
    npy, js = cache.paths(cache.key(v, c))
    npy.parent.mkdir(parents=True)
    npy.write_bytes(b"garbage from a writer killed between the two renames")
    f, m = cache.get(v, c)
    assert cache.stats.misses == 1 and torch.equal(f, load_video(v, c)[0])
    assert torch.equal(FrameCache(tmp_path / "c").get(v, c)[0], f)


def test_content_key(tmp_path, media):
    v = media[0][0]
    cache, c = FrameCache(tmp_path / "c"), VideoContract()
    cache.get(v, c)
    copy = tmp_path / "renamed.mp4"
    copy.write_bytes(Path(v).read_bytes())
    cache.get(copy, c)
    assert (cache.stats.hits, cache.stats.misses) == (1, 1)  # same content, other name: a hit
    copy.write_bytes(Path(media[0][1]).read_bytes())  # same name, other content
    os.utime(copy, ns=(time.time_ns(), time.time_ns() + 10**9))
    f, _ = cache.get(copy, c)
    assert torch.equal(f, load_video(media[0][1], c)[0])


def test_digest_memo_persists(tmp_path, media):
    v = media[0][2]
    m1 = DigestMemo(tmp_path / "memo")
    d = m1(v)
    m2 = DigestMemo(tmp_path / "memo")
    assert m2(v) == d and m2.hashed == 0
    os.utime(v, ns=(time.time_ns(), time.time_ns()))  # touched: re-hashed, same digest
    assert m2(v) == d and m2.hashed == 1


def _writer(root, path, barrier):
    barrier.wait()
    for _ in range(3): FrameCache(root).ensure(path, VideoContract())


def test_concurrent_writers(tmp_path, media):
    "Several processes storing the same entries at once leave complete, identical entries."
    v = media[0][1]
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(3)
    ps = [ctx.Process(target=_writer, args=(tmp_path / "c", v, barrier)) for _ in range(3)]
    for p in ps: p.start()
    for p in ps: p.join(120)
    assert all(p.exitcode == 0 for p in ps)
    cache = FrameCache(tmp_path / "c")
    f, m = cache.get(v, VideoContract())
    assert cache.stats.hits == 1 and torch.equal(f, load_video(v, VideoContract())[0])
    assert not list((tmp_path / "c").rglob(".tmp.*"))  # every temporary file was renamed
