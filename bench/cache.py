"""Frame cache versus on-the-fly decoding, measured side by side in one run.

1. per video: decode + sample + resize (`load_video`, decord, via a cache miss) versus a cache hit, at
   64 frames / 448x448 px and 128 frames / 262,144 px per frame;
2. per training step of the tiny Qwen2.5-VL (batch of 4 videos: media -> processor -> forward -> backward),
   media decoded on the fly versus read from the cache;
3. cache bytes per frame versus the original's float32 tensors.

The clips look like real footage: a textured scene (smooth blobs plus fine texture) under a slowly panning
camera, film grain, three moving objects; 24 fps, H.264 (x264 ultrafast, crf 26, a keyframe every 2 s).
Encoding 30-120 s of 720p on this 2-core machine would take minutes, so one 10 s segment per resolution is
encoded and the long clips are made by re-muxing it (packet copy with shifted timestamps): the decoder still
decodes every frame of a 120 s file, but generation costs ~10 s. Clips: 480p 30 s, 480p 120 s, 720p 30 s,
720p 60 s (the step's batch is these 4). Each decode is timed once (they take seconds), each cache hit is
the median of 3. After a warm-up step (blank frames), the on-the-fly step is timed once: its media are cache
misses, and only their decode + sample + resize time is counted (exactly `load_video`; the store that
follows is not), which also fills the cache for the three cached steps whose median is reported.
Total: about 1.5 minutes on 2 idle cores, up to 5 when the machine is shared.

    python bench/cache.py [--workdir DIR]
"""
import argparse, os, statistics, sys, tempfile, time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import av
import numpy as np
import torch
import torch.nn.functional as F

from easyvideor1.cache import FrameCache
from easyvideor1.video import VideoContract, VideoMetadata, smart_resize

FPS, GOP, SEGMENT_S = 24, 48, 10
CLIPS = [("480p", 480, 854, 30), ("480p", 480, 854, 120), ("720p", 720, 1280, 30), ("720p", 720, 1280, 60)]
CONTRACTS = {"64 fr / 448x448": VideoContract(nframes=64, max_pixels=448 * 448),
             "128 fr / 262,144 px": VideoContract(nframes=128, max_pixels=262144)}
STEP_CONTRACT = VideoContract(nframes=32, min_pixels=64 * 28**2, max_pixels=224 * 224)  # what the tiny model trains on


