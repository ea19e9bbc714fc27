"""Peak memory of one GRPO update of a group of G=8, naive vs shared prefix, with and without checkpointing, full vs LoRA.

Each cell (prompt length x path x checkpointing) runs in a fresh process: on CPU its peak RSS (minus the RSS
after the model is built), on a GPU `torch.cuda.max_memory_allocated`. The update is the trainer's: one
`grpo_step` of `PrefixLogp` over the group (one micro-batch), AdamW, through the real prompt / completion code.
Prompts are text (random ids): the text-heavy end of a video prompt, where the prompt's length is the cost.

    python bench/memory.py                         # CPU default: the tiny shape, 1k-4k tokens (minutes)
    python bench/memory.py --lengths 2048,8192,16384 --family qwen3_vl --size 8b --dtype bfloat16 --device cuda
    python bench/memory.py --size small --lengths 1024 --lora-ranks 0,16   # full fine-tuning vs LoRA rank 16 (PEFT)
"""
import argparse, json, math, os, resource, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cell(a) -> dict:
    "One measurement in this process."
    import torch
    from easyvideor1.data import SampleInputs
    from easyvideor1.grpo import grpo_step
    from easyvideor1.models import qwen_vlm
    from easyvideor1.prefix import PrefixLogp, enable_checkpointing, group_micro_batches
    torch.manual_seed(0)
    dev, dtype = torch.device(a.device), getattr(torch, a.dtype)
    model = qwen_vlm(a.family, a.size, seed=0, dtype=dtype, device=dev)
    model.train()
    if a.lora_rank:
        from easyvideor1.lora import apply_lora
        apply_lora(model, a.lora_rank)  # the trainer's default targets: the language model's attention and MLP
    if a.checkpointing: enable_checkpointing(model)
    P, G, T = a.prompt, a.G, a.new_tokens
    ids = torch.randint(1000, 50000, (P,), device=dev)  # (P,) text tokens
    prompt = SampleInputs(sample_id="p", input_ids=ids, prompt_len=P, mm_token_type_ids=torch.zeros(P, dtype=torch.int32, device=dev))
    comp = torch.randint(1000, 50000, (G, T), device=dev)  # (G, T)
    mbs = group_micro_batches([prompt], [comp], [torch.ones(G, T, device=dev)], [torch.randn(G, device=dev)], chunk_size=G)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    if dev.type == "cuda": torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats(); base = torch.cuda.memory_allocated()
    else: base = rss_kb() * 1024
    t = time.time()
    grpo_step(PrefixLogp(model, shared_prefix=a.path == "shared"), mbs, opt, max_grad_norm=1.0)
    if dev.type == "cuda": torch.cuda.synchronize(); peak, held = torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated()
    else: peak, held = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, rss_kb() * 1024
    return dict(peak_gib=peak / 2**30, growth_gib=(peak - base) / 2**30, held_gib=(held - base) / 2**30,  # held: grads + AdamW states
                seconds=time.time() - t)


