"Run by tests/test_parallel.py under `torchrun --nproc_per_node 2` (gloo, CPU): every two-rank check, results as JSON from rank 0."
import datetime, json, math, os, sys, tempfile, time, warnings
from pathlib import Path

import torch
import torch.distributed as dist

warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).parent))
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=90))
RANK, WORLD = dist.get_rank(), dist.get_world_size()

from test_prefix import toy_prompt  # noqa: E402  (real prompts of both families)
from easyvideor1.data import collate, forward_vlm, with_completion  # noqa: E402
from easyvideor1.grpo import MicroBatch, grpo_step, loss_denominator  # noqa: E402
from easyvideor1.models import qwen_processor, qwen_vlm  # noqa: E402
from easyvideor1.parallel import (fsdp_modules, full_state_dict, gathered, load_full_state_dict, load_sharded, max_over_ranks,  # noqa: E402
                                  pad_micro_batches, save_sharded, shard_fsdp2)
from easyvideor1.prefix import PrefixLogp, enable_checkpointing, group_micro_batches  # noqa: E402
from easyvideor1.parallel import all_reduce_grads  # noqa: E402

results, T0 = {}, time.time()


def rel(a, b):
    "Largest relative error over parameters."
    return max(((a[n] - b[n]).norm() / b[n].norm()).item() if b[n].norm() > 0 else a[n].norm().item() for n in b)


def full_grads(model):
    "name -> full gradient (DTensor shards gathered; a collective)."
    return {n: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).clone() for n, p in model.named_parameters()}


