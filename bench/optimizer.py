"""Time of one AdamW step over the tiny Qwen2.5-VL's parameters (151,936-token tied embedding, ~20 M values):
torch's default CPU implementation (a loop of per-parameter ops) vs `fused=True` (one kernel), the trainer's choice.
Both sides run in this process on the same gradients; prints the mean seconds of each and the ratio.

    OMP_NUM_THREADS=1 python bench/optimizer.py [steps]   # default 10 steps after one warm-up step
"""
import sys, time
from pathlib import Path
import torch
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from easyvideor1.models import qwen_vlm


def mean_step(model, steps: int, **kw) -> float:
    "Mean seconds of one AdamW step (after a warm-up step that allocates the state)."
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, betas=(0.9, 0.95), **kw)
    opt.step()
    t = time.perf_counter()
    for _ in range(steps): opt.step()
    return (time.perf_counter() - t) / steps


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    model = qwen_vlm("qwen2_5_vl", "tiny", seed=0)
    torch.manual_seed(0)
    for p in model.parameters(): p.grad = torch.randn_like(p)
    n = sum(p.numel() for p in model.parameters())
    plain, fused = mean_step(model, steps), mean_step(model, steps, fused=True)
    print(f"tiny Qwen2.5-VL, {n / 1e6:.1f} M parameters, {torch.get_num_threads()} threads, mean of {steps} steps\n")
    print("| AdamW | s / step |\n|---|---|")
    print(f"| default (for-loop) | {plain:.3f} |\n| fused=True | {fused:.3f} |")
    print(f"\nfused speedup: {plain / fused:.2f}x")


if __name__ == "__main__":
    main()