def rss_kb() -> int:
    "Current resident set size (Linux)."
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"): return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", default="1024,2048,4096", help="prompt lengths in tokens (comma-separated)")
    ap.add_argument("--family", default="qwen2_5_vl")
    ap.add_argument("--size", default="tiny", help="a size of models.VLM_SHAPES (tiny: hidden 128, 2 layers; small: 256, 4)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--G", type=int, default=8, help="group size")
    ap.add_argument("--new-tokens", type=int, default=64, help="completion length")
    ap.add_argument("--paths", default="naive,shared")
    ap.add_argument("--lora-ranks", default="0", help="LoRA ranks to measure, comma-separated (0: full fine-tuning)")
    ap.add_argument("--checkpointing-modes", default="off,on", help="off, on, or both")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per cell (a cell past it is reported as such)")
    ap.add_argument("--cell", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--prompt", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--checkpointing", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--lora-rank", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.cell: print(json.dumps(cell(a))); return
    lengths = [int(x) for x in a.lengths.split(",")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),  # callers' paths kept
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    common = ["--family", a.family, "--size", a.size, "--dtype", a.dtype, "--device", a.device, "--G", str(a.G), "--new-tokens", str(a.new_tokens)]
    rows = {}
    cks = [{"off": False, "on": True}[m] for m in a.checkpointing_modes.split(",")]
    ranks = [int(r) for r in a.lora_ranks.split(",")]
    for r_ in ranks:
        for ck in cks:
            for path in a.paths.split(","):
                for P in lengths:
                    cmd = [sys.executable, __file__, "--cell", "--prompt", str(P), "--path", path, "--lora-rank", str(r_), *common] + (["--checkpointing"] if ck else [])
                    try:
                        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=a.timeout)
                        r = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {"error": out.stderr.strip().splitlines()[-1][:80]}
                    except subprocess.TimeoutExpired: r = {"error": f"over {a.timeout:.0f} s"}
                    rows[r_, ck, path, P] = r
                    print(f"  lora={r_:3d} {path:6s} checkpointing={ck!s:5s} P={P:6d}: {r}", file=sys.stderr, flush=True)
    what = "peak RSS growth" if a.device == "cpu" else "max_memory_allocated growth"
    print(f"\n{what} (GiB) of one GRPO update, G={a.G}, {a.new_tokens}-token completions, {a.family}:{a.size} {a.dtype} on {a.device}")
    print("| training | path | checkpointing | " + " | ".join(f"P={P}" for P in lengths) + " | growth per doubling |")
    print("|---|---|---|" + "---|" * len(lengths) + "---|")
    for r_ in ranks:
        for ck in cks:
            for path in a.paths.split(","):
                v = [rows[r_, ck, path, P].get("growth_gib") for P in lengths]
                cells = [f"{x:.2f}" if x is not None else rows[r_, ck, path, P]["error"] for x, P in zip(v, lengths)]
                per = []
                for (p0, x0), (p1, x1) in zip(zip(lengths, v), zip(lengths[1:], v[1:])):
                    if x0 and x1 and x0 > 0: per.append(f"{(x1 / x0) ** (1 / math.log2(p1 / p0)):.2f}x")
                who = f"LoRA r={r_}" if r_ else "full"
                print(f"| {who} | {path} | {'on' if ck else 'off'} | " + " | ".join(cells) + " | " + ", ".join(per) + " |")
    if len(ranks) > 1:  # what stays after the update: gradients and AdamW moments (on CPU: RSS, which the allocator may keep higher)
        print(f"\nheld after the update (GiB): " + ", ".join(f"{'LoRA r=' + str(q) if q else 'full'} {p}{'+ck' if c else ''}@{P}: "
                                                     f"{r['held_gib']:.2f}" for (q, c, p, P), r in rows.items() if "held_gib" in r))
    if 0 in ranks and len(ranks) > 1:  # the LoRA column: full / LoRA growth, cell by cell
        for r_ in (r for r in ranks if r):
            ratios = [f"{path}{'+ck' if ck else ''}@{P}: {rows[0, ck, path, P]['growth_gib'] / rows[r_, ck, path, P]['growth_gib']:.2f}x"
                      for ck in cks for path in a.paths.split(",") for P in lengths
                      if rows[0, ck, path, P].get("growth_gib") and rows[r_, ck, path, P].get("growth_gib")]
            print(f"\nfull / LoRA r={r_} peak growth: " + ", ".join(ratios))
    secs = {k: round(r.get("seconds", 0), 1) for k, r in rows.items()}
    print(f"\nupdate seconds per cell: " + ", ".join(f"{'r' + str(q) + ' ' if q else ''}{p}{'+ck' if c else ''}@{P}: {s}" for (q, c, p, P), s in secs.items()))


if __name__ == "__main__":
    main()