def groups(fam, kinds, G=4, T=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    ps = [toy_prompt(fam, k) for k in kinds]
    ids = [torch.randint(100, 20000, (G, T), generator=g) for _ in kinds]
    mask = [torch.ones(G, T) for _ in kinds]; mask[0][1, 3:] = 0
    return ps, ids, mask, [torch.randn(G, generator=g) for _ in kinds]


def run_loss(model, mbs, shared, n_total):
    "Forward + backward per micro-batch, as grpo_step does (loss: -sum(adv * logp) / n_total)."
    fn = PrefixLogp(model, shared_prefix=shared)
    for mb in mbs: (-(fn(mb) * mb.adv[:, None] * mb.mask).sum() / n_total).backward()


def case(name):
    def deco(f):
        t = time.time()
        try: results[name] = dict(ok=True, **f())
        except Exception as e:  # reported to the test, which fails with the message
            print(f"rank {RANK} {name}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            results[name] = dict(ok=False, error=f"{type(e).__name__}: {e}"[:2000])
        results[name]["seconds"] = round(time.time() - t, 1)
        dist.barrier()
    return deco


# --- 1. one FSDP2 step's gradients equal the single-process full-batch gradients (every parameter, fp32)
KINDS = ["video", "image"]  # rank 0 gets a video group, rank 1 an image group
# Qwen3.5's gate parameters: an absolute bound (fp32 chunked-kernel rounding, see tests/test_prefix.py)
GATES = ("linear_attn.A_log", "linear_attn.dt_bias", "linear_attn.in_proj_a")
for fam in (() if os.environ.get("FSDP_WORKER_SKIP_ORACLE") else ("qwen2_5_vl", "qwen3_vl", "qwen3_5")):
    ps, ids, mask, adv = groups(fam, KINDS)
    N = sum(float(m.sum()) for m in mask)
    ref, model = qwen_vlm(fam, "tiny", seed=0), qwen_vlm(fam, "tiny", seed=0)
    root = shard_fsdp2(model)
    passes = [("shared", True, False)] + ([("naive", False, False), ("shared-checkpointing", True, True)] if fam == "qwen3_vl" else [])
    for label, shared, ck in passes:
        @case(f"oracle[{fam}-{label}]")
        def _():
            ref.zero_grad(set_to_none=True); root.zero_grad(set_to_none=True)
            run_loss(ref, group_micro_batches(ps, ids, mask, adv, 2), shared, N)  # both groups, 2 chunks each
            if ck: enable_checkpointing(model)  # after sharding: FSDP2's hooks stay outside the checkpoint
            r = RANK
            run_loss(root, group_micro_batches(ps[r:r + 1], ids[r:r + 1], mask[r:r + 1], adv[r:r + 1], 2), shared, N / WORLD)
            got, want = full_grads(model), {n: p.grad for n, p in ref.named_parameters()}
            gates = [n for n in want if any(k in n for k in GATES)]
            return dict(rel=rel(got, {n: g for n, g in want.items() if n not in gates}), n_params=len(got),
                        gate_abs=max([(got[n] - want[n]).abs().max().item() for n in gates], default=0.0),
                        block_types=sorted({getattr(m, "block_type", type(m).__name__) for m in fsdp_modules(model)}),
                        dtensor=type(next(model.parameters())).__name__)


# --- 2. the dummy-vision rule under FSDP2: text-only, image-only, video-only and mixed micro-batches
@case("dummy_vision")
def _():
    fam = "qwen2_5_vl"
    proc = qwen_processor(fam)
    tok = proc.tokenizer("<answer>B</answer>").input_ids
    seqs = {k: with_completion(toy_prompt(fam, k), tok, proc) for k in ("text", "image", "video")}
    kinds = [["text"], ["image"]] if RANK == 0 else [["video"], ["image", "video"]]
    model = qwen_vlm(fam, "tiny", seed=0)  # all trainable: a frozen embedding makes a text-only rank's first layer input need
    root = shard_fsdp2(model)               # no gradient, and its reduce-scatter then comes in another order than an image rank's
    for ks in kinds:  # the warm start / naive path: forward_vlm on collated batches
        b = collate([seqs[k] for k in ks], proc.tokenizer.pad_token_id, pad_side="left")
        T = len(tok)
        forward_vlm(root, b, logits_to_keep=T + 1).logits[:, :-1].logsumexp(-1).sum().backward()
    ps, ids, mask, adv = groups(fam, ["text", "video"], G=2, T=3, seed=5)  # the shared-prefix path: a text group vs a video group
    run_loss(root, group_micro_batches(ps[RANK:RANK + 1], ids[RANK:RANK + 1], mask[RANK:RANK + 1], adv[RANK:RANK + 1], 1), True, 6.0)
    vis = [(n, p) for n, p in model.named_parameters() if "visual" in n]
    return dict(vision_params=len(vis), with_grad=sum(p.grad is not None for _, p in vis),
                nonzero=sum(bool(p.grad is not None and p.grad.full_tensor().norm() > 0) for _, p in vis))


# --- 3. a rank with fewer micro-batches, padded with zero-weight ones: DDP-style all-reduce and FSDP2, grpo_step (clipped)
def unequal_setup():
    fam = "qwen3_vl"
    ps, ids, mask, adv = groups(fam, ["video", "text", "image"], G=2, T=4, seed=1)
    mine = [0, 1] if RANK == 0 else [2]  # rank 0: 2 micro-batches, rank 1: 1
    mbs_all = group_micro_batches(ps, ids, mask, adv, 2)
    return fam, mbs_all, [mbs_all[i] for i in mine]


def step_params(model, logp_model, mbs, n_total, reduce=None):
    "Parameters after one grpo_step (SGD lr 1, gradient norm clipped to 0.5)."
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    st = grpo_step(PrefixLogp(logp_model), mbs, opt, max_grad_norm=0.5, n_total=n_total, reduce_grads=reduce)
    sd = full_state_dict(model, rank0_only=False) if hasattr(logp_model, "model") else {k: v.clone() for k, v in model.state_dict().items()}
    return sd, st["grad_norm"]


fam3, mbs_all, mine = unequal_setup()
ref3 = qwen_vlm(fam3, "tiny", seed=0)
want, want_norm = step_params(ref3, ref3, mbs_all, loss_denominator(mbs_all))  # one process, the full batch
for par in ("ddp", "fsdp2"):
    @case(f"unequal[{par}]")
    def _():
        counts = torch.tensor([loss_denominator(mine)]); dist.all_reduce(counts)
        n_total = float(counts) / WORLD  # the global denominator / world size, counted before padding
        n = max_over_ranks(len(mine))
        padded = pad_micro_batches(mine, n)
        model = qwen_vlm(fam3, "tiny", seed=0)
        if par == "ddp": got, norm = step_params(model, model, padded, n_total, reduce=lambda ps: all_reduce_grads(ps, WORLD))
        else:
            root = shard_fsdp2(model)
            got, norm = step_params(root, root, padded, n_total)
        return dict(counts=[len(mine), n], rel=max(((got[k] - want[k]).norm() / want[k].norm().clamp(min=1e-12)).item() for k in want),
                    grad_norm=[norm, want_norm])


# --- 4. checkpoints: full state dict round trip (transformers folder), sharded exact resume
@case("state_dict")
def _():
    from transformers import AutoModelForImageTextToText
    fam = "qwen2_5_vl"
    root = shard_fsdp2(qwen_vlm(fam, "tiny", seed=0))
    sd, ref = full_state_dict(root), qwen_vlm(fam, "tiny", seed=0).state_dict()
    out = dict(rank0_equal=RANK != 0 or all(torch.equal(sd[k], ref[k]) for k in ref), others_empty=RANK == 0 or sd == {})
    other = shard_fsdp2(qwen_vlm(fam, "tiny", seed=1))
    load_full_state_dict(other, sd)
    back = full_state_dict(other, rank0_only=False)
    out["loaded_equal"] = all(torch.equal(back[k], ref[k]) for k in ref)
    with tempfile.TemporaryDirectory() as d:
        folder = [d]; dist.broadcast_object_list(folder, 0)
        if RANK == 0: root.model.save_pretrained(Path(folder[0]) / "model", state_dict=sd)
        dist.barrier()
        hf = AutoModelForImageTextToText.from_pretrained(Path(folder[0]) / "model", local_files_only=True)
        out["pretrained_equal"] = all(torch.equal(v, ref[k]) for k, v in hf.state_dict().items())
        dist.barrier()
    return out


@case("exact_resume")
def _():
    fam = "qwen2_5_vl"
    ps, ids, mask, adv = groups(fam, ["image", "video"], G=2, T=4, seed=2)
    mbs = group_micro_batches(ps[RANK:RANK + 1], ids[RANK:RANK + 1], mask[RANK:RANK + 1], adv[RANK:RANK + 1], 2)
    def make(seed):
        m = qwen_vlm(fam, "tiny", seed=seed)
        m.get_input_embeddings().weight.requires_grad_(False)  # smaller optimizer state to save; both ranks' first layer
        root = shard_fsdp2(m)                                   # inputs still need gradients (image and video features)
        return root, torch.optim.AdamW([p for p in root.parameters() if p.requires_grad], lr=1e-2)
    step = lambda root, opt: grpo_step(PrefixLogp(root), mbs, opt, max_grad_norm=1.0, n_total=4.0)
    root, opt = make(0)
    step(root, opt)
    with tempfile.TemporaryDirectory() as d:
        folder = [d]; dist.broadcast_object_list(folder, 0)
        save_sharded(Path(folder[0]) / "sharded", root, opt)
        step(root, opt)  # the uninterrupted run's second step
        want = full_state_dict(root, rank0_only=False)
        root2, opt2 = make(1)  # another init: everything must come from the checkpoint
        load_sharded(Path(folder[0]) / "sharded", root2, opt2)
        step(root2, opt2)
        got = full_state_dict(root2, rank0_only=False)
        dist.barrier()
    return dict(identical=all(torch.equal(got[k], want[k]) for k in want),
                moved=any(not torch.equal(want[k], v) for k, v in qwen_vlm(fam, "tiny", seed=0).state_dict().items()))


# --- 5. generation under FSDP2: ranks generate different lengths inside `gathered` (no collective per step)
@case("generate")
def _():
    from easyvideor1.rollout import HFEngine, SamplingConfig, demo_prompts, trainer_inputs
    fam = "qwen2_5_vl"
    proc = qwen_processor(fam)
    root, plain = shard_fsdp2(qwen_vlm(fam, "tiny", seed=0)), qwen_vlm(fam, "tiny", seed=0)
    sc = SamplingConfig(n=2, temperature=1.0, max_new_tokens=3 + 5 * RANK, seed=RANK)  # rank 1 decodes more steps
    inputs = trainer_inputs(proc, demo_prompts(fam, proc))
    prompts = inputs[RANK:RANK + 1]
    got = HFEngine(root, proc).generate(prompts, sc)
    ref = HFEngine(plain, proc).generate(prompts, sc)
    # evaluation's greedy batches: as many per rank (`generate` steps the ranks together under FSDP2), other prompts
    greedy, mine = SamplingConfig(n=1, temperature=0, max_new_tokens=4 + 4 * RANK), inputs[::1 - 2 * RANK]
    got1, ref1 = (HFEngine(m, proc, batch_size=1).generate(mine, greedy) for m in (root, plain))
    return dict(equal=[c.token_ids for c in got[0]] == [c.token_ids for c in ref[0]],
                lengths=[len(c.token_ids) for c in got[0]],
                greedy_equal=[g[0].token_ids for g in got1] == [g[0].token_ids for g in ref1], greedy_n=len(got1))


# --- 6. a frozen tower's cached features: rank 0 reads them, rank 1 runs the tower alone (replicated, out of FSDP2)
@case("cached_vision")
def _():
    from dataclasses import replace
    from easyvideor1.lora import apply_lora, use_vision_features
    fam = "qwen2_5_vl"
    ps, ids, mask, adv = groups(fam, ["video", "image"], G=4, T=5, seed=3)
    ps = [replace(ps[0], video_keys=("v",)), replace(ps[1], image_keys=("i",))]
    N = sum(float(m.sum()) for m in mask)
    def lora():
        m = apply_lora(qwen_vlm(fam, "tiny", seed=0), 4, 8.0)
        with torch.no_grad():
            for n, p in m.named_parameters():
                if ".lora_B." in n: p.copy_(torch.linspace(-0.05, 0.05, p.numel()).view_as(p))  # a trained policy
        return m
    ref, model = lora(), lora()
    for shared in (True, False): run_loss(ref, group_micro_batches(ps, ids, mask, adv, 2), shared, N)  # one process
    with tempfile.TemporaryDirectory() as d:
        feats = use_vision_features(model, d)  # each rank its own folder
        if RANK == 0: feats.encode(model, ps[0])  # rank 0 has its clip's features, rank 1 must compute its image's
        root = shard_fsdp2(model, replicate_vision=True)
        calls = []
        hook = model.model.visual.register_forward_hook(lambda *_: calls.append(1))
        r = RANK
        for shared in (True, False):  # the prefix path (`forward_prompt`) and the naive one (`forward_vlm`)
            mine = group_micro_batches(ps[r:r + 1], ids[r:r + 1], mask[r:r + 1], adv[r:r + 1], 2)
            run_loss(root, mine, shared, N / WORLD)
        hook.remove()
    got = {n: p.grad.full_tensor() for n, p in model.named_parameters() if p.requires_grad}
    want = {n: p.grad for n, p in ref.named_parameters() if p.requires_grad}
    return dict(rel=rel(got, want), tower_calls=len(calls), hits=feats.hits, misses=feats.misses - (RANK == 0))


# --- 7. mixed precision: fp32 shards gathered in bf16 for compute, gradients reduce-scattered in fp32 (or bf16)
def off_bf16(t):
    "Share of a float32 tensor's elements that bf16 cannot hold: 0 after a bf16 reduction, most after an fp32 mean of bf16 values."
    return (t != t.bfloat16().float()).float().mean().item()


ps7, ids7, mask7, adv7 = groups("qwen2_5_vl", KINDS, seed=7)
N7 = sum(float(m.sum()) for m in mask7)
ref7 = qwen_vlm("qwen2_5_vl", "tiny", seed=0)
run_loss(ref7, group_micro_batches(ps7, ids7, mask7, adv7, 2), True, N7)  # one process, fp32, both groups
for rd in ("float32", "bfloat16"):
    @case(f"mixed_precision[{rd}]")
    def _():
        model = qwen_vlm("qwen2_5_vl", "tiny", seed=0)
        root = shard_fsdp2(model, param_dtype=torch.bfloat16, reduce_dtype=getattr(torch, rd))
        seen = set()
        up = model.model.language_model.layers[0].mlp.up_proj
        hook = up.register_forward_hook(lambda m, i, o: seen.add((str(m.weight.dtype), str(o.dtype))))
        r = RANK
        mine = group_micro_batches(ps7[r:r + 1], ids7[r:r + 1], mask7[r:r + 1], adv7[r:r + 1], 4)  # one backward: one reduction
        run_loss(root, mine, True, N7 / WORLD)
        hook.remove()
        got = full_grads(model)
        flat = torch.cat([g.reshape(-1) for g in got.values()])
        return dict(seen=sorted(seen), rel=rel(got, {n: p.grad for n, p in ref7.named_parameters()}), off_bf16=off_bf16(flat),
                    dtypes=sorted({f"{p.dtype}/{p.grad.dtype}" for p in model.parameters()}))


gathered_results = [None] * WORLD
dist.all_gather_object(gathered_results, results)
if RANK == 0:
    Path(sys.argv[1]).write_text(json.dumps({"ranks": gathered_results, "seconds": round(time.time() - T0, 1)}, indent=1))
dist.destroy_process_group()