def footage_segment(path, H, W, secs=SEGMENT_S, seed=0):
    "Encode `secs` of synthetic footage: textured scene, panning camera, grain, moving objects."
    rng = np.random.default_rng(seed)
    SH, SW = H + 64, W + secs * 8 + 64
    low = torch.from_numpy(rng.uniform(30, 220, (1, 3, SH // 32 + 2, SW // 32 + 2)).astype(np.float32))
    scene = F.interpolate(low, size=(SH, SW), mode="bicubic", align_corners=False)[0].permute(1, 2, 0).numpy()
    scene = np.clip(scene + rng.normal(0, 12, (SH, SW, 1)), 0, 255).astype(np.int16)  # (SH, SW, 3)
    grain = [rng.integers(-4, 5, (H, W, 1), dtype=np.int16) for _ in range(6)]
    objs = [(rng.uniform(0, W), rng.uniform(0, H), rng.uniform(-3, 3), rng.uniform(-2, 2), rng.integers(0, 255, 3),
             int(rng.integers(20, 80))) for _ in range(3)]
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=FPS)
        s.width, s.height, s.pix_fmt = W, H, "yuv420p"
        s.options = {"preset": "ultrafast", "crf": "26", "g": str(GOP)}
        for t in range(secs * FPS):
            x0, y0 = t * 8 // FPS, int(16 + 12 * np.sin(t / FPS))
            fr = scene[y0:y0 + H, x0:x0 + W] + grain[t % len(grain)]  # (H, W, 3)
            for ox, oy, vx, vy, col, sz in objs:
                cx, cy = int(ox + vx * t) % W, int(oy + vy * t) % H
                fr[cy:cy + sz, cx:cx + sz] = col
            for p in s.encode(av.VideoFrame.from_ndarray(np.clip(fr, 0, 255).astype(np.uint8), format="rgb24")): c.mux(p)
        for p in s.encode(): c.mux(p)
    return Path(path)


def loop_remux(src, dst, secs):
    "A `secs`-long file made of copies of `src` (whole GOPs, timestamps shifted): no re-encoding."
    with av.open(str(src)) as i, av.open(str(dst), "w") as o:
        ist = i.streams.video[0]
        ost = o.add_stream_from_template(ist)
        packets = [p for p in i.demux(ist) if p.size]
        seg = round(SEGMENT_S / ist.time_base)  # segment length in stream time units
        for k in range(secs // SEGMENT_S):
            for p in packets:
                q = av.Packet(bytes(p))
                q.pts, q.dts, q.is_keyframe = p.pts + k * seg, p.dts + k * seg, p.is_keyframe
                q.duration, q.time_base, q.stream = p.duration, p.time_base, ost
                o.mux(q)
    return Path(dst)


def make_clips(d):
    d.mkdir(parents=True, exist_ok=True)
    segs, out = {}, []
    for name, H, W, secs in CLIPS:
        if name not in segs: segs[name] = footage_segment(d / f"seg_{name}.mp4", H, W, seed=H)
        out.append((f"{name} {secs} s", loop_remux(segs[name], d / f"{name}_{secs}s.mp4", secs)))
    return out


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def per_video(clips, cache):
    rows = []
    for cname, c in CONTRACTS.items():
        for name, path in clips:
            d0 = cache.stats.decode_s
            frames, _ = cache.get(path, c)  # a miss: decode + sample + resize (timed inside), then store
            dec = cache.stats.decode_s - d0
            loads = []
            for _ in range(3):
                (f2, _), t = timed(lambda: cache.get(path, c))
                loads.append(t)
            assert torch.equal(f2, frames), f"cache hit differs from the decoded frames for {path}"
            load = statistics.median(loads)
            T, C, H, W = frames.shape
            rows.append([cname, name, f"{T}x{H}x{W}", f"{dec:.2f}", f"{1000 * load:.0f}", f"{dec / load:.0f}x",
                         f"{frames.numel() / 2**20:.0f}", f"{4 * frames.numel() / 2**20:.0f}"])
    return rows


def step_bench(clips, cache):
    "Step times with media decoded on the fly and read from the cache."
    from easyvideor1.models import qwen_vlm, qwen_processor, video_message
    model = qwen_vlm("qwen2_5_vl", "tiny", seed=0).train()
    proc = qwen_processor("qwen2_5_vl", video_min_pixels=STEP_CONTRACT.min_pixels, video_max_pixels=STEP_CONTRACT.max_pixels)
    proc.tokenizer.padding_side = "left"
    answer = "<answer>B</answer><|im_end|>"
    prompt = proc.apply_chat_template(video_message("Which way does the camera pan? A. left B. right"),
                                      tokenize=False, add_generation_prompt=True) + answer
    target = proc.tokenizer(answer, return_tensors="pt").input_ids  # (1, K)
    paths = [p for _, p in clips]

    def step(media):
        t0 = time.perf_counter()
        frames, metas, media_s = media()
        t1 = time.perf_counter()
        x = proc(text=[prompt] * len(paths), videos=list(frames), video_metadata=[m.to_hf() for m in metas],
                 do_sample_frames=False, do_resize=False, padding=True, return_tensors="pt")
        t2 = time.perf_counter()
        K = target.shape[1]
        logits = model(**x, logits_to_keep=K + 1).logits[:, :-1]  # (B, K, V): predictions of the answer tokens
        loss = F.cross_entropy(logits.flatten(0, 1), target.expand(len(paths), -1).flatten())
        model.zero_grad(set_to_none=True)
        loss.backward()
        t3 = time.perf_counter()
        return (t1 - t0 if media_s is None else media_s), t2 - t1, t3 - t2

    def from_cache():
        frames, metas = zip(*[cache.get(p, STEP_CONTRACT) for p in paths])
        return frames, metas, None

    def on_the_fly():
        # cache misses: decode + sample + resize exactly as load_video, timed alone (the store after it is not counted)
        d0 = cache.stats.decode_s
        frames, metas = zip(*[cache.get(p, STEP_CONTRACT) for p in paths])
        return frames, metas, cache.stats.decode_s - d0

    h, w = smart_resize(720, 1280, STEP_CONTRACT.factor, STEP_CONTRACT.min_pixels, STEP_CONTRACT.max_pixels)
    fake = VideoMetadata(fps=24.0, frames_indices=list(range(32)), total_num_frames=720, duration=30.0, width=1280,
                         height=720, backend="decord")
    step(lambda: ([torch.zeros(32, 3, h, w, dtype=torch.uint8, device="cpu")] * len(paths), [fake] * len(paths), None))  # warm-up
    res = {"on-the-fly decode": step(on_the_fly)}
    runs = [step(from_cache) for _ in range(3)]
    res["frame cache"] = [statistics.median(r[i] for r in runs) for i in range(3)]
    return res


def table(header, rows):
    w = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "  ".join(str(v).rjust(w[i]) if i > 1 else str(v).ljust(w[i]) for i, v in enumerate(r))
    return "\n".join([line(header), line(["-" * x for x in w])] + [line(r) for r in rows])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", help="keep clips and cache here (default: a temporary folder)")
    a = ap.parse_args()
    torch.manual_seed(0)
    work = Path(a.workdir or tempfile.mkdtemp(prefix="bench_cache_"))
    t_all = time.perf_counter()
    clips, t_gen = timed(lambda: make_clips(work / "clips"))
    print(f"generated {len(clips)} clips in {t_gen:.1f} s: " + ", ".join(
        f"{n} ({os.path.getsize(p) / 2**20:.1f} MiB)" for n, p in clips))
    cache = FrameCache(work / "cache")

    rows = per_video(clips, cache)
    print("\nper video: decode + sample + resize (decord) vs frame-cache hit (np.load of the uint8 entry)")
    print(table(["contract", "clip", "T x H x W", "decode s", "cache ms", "speedup", "uint8 MiB", "float32 MiB"], rows))

    res = step_bench(clips, cache)
    print(f"\nper training step: tiny Qwen2.5-VL, batch of 4 videos ({STEP_CONTRACT.nframes} frames, <= 224x224 px), "
          "median step")
    srows = [[k, "", f"{m:.2f}", f"{p:.2f}", f"{fb:.2f}", f"{m + p + fb:.2f}"] for k, (m, p, fb) in res.items()]
    print(table(["media from", "", "media s", "processor s", "fwd+bwd s", "step s"], srows))

    T, C, H, W = 128, 3, 364, 672
    print(f"\ncache bytes per frame at 262,144 px ({W}x{H}): uint8 {C * H * W / 1024:.0f} KiB vs float32 "
          f"{4 * C * H * W / 1024:.0f} KiB (4.00x smaller; a 128-frame entry {T * C * H * W / 2**20:.0f} MiB vs "
          f"{4 * T * C * H * W / 2**20:.0f} MiB)")
    fly, cached = (sum(res[k][:3]) for k in ["on-the-fly decode", "frame cache"])
    print(f"total bench time {time.perf_counter() - t_all:.0f} s")
    print(f"step speedup: {fly / cached:.2f}x")


if __name__ == "__main__":
    main()
