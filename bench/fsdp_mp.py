"""FSDP2 mixed precision on one rank: step time and peak memory of the trainer's three dtype settings.

The settings are `TrainConfig`'s (`dtype`, `fsdp_param_dtype`) through `config.fsdp_dtypes`, as `step.make_policy`
shards the model: fp32 (nothing cast), bf16 (a bf16 model: bf16 shards, compute and optimizer state; gradients
reduced in fp32), and fp32 shards under bf16 compute (fp32 shards, gradients and AdamW state; units gathered in
bf16). Each runs `--steps` steps of the shared-prefix update on one synthetic video prompt (`bench/step.py`'s random
ids and pixels) with G completions: `PrefixLogp` forward + backward per micro-batch, then AdamW; step 0 (warm-up)
is left out of the mean. One rank (NCCL on a GPU, gloo on the CPU) makes no collective, so the reduce dtype shows
in no number here: this is the compute and memory side only.

    python bench/fsdp_mp.py                                  # CPU: tiny Qwen2.5-VL, checks that it runs
    python bench/fsdp_mp.py --device cuda --size 3b --frames 64 --res 448 --new-tokens 256 --checkpoint   # H200
"""
import argparse, gc, json, math, sys, time
from pathlib import Path

import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
from step import synthetic_video_prompt, to  # noqa: E402  (bench/step.py)
from easyvideor1.config import TrainConfig, fsdp_dtypes  # noqa: E402
from easyvideor1.models import qwen_vlm  # noqa: E402
from easyvideor1.parallel import shard_fsdp2  # noqa: E402
from easyvideor1.prefix import PrefixLogp, enable_checkpointing, group_micro_batches  # noqa: E402

SETTINGS = [("float32", "auto"), ("bfloat16", "auto"), ("float32", "bfloat16")]  # (dtype, fsdp_param_dtype)


def sync(dev):
    if dev.type == "cuda": torch.cuda.synchronize(dev)


def measure(dtype: str, fsdp_param_dtype: str, a, dev) -> dict:
    "One setting: the mean step time after warm-up, peak memory, and what the shards and gradients are stored in."
    param_dtype, reduce_dtype = fsdp_dtypes(TrainConfig(parallel="fsdp2", dtype=dtype, fsdp_param_dtype=fsdp_param_dtype))
    gc.collect()  # the previous setting's model (FSDP2's hooks hold cycles) before the peak is reset
    if dev.type == "cuda": torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats(dev)
    model = qwen_vlm(a.family, a.size, seed=0, dtype=getattr(torch, dtype), device=dev)
    root = shard_fsdp2(model, param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    if a.checkpoint: enable_checkpointing(model)  # after sharding, as the trainer does
    prompt = to(synthetic_video_prompt(model, a.frames, a.res), dev, getattr(torch, dtype))
    g = torch.Generator(device="cpu").manual_seed(0)
    ids = torch.randint(100, 20000, (a.G, a.new_tokens), generator=g, device="cpu").to(dev)  # (G, T)
    mask = torch.ones(a.G, a.new_tokens, device=dev)  # (G, T)
    adv = torch.randn(a.G, generator=g, device="cpu").to(dev)  # (G,)
    mbs = group_micro_batches([prompt], [ids], [mask], [adv], a.chunk)
    opt = torch.optim.AdamW(root.parameters(), lr=1e-6)
    times = []
    for _ in range(a.steps):
        sync(dev); t0 = time.time()
        fn = PrefixLogp(root)
        for mb in mbs: (-(fn(mb) * mb.adv[:, None] * mb.mask).sum() / float(mask.sum())).backward()
        opt.step(); opt.zero_grad(set_to_none=False)  # keep the gradients: their dtype is reported below
        sync(dev); times.append(time.time() - t0)
    p = next(iter(root.parameters()))
    out = dict(dtype=dtype, fsdp_param_dtype=fsdp_param_dtype, compute=str(param_dtype)[6:], reduce=str(reduce_dtype)[6:],
               shards=str(p.dtype)[6:], grads=str(p.grad.dtype)[6:], step_s=sum(times[1:]) / len(times[1:]),
               peak_gib=torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else math.nan)
    del model, root, opt, mbs
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="qwen2_5_vl"); ap.add_argument("--size", default="tiny")
    ap.add_argument("--device", default="cpu"); ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--frames", type=int, default=8); ap.add_argument("--res", type=int, default=112)
    ap.add_argument("--G", type=int, default=4); ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--chunk", type=int, default=4, help="completions per micro-batch")
    ap.add_argument("--checkpoint", action="store_true", help="activation checkpointing of the blocks")
    ap.add_argument("--json", default="", help="also write the rows to this JSON file")
    a = ap.parse_args()
    if a.steps < 2: ap.error("--steps: step 0 is warm-up, at least 2 are needed")
    dev = torch.device(a.device)
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", store=dist.HashStore(), rank=0, world_size=1,
                            device_id=dev if dev.type == "cuda" else None)
    rows = [measure(d, p, a, dev) for d, p in SETTINGS]
    dist.destroy_process_group()
    print(f"\n{a.family}:{a.size} on {a.device}, {a.frames} frames of {a.res} x {a.res}, G = {a.G} x {a.new_tokens} tokens, "
          f"micro-batches of {a.chunk}{', checkpointing' if a.checkpoint else ''}; mean of steps 1-{a.steps - 1}\n")
    print("| dtype | fsdp_param_dtype | compute | reduce | shards / grads | step (s) | speed vs fp32 | peak (GiB) |\n" + "|---" * 8 + "|")
    for r in rows:
        print(f"| {r['dtype']} | {r['fsdp_param_dtype']} | {r['compute']} | {r['reduce']} | {r['shards']} / {r['grads']} | "
              f"{r['step_s']:.3f} | {rows[0]['step_s'] / r['step_s']:.2f}x | {r['peak_gib']:.1f} |")
    if a.json: Path(a.json).write_text(json.dumps(dict(args=vars(a), rows=rows), indent=1) + "\n")


if __name__ == "__main__": main()
