"""Drawing the next token on a CPU: transformers' `torch.multinomial` path vs `rollout.InverseCDFSampler` (the HF engine's
default), both sampling the full softmax at T = 1. Two measurements, both sides in this process:

1. one decode step's draw for a group of G rows over Qwen's 151,936-token vocabulary (softmax + multinomial + the
   drawn token's log-prob, vs the inverse-CDF pass that gives both);
2. `HFEngine.generate` of one group (tiny Qwen2.5-VL, the demo video prompt, G completions of up to N tokens) with
   `fast_sampler=False` vs `True`.

Prints the mean seconds of each and the ratios.

    OMP_NUM_THREADS=1 python bench/sampler.py [G] [N] [repeats]   # default 8 completions, 16 tokens, 5 repeats
"""
import sys, time
from pathlib import Path
import torch
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from easyvideor1.models import qwen_vlm, qwen_processor
from easyvideor1.rollout import HFEngine, InverseCDFSampler, SamplingConfig, banned_token_ids, demo_prompts, trainer_inputs


def mean_s(fn, repeats: int) -> float:
    fn()  # warm-up
    t = time.perf_counter()
    for _ in range(repeats): fn()
    return (time.perf_counter() - t) / repeats


def multinomial_draw(z):
    "What `generate` does at T = 1 with its raw logits kept: softmax, multinomial, then the drawn token's log-prob."
    tok = torch.multinomial(z.softmax(-1), 1)  # (G, 1)
    return tok, z.log_softmax(-1).gather(-1, tok)


def main():
    G, N, R = (int(a) for a in (sys.argv[1:] + ["8", "16", "5"][len(sys.argv) - 1:])[:3])
    torch.manual_seed(0)
    z = torch.randn(G, 151_936, device="cpu") * 3  # (G, V) logits of a fairly flat policy
    banned = banned_token_ids()
    draw_m = mean_s(lambda: multinomial_draw(z), 20 * R)
    draw_i = mean_s(lambda: InverseCDFSampler(1.0, banned)(None, z), 20 * R)
    fam = "qwen2_5_vl"
    proc, model = qwen_processor(fam), qwen_vlm(fam, "tiny", seed=0)
    prompt = trainer_inputs(proc, demo_prompts(fam, proc)[:1])
    sc = SamplingConfig(n=G, temperature=1.0, max_new_tokens=N, seed=0)
    gen_m = mean_s(lambda: HFEngine(model, proc, fast_sampler=False).generate(prompt, sc), R)
    gen_i = mean_s(lambda: HFEngine(model, proc).generate(prompt, sc), R)
    print(f"{torch.get_num_threads()} threads, G = {G} rows, vocabulary {z.shape[1]:,}, up to {N} new tokens, {R} repeats\n")
    print("| | torch.multinomial (s) | inverse CDF (s) | speedup |\n|---|---|---|---|")
    print(f"| one draw of G tokens | {draw_m:.4f} | {draw_i:.4f} | {draw_m / draw_i:.2f}x |")
    print(f"| HFEngine.generate, one group | {gen_m:.3f} | {gen_i:.3f} | {gen_m / gen_i:.2f}x |")


if __name__ == "__main__":
    main()
