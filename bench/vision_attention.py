"""The vision tower's forward + backward with transformers' per-window attention vs one call per run of equal windows.

transformers' SDPA path runs one attention call per window (Qwen2.5-VL: 112-pixel squares; Qwen3-VL: frames);
`models.batched_vision_attention` makes one call per run of equal windows (`models.use_batched_vision_attention`,
which `qwen_vlm` applies). Both sides run in one process on the same tower and pixels, alternating, `--repeats`
rounds (the fastest of each side shown). Prints the attention calls a forward makes, seconds per forward + backward,
the largest output difference and, last, `vision speedup: N.NNx`.

    python bench/vision_attention.py                                  # CPU: the small shape, 8 frames of 448 x 448
    python bench/vision_attention.py --size 3b --frames 64 --res 448 --dtype bfloat16 --device cuda   # the H200
"""
import argparse, sys, time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from easyvideor1.models import qwen_vlm, use_batched_vision_attention


def set_side(model, batched: bool):
    "Give the tower's attention the batched forward, or transformers' own."
    for m in model.modules():
        if type(m).__name__.startswith("Batched"): m.__class__ = type(m).__mro__[1]
    if batched: use_batched_vision_attention(model)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="qwen2_5_vl"); ap.add_argument("--size", default="small")
    ap.add_argument("--frames", type=int, default=8); ap.add_argument("--res", type=int, default=448)
    ap.add_argument("--dtype", default="float32"); ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    dev, dtype = torch.device(a.device), getattr(torch, a.dtype)
    model = qwen_vlm(a.family, a.size, dtype=dtype, device=dev)
    vis = model.model.visual
    vc = vis.config
    t, h = a.frames // vc.temporal_patch_size, a.res // vc.patch_size
    pix = torch.randn(t * h * h, vc.in_channels * vc.temporal_patch_size * vc.patch_size ** 2,
                      generator=torch.Generator(device="cpu").manual_seed(0), device="cpu").to(dev, dtype)
    grid = torch.tensor([[t, h, h]], device=dev)
    calls = {}
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def counted(*args, **kw):
        calls["n"] = calls.get("n", 0) + 1
        return sdpa(*args, **kw)

    def step():
        vis.zero_grad(set_to_none=True)
        o = vis(pix, grid_thw=grid).pooler_output
        o.float().square().mean().backward()
        return o.detach()

    def timed():
        if dev.type == "cuda": torch.cuda.synchronize()
        t0 = time.perf_counter()
        o = step()
        if dev.type == "cuda": torch.cuda.synchronize()
        return o, time.perf_counter() - t0

    best, outs, n_calls = {}, {}, {}
    for side in ("per window", "batched"):  # warm-up, and the calls a forward makes
        set_side(model, side == "batched")
        calls.clear()
        torch.nn.functional.scaled_dot_product_attention = counted
        try:
            with torch.no_grad(): vis(pix, grid_thw=grid)
        finally: torch.nn.functional.scaled_dot_product_attention = sdpa
        n_calls[side] = calls.get("n", 0)
        step()
    for _ in range(a.repeats):
        for side in ("per window", "batched"):
            set_side(model, side == "batched")
            outs[side], s = timed()
            best[side] = min(best.get(side, float("inf")), s)
    diff = float((outs["per window"].float() - outs["batched"].float()).abs().max())
    print(f"{a.family}:{a.size} vision tower, {a.dtype} on {a.device}: {a.frames} frames of {a.res} x {a.res} "
          f"({t * h * h} patches), forward + backward, fastest of {a.repeats}")
    print("| attention | calls a forward | seconds |\n|---|---|---|")
    for side in best: print(f"| {side} | {n_calls[side]} | {best[side]:.3f} |")
    print(f"max |output difference|: {diff:.2e}")
    print(f"vision speedup: {best['per window'] / best['batched']:.2f}x")


if __name__ == "__main__":
    main()
