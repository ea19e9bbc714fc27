"""FLOPs of one trainer GRPO step, phase by phase, beside the least the step must execute: CPU only, no hardware.

Default shape, the paper's: Qwen3-VL-8B (`qwen_vl_config("qwen3_vl", "8b")`), one 128-frame 512 x 512 video prompt
(16,384 visual tokens, 16,872-token prompt), G = 8 completions of T = 512 tokens, update micro-batches of 4,
`updates_per_batch` = 1, beta = 0 (no reference pass), activation checkpointing off and on.

    python bench/flops.py                                   # the 8B shape (about 2 minutes on 2 cores)
    python bench/flops.py --family qwen3_5 --size 2b        # Qwen3.5-2B, the hybrid (Gated DeltaNet) family
    python bench/flops.py --size small --frames 4 --res 64 --new-tokens 4 --G 2 --chunk 2 --verify --verify-decode

How the executed FLOPs are counted. `torch.utils.flop_counter.FlopCounterMode` around the real code of each phase:
- rollout: `rollout.HFEngine._shared` / `._naive` (the trainer's HF engine: one batch-1 prefill and its cache repeated
  G times, or G prefills of G prompt copies) up to `generate`; `generate`'s per-token forwards (the full model, one
  token per row, the KV cache, `logits_to_keep=1`) are counted at the first and last decode context and summed: a
  decode step's count is linear in its context (`--verify --verify-decode` counts every step and checks the sum);
- log-prob pass (old log-probs when `--updates` > 1, reference log-probs when `--beta` > 0): `PrefixLogp` over
  `step.step_micro_batches` under `torch.no_grad()`, as `step.grpo_update` runs it;
- update: `step.grpo_update` itself (`PrefixLogp` + `grpo_step`: forward, `loss.backward()`, clipping, an SGD step),
  with `prefix.enable_checkpointing` (the trainer's `gradient_checkpointing`) off and on, so the backward and
  checkpointing's recompute are counted as executed.
Made affordable two ways. (1) Parameters, pixels and activations are fake tensors (`FakeTensorMode`: shapes only, no
memory, no arithmetic), while token ids, grids, masks and positions stay real, so the rope index and the vision
tower's grid code read their values; a boolean index by a real mask becomes its real `nonzero()`, and `.item()` of
a fake value (the loss and the gradient norm, statistics only) reads 0 (`stub_reads` counts them). (2) The model is
built at reduced depth and scaled: every count is linear in the number of blocks of each kind (decoder layers;
vision blocks, for Qwen2.5-VL windowed and full-attention ones apart, for Qwen3.5 Gated DeltaNet and full-attention
decoder layers apart), so F(full) = F(base) + sum over kinds of
(n_full - n_base) * (F(base + one block of the kind) - F(base)); embeddings, lm_head and mergers are counted once in
F(base). The base keeps every merger in use (Qwen3-VL: as many decoder layers as deepstack mergers, else a merger's
output goes unused and has no backward). `--verify` counts the full depth directly and asserts equality (exact
integers; at the 8B shape in about 5 minutes). The vision and lm_head parts are attributed by autograd node in the
backward (the node running was made inside the module's forward), since a tower's output gets no module hook there.
Attention kernels (CPU `_scaled_dot_product_flash_attention_for_cpu`, forward and backward) are counted as the GPU
kernels run them: a causal call over its lower triangle only (flash attention skips the masked blocks), a call with
an explicit mask over the full rectangle (the masked kernel computes every score). FlopCounterMode counts matmuls,
convolutions and attention only: norms, softmax, rope and the optimizer's element-wise work are not FLOPs here. A
convolution's backward is torch's count with a grouped convolution's weight gradient divided by its groups (torch
counts it as dense: Qwen3.5's depthwise conv1d came out C times over). Qwen3.5's gated delta rule (the linear-attention
core of its Gated DeltaNet layers) is counted by a stand-in at its recurrence's FLOPs, 6 d_k d_v per token and value
head forward and twice that backward (`DeltaRule`), in the executed column as in the least: which kernel runs decides
its real count (fla's chunked kernel on a GPU; transformers' one-token fallback is element-wise and would count 0),
so the ratios measure what the trainer does around it.

The least the step must execute, per group (one prompt of P tokens, V_p patches, V_m = V_p / 4 merged tokens; G
completions of T tokens). N_b: matmul weights of the decoder layers (q, k, v, o, gate, up, down), N_h: lm_head (d x
vocabulary), N_vp: vision weights applied per patch (patch embedding, every block), N_vm: weights per merged token
(merger, deepstack mergers); embeddings and norms are not matmuls. Qwen3.5: N_b holds its Gated DeltaNet layers'
projections and depthwise conv1d (2 FLOPs per weight and token, as a matmul's). A forward pass costs
    vision: 2 N_vp V_p + 2 N_vm V_m + 4 d_v sum_blocks sum_segments s^2   (each segment of s patches attends within
            itself: Qwen3-VL a frame pair, Qwen2.5-VL a window or a frame pair)
    text:   2 N_b tokens + 2 N_h logits + 4 L h_q d_h sum_tokens c   (c: keys a token attends to, itself included:
            QK^T and AV, causal; L: the full-attention layers)
            + 6 L_lin h_v d_k d_v tokens   (Qwen3.5: the delta rule in each of its L_lin Gated DeltaNet layers)
and a trained pass 3 x that (6 N per token; attention backward = 2 x forward). Logits: one full-vocabulary row per
sampled or scored token (G T). The vision tower runs once per clip and pass. The language model takes the prompt once
per group where the shared prefix is on, once per completion on the naive path (its least: G sequences of P + T - 1):
    rollout prefill: P tokens (causal over P), G logits (G P on the naive path, causal over P each);
    rollout decode:  G (T - 1) tokens at contexts P + 1 ... P + T - 1, G (T - 1) logits;
    log-prob pass:   P + G (T - 1) tokens, causal over P + T - 1 for each completion (the prompt's part once),
                     G T logits (naive: G (P + T - 1) tokens, G causal sequences of P + T - 1);
    update:          3 x the log-prob pass, the vision tower included (full fine-tuning trains it), less the
                     patch embedding's input gradient (pixels need none: 4 N_pe V_p, not 6).
The step: rollout + (updates > 1) + (beta > 0) log-prob passes + `updates` updates. The shared path's vision count
(the tower once per clip and pass, dummy-vision calls aside) is asserted equal to this formula, to the FLOP.

Prints one Markdown table (rows: phases; columns: executed and least GFLOPs and their ratio, naive and shared prefix;
checkpointing off / on in the update rows), then which causes account for executed - least, and ends on
`update flop ratio: X.XX` (executed / least of the update, shared prefix, checkpointing on).
"""
import argparse, contextlib, copy, importlib.util, time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode, conv_backward_flop as torch_conv_backward_flop
from transformers import AutoModelForImageTextToText, DynamicCache
from transformers.cache_utils import LinearAttentionCacheLayerMixin
from transformers.models.qwen3_5 import modeling_qwen3_5

import easyvideor1.data as evdata
from easyvideor1 import models as evmodels
from easyvideor1.data import collate
from easyvideor1.models import VLM_SHAPES, qwen_generation_config
from easyvideor1.prefix import PrefixLogp, _cache_kw, disable_checkpointing, enable_checkpointing
from easyvideor1.replay import Trajectory
from easyvideor1.rollout import HFEngine
from easyvideor1.step import grpo_update, step_micro_batches

aten = torch.ops.aten
SDPA = (aten._scaled_dot_product_flash_attention_for_cpu, aten._scaled_dot_product_flash_attention_for_cpu_backward)
_spec = importlib.util.spec_from_file_location("bench_step", Path(__file__).with_name("step.py"))
bench_step = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_step)  # synthetic_video_prompt: the processor's layout without a tokenizer


# --- shapes only ------------------------------------------------------------------------------------------------

class ShapesOnly(TorchDispatchMode):
    "An op on a fake tensor runs on shapes only; ops on real tensors alone (ids, grids, masks) run for real."
    def __init__(self):
        super().__init__()
        self.stub_reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.prim.device.default and isinstance(args[0], FakeTensor): return args[0].fake_device
        if not any(isinstance(t, FakeTensor) for t in tree_leaves((args, kwargs))): return func(*args, **kwargs)
        if func is aten._local_scalar_dense.default:  # `.item()` of a fake value: the loss, the grad norm (logged)
            self.stub_reads += 1
            x = args[0]
            return True if x.dtype == torch.bool else 0.0 if x.is_floating_point() else 0
        if func in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default):
            # a boolean index by a real mask (deepstack, gathers): its real positions, so the output shape is known
            idx = []
            for i in args[1]:
                real_mask = i is not None and i.dtype == torch.bool and not isinstance(i, FakeTensor)
                idx += list(i.nonzero().unbind(1)) if real_mask else [i]
            args = (args[0], idx, *args[2:])
        return func(*args, **kwargs)  # a FakeTensor argument dispatches to its fake mode


def _sdpa_pairs(s_q: int, s_k: int, causal: bool) -> int:
    "Query-key pairs an attention kernel computes: the lower (top-left aligned) triangle when causal."
    if not causal: return s_q * s_k
    n = min(s_q, s_k)
    return n * (n + 1) // 2 + (s_q - n) * s_k


def sdpa_flop(q, k, v, dropout_p=0.0, is_causal=False, *args, attn_mask=None, out_shape=None, **kw) -> int:
    "CPU flash attention, forward: QK^T and AV over the pairs computed (query heads; GQA broadcasts keys)."
    b, h, s_q, d = q
    return 2 * b * h * (d + v[-1]) * _sdpa_pairs(s_q, k[2], is_causal)


def sdpa_backward_flop(grad_out, q, k, v, out, lse, dropout_p=0.0, is_causal=False, *args, out_shape=None,
                       **kw) -> int:
    "CPU flash attention, backward: twice the forward (dQ, dK from dS; dV, dP), as torch counts GPU kernels."
    return 2 * sdpa_flop(q, k, v, dropout_p, is_causal)


def conv_backward_flop(grad_out, x, w, bias, stride, padding, dilation, transposed, output_padding, groups,
                       output_mask, out_shape=None, **kw) -> int:
    """A convolution's backward: torch's count, but a grouped convolution's weight gradient divided by the groups.
    torch (2.14) counts that gradient as a dense convolution's, so Qwen3.5's depthwise conv1d (groups = its C channels)
    came out C times over (the pull request pytorch/pytorch#183405 divides it by the groups upstream)."""
    args = (grad_out, x, w, bias, stride, padding, dilation, transposed, output_padding, groups)
    dx = torch_conv_backward_flop(*args, [output_mask[0], False, False], out_val=out_shape)
    dw = torch_conv_backward_flop(*args, [False, output_mask[1], False], out_val=out_shape)
    return dx + dw // groups


DELTA = "gated delta rule"  # the key under which the stand-in below adds Qwen3.5's linear-attention core


def delta_rule_flop(b: int, L: int, h_v: int, d_k: int, d_v: int) -> int:
    """The gated delta rule's core, forward, as its recurrence runs it: per token and value head a d_k x d_v state S
    is read with the key (S^T k), updated by a rank-1 term (k (beta (v - S^T k))^T) and read with the query (S^T q):
    three d_k x d_v products, 6 d_k d_v. The decay (g S) and the gate are element-wise: not FLOPs here."""
    return 6 * b * L * h_v * d_k * d_v


class DeltaRule(torch.autograd.Function):
    """Stands in for Qwen3.5's gated delta rule (`torch_chunk_gated_delta_rule` and `torch_recurrent_gated_delta_rule`
    during a count): outputs of the right shapes, its FLOPs added to the counter at the recurrence's count, forward and
    (2 x) backward. The executed count of the real kernels depends on which runs (fla's chunked kernel on a GPU adds
    intra-chunk products; transformers' one-token fallback is element-wise and would count 0), so this bench counts
    the core at its least in both columns: its ratios measure everything around it."""
    counter = None  # the FlopCounterMode of the count under way

    @staticmethod
    def add(flop: int):
        fc = DeltaRule.counter
        for par in set(fc.mod_tracker.parents): fc.flop_counts[par][DELTA] += flop

    @staticmethod
    def forward(ctx, q, k, v, g, beta, state):
        b, L, h_v, d_v = v.shape  # q, k: (b, L, h_k, d_k), each key head serving h_v / h_k value heads
        d_k = k.shape[-1]
        ctx.flop, ctx.inputs = delta_rule_flop(b, L, h_v, d_k, d_v), (q, k, v, g, beta, state)
        DeltaRule.add(ctx.flop)
        return torch.empty_like(v), v.new_empty((b, h_v, d_k, d_v), dtype=torch.float32)  # out, final state

    @staticmethod
    def backward(ctx, d_out, d_state):
        DeltaRule.add(2 * ctx.flop)  # as attention's: the backward is twice the forward
        return tuple(None if x is None else torch.empty_like(x) for x in ctx.inputs)


def delta_rule_stand_in(query, key, value, g, beta, chunk_size=64, initial_state=None, output_final_state=False,
                        **kw):
    "Both of transformers' delta-rule functions' signature (the recurrent one is called with keywords after beta)."
    out, state = DeltaRule.apply(query, key, value, g, beta, initial_state)
    return out, state if output_final_state else None


# --- model at a depth -------------------------------------------------------------------------------------------

COUNTED = ["qwen2_5_vl", "qwen3_vl", "qwen3_5"]  # the families whose layers this count knows


def block_counts(family: str, size: str) -> dict[str, int]:
    "Blocks of each kind at full depth: decoder layers (Qwen3.5: Gated DeltaNet and full attention), vision blocks."
    s = VLM_SHAPES[family][size]
    depth = s["vision"][2]
    if family == "qwen3_5":
        types = evmodels.qwen_vl_config(family, size).text_config.layer_types
        return {"linear layer": types.count("linear_attention"), "attention layer": types.count("full_attention"),
                "vision block": depth}
    if family == "qwen3_vl": return {"text layer": s["text"][2], "vision block": depth}
    special = s["vision"][4]  # Qwen2.5-VL: windowed and full-attention vision blocks
    return {"text layer": s["text"][2], "vision window block": depth - len(special),
            "vision full block": len(special)}


def base_counts(family: str, size: str) -> dict[str, int]:
    "The reduced depth counted: the fewest decoder layers and vision blocks that keep every kind and merger."
    s = VLM_SHAPES[family][size]
    if family == "qwen3_5": return {"linear layer": 1, "attention layer": 1, "vision block": 1}
    # Qwen3-VL: k deepstack mergers feed the first k decoder layers; fewer layers leave some unused (no backward),
    # and the count stops being linear in the depth
    k = len(s["vision"][4])
    if family == "qwen3_vl": return {"text layer": max(1, k), "vision block": max(1, k)}
    return {"text layer": 1, "vision window block": 1, "vision full block": 1}


def vlm_config(family: str, size: str, counts: dict[str, int]):
    "The size's config (`models.qwen_vl_config`'s builders) with these block counts, every other dimension real."
    s = copy.deepcopy(VLM_SHAPES[family][size])
    text, vision = list(s["text"]), list(s["vision"])
    if family == "qwen3_5":  # a layer's count depends on its kind, not on where it sits: Gated DeltaNet ones first
        lin, att = counts["linear layer"], counts["attention layer"]
        text[2], vision[2] = lin + att, counts["vision block"]
        s["text"], s["vision"] = tuple(text), tuple(vision)
        config = evmodels._qwen3_5_config(s)
        config.text_config.layer_types = ["linear_attention"] * lin + ["full_attention"] * att
        return config
    text[2] = counts["text layer"]
    if family == "qwen3_vl":  # deepstack features from the first blocks (each merger runs once, wherever it sits)
        vision[2], k = counts["vision block"], len(vision[4])
        if vision[2] < k: raise ValueError(f"{family}: {vision[2]} vision blocks cannot hold {k} deepstack mergers")
        vision[4] = list(range(k))
        build = evmodels._qwen3_vl_config
    else:  # windowed blocks first, then the full-attention ones
        w, f = counts["vision window block"], counts["vision full block"]
        vision[2], vision[4] = w + f, list(range(w, w + f))
        build = evmodels._qwen2_5_vl_config
    s["text"], s["vision"] = tuple(text), tuple(vision)
    return build(s)


def fake_vlm(config, fake: FakeTensorMode):
    "A model built from `config` with fake parameters (as `models.qwen_vlm` builds it, without the memory)."
    with fake: model = AutoModelForImageTextToText.from_config(config, attn_implementation="sdpa")
    model.generation_config = qwen_generation_config()
    return model.train()  # as `step.make_policy` leaves the policy


# --- counting ---------------------------------------------------------------------------------------------------

@dataclass
class Count:
    "FLOPs of one phase, by part."
    total: int = 0
    vision: int = 0  # inside the vision tower (the dummy-vision calls included)
    head: int = 0  # lm_head
    lm_attn: int = 0  # attention kernels outside the vision tower
    dummy: int = 0  # dummy-vision tower calls made (`data.encode_vision`'s rule for an absent modality)

    def __add__(self, o): return Count(*(a + b for a, b in zip(vars(self).values(), vars(o).values())))
    def __mul__(self, k: int): return Count(*(a * k for a in vars(self).values()))
    __rmul__ = __mul__
    def __sub__(self, o): return self + o * -1
    def half(self): return Count(*(a // 2 for a in vars(self).values()))  # exact: callers pass even sums


class Regions:
    "FlopCounterMode's module tracker, replaced: which of `modules` an op runs in, forward and backward."
    def __init__(self, modules: dict):
        self.modules, self.inside = modules, {name: 0 for name in modules}
        self.spans = {name: [] for name in modules}  # autograd sequence numbers created inside each call
        self.handles, self.open = [], {}

    @staticmethod
    def _seq() -> int:
        "The next autograd node's sequence number (one node made to read it)."
        with torch.enable_grad():
            return (torch.zeros((), device="cpu", requires_grad=True) * 1).grad_fn._sequence_nr()

    @property
    def parents(self) -> set:
        # in backward, the node running says where its forward op ran (a checkpoint's recompute runs inside one)
        node = torch._C._current_autograd_node()
        if node is None: return {"Global", *(n for n, k in self.inside.items() if k)}
        s = node._sequence_nr()
        return {"Global", *(n for n, spans in self.spans.items() if any(a < s < b for a, b in spans))}

    def __enter__(self):
        for name, m in self.modules.items():
            def pre(mod, args, name=name):
                self.inside[name] += 1
                self.open[name] = self._seq()
            def post(mod, args, out, name=name):
                self.inside[name] -= 1
                self.spans[name].append((self.open.pop(name), self._seq()))
            self.handles += [m.register_forward_pre_hook(pre), m.register_forward_hook(post)]
        return self

    def __exit__(self, *exc):
        for h in self.handles: h.remove()
        self.handles = []


class Counter:
    "Counts the FLOPs of phases run on one fake model, attributed to the vision tower, lm_head and attention."
    def __init__(self, model, shapes: ShapesOnly):
        self.model, self.shapes = model, shapes

    @contextlib.contextmanager
    def count(self, out: list):
        fc = FlopCounterMode(display=False, custom_mapping={SDPA[0]: sdpa_flop, SDPA[1]: sdpa_backward_flop,
                                                            aten.convolution_backward: conv_backward_flop})
        # attribution by autograd node, not module hooks: a vision tower's output (a ModelOutput) gets no grad hook
        fc.mod_tracker = Regions({"vision": self.model.model.visual, "head": self.model.lm_head})
        calls, inner = [0], evdata.dummy_vision_inputs
        def counted(model):
            calls[0] += 1
            return inner(model)
        evdata.dummy_vision_inputs = counted
        rules = [(n, getattr(modeling_qwen3_5, n)) for n in ("torch_chunk_gated_delta_rule",
                                                              "torch_recurrent_gated_delta_rule")]
        for n, _ in rules: setattr(modeling_qwen3_5, n, delta_rule_stand_in)
        DeltaRule.counter = fc
        try:
            with fc, self.shapes: yield  # shapes on top: a fake op passes the counter, then the fake mode
        finally:
            evdata.dummy_vision_inputs = inner
            for n, f in rules: setattr(modeling_qwen3_5, n, f)
            DeltaRule.counter = None
        c = fc.get_flop_counts()
        total = lambda d: sum(d.values())
        attn = lambda d: sum(v for op, v in d.items() if op in SDPA or op == DELTA)
        g, vis = c.get("Global", {}), c.get("vision", {})
        out.append(Count(total(g), total(vis), total(c.get("head", {})), attn(g) - attn(vis), calls[0]))


def fake_empty(shape, fake: FakeTensorMode, dtype=torch.float32) -> torch.Tensor:
    "A fake tensor (pixels, cached keys: shapes are all a FLOP count reads)."
    with fake: return torch.empty(shape, dtype=dtype, device="cpu")


def head_dim(tc) -> int:
    "Per-head width of a text config (Qwen2.5-VL's has no `head_dim`: hidden / heads)."
    return getattr(tc, "head_dim", None) or tc.hidden_size // tc.num_attention_heads


def decode_step(counter: Counter, fake, n: int, context: int) -> Count:
    "One `generate` step: n rows of one token, against a cache of context - 1 positions, logits of the last."
    model = counter.model
    tc = model.config.get_text_config()
    cache = DynamicCache(config=tc)
    with counter.shapes:
        for i, (layer, block) in enumerate(zip(cache.layers, model.model.language_model.layers)):
            if isinstance(layer, LinearAttentionCacheLayerMixin):  # Qwen3.5's Gated DeltaNet: conv, recurrent states
                d = block.linear_attn
                layer.conv_states[0] = fake_empty((n, d.conv_dim, d.conv_kernel_size), fake)
                layer.recurrent_states[0] = fake_empty((n, d.num_v_heads, d.head_k_dim, d.head_v_dim), fake)
                layer.conv_kernel_size[0] = d.conv_kernel_size
                layer.is_conv_states_initialized[0] = layer.is_recurrent_states_initialized[0] = True
                layer.has_previous_state[0] = True
                continue
            kv = (n, tc.num_key_value_heads, context - 1, head_dim(tc))
            cache.update(fake_empty(kv, fake), fake_empty(kv, fake), i)
    ids = torch.full((n, 1), 100, dtype=torch.long, device="cpu")  # (n, 1) a text token
    pos = torch.full((3, n, 1), context - 1, dtype=torch.long, device="cpu")  # (3, n, 1)
    out = []
    with torch.no_grad(), counter.count(out):
        model(input_ids=ids, attention_mask=torch.ones(n, context, dtype=torch.long, device="cpu"),
              position_ids=pos, use_cache=True, logits_to_keep=1, **{_cache_kw(model): cache})
    return out[0]


def decode_sum(counter, fake, n: int, first: int, last: int, every: bool = False) -> Count:
    "Decode steps at contexts first..last: counted at both ends and summed (linear in the context), or every one."
    if every: return sum((decode_step(counter, fake, n, c) for c in range(first, last + 1)), Count())
    steps = last - first + 1
    return ((decode_step(counter, fake, n, first) + decode_step(counter, fake, n, last)) * steps).half()


class _Engine:
    "Stands in for `HFEngine` so its prefill code runs as is; `generate` (sampling) is counted by `decode_sum`."
    def _run(self, model, P: int, gc, sampler, **kw):
        self.P, self.kw = P, kw  # counted after the engine returns (counters do not nest)
        return None, None


def rollout(counter: Counter, fake, prompt, G: int, T: int, shared: bool, every: bool = False) -> tuple:
    "The HF engine's rollout of one group: (prefill, decode) counts, the tower inside the prefill's."
    model, eng, out = counter.model, _Engine(), []
    with torch.no_grad(), counter.count(out):
        (HFEngine._shared if shared else HFEngine._naive)(eng, model, collate([prompt], pad_id=0), G, None)
    P, n = eng.P, eng.kw["input_ids"].shape[0]
    if shared:  # generate's first step: the last prompt token on each of the G rows (the prefill's tail)
        out.append(decode_step(counter, fake, n, P))
    else:  # generate's first forward: the prefill of G prompt copies (the tower on G clips)
        with torch.no_grad(), counter.count(out):
            model(**eng.kw, use_cache=True, logits_to_keep=1,
                  **{_cache_kw(model): DynamicCache(config=model.config.get_text_config())})
    return sum(out, Count()), decode_sum(counter, fake, n, P + 1, P + T - 1, every)


def count_step(model, fake, shapes, prompt, T: int, G: int, chunk: int, every_decode: bool = False) -> dict:
    "Every phase of one group's step, both paths (`shared` False / True), the update with checkpointing off / on."
    counter = Counter(model, shapes)
    g = torch.Generator(device="cpu").manual_seed(0)
    ids = torch.randint(100, 20000, (G, T), generator=g, device="cpu").tolist()
    groups = [[Trajectory(x, "", reward=float(i % 2)) for i, x in enumerate(ids)]]
    adv = torch.randn(G, generator=g, device="cpu")  # (G,)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # optimizer work is element-wise: no FLOPs counted
    out = dummy_flops(counter)
    for shared in (False, True):
        prefill, out[shared, "rollout decode"] = rollout(counter, fake, prompt, G, T, shared, every_decode)
        out[shared, "rollout vision"] = Count(prefill.vision, prefill.vision, dummy=prefill.dummy)
        out[shared, "rollout prefill"] = prefill - out[shared, "rollout vision"]
        _, mbs = step_micro_batches([prompt], groups, adv, chunk, pad_id=0)
        fn, res = PrefixLogp(model, shared), []
        with torch.no_grad(), counter.count(res):  # `grpo_update`'s reference / old log-prob loop
            for mb in mbs: fn(mb)
        out[shared, "logp"] = res[0]
        for ckpt in (False, True):
            if ckpt: enable_checkpointing(model)  # the trainer's gradient_checkpointing (`step.make_policy`)
            res = []
            try:
                with counter.count(res):
                    grpo_update(model, [prompt], groups, adv, opt, micro_batch_size=chunk, pad_id=0,
                                shared_prefix=shared)
            finally: disable_checkpointing(model)
            out[shared, "update", ckpt] = res[0]
    return out


def dummy_flops(counter: Counter) -> dict:
    "One dummy-vision tower call (one merge window, `data.dummy_vision_inputs`): no grad, trained, recomputed."
    model, out = counter.model, {}
    for mode in ("no grad", "trained", "checkpointed"):
        if mode == "checkpointed": enable_checkpointing(model)
        res = []
        try:
            with torch.set_grad_enabled(mode != "no grad"), counter.count(res):
                feats = model.get_image_features(*evdata.dummy_vision_inputs(model), return_dict=True)
                y = 0 * evdata._features_mean(feats)  # as `data.encode_vision` ties it to the loss
                if mode != "no grad": y.backward()
        finally: disable_checkpointing(model)
        out["dummy", mode] = Count(res[0].total)
    return out


def combine(runs: dict, full: dict[str, int], base: dict[str, int]) -> dict:
    "F(full) = F(base) + sum over kinds (n_full - n_base) * (F(base + 1 of the kind) - F(base)), per entry."
    b = runs[None]
    return {k: b[k] + sum(((runs[kind][k] - b[k]) * (full[kind] - base[kind]) for kind in full), Count())
            for k in b}


# --- the least --------------------------------------------------------------------------------------------------

MATMULS = (torch.nn.Linear, torch.nn.Conv3d, torch.nn.Conv1d)  # Conv1d: Qwen3.5's depthwise conv (2 x weights / token)


def matmul_weights(model) -> dict[str, int]:
    "Matmul weights applied per token: decoder layers, lm_head, vision per patch, vision per merged token."
    out = dict(body=0, head=0, vis_embed=0, vis_patch=0, vis_merged=0)
    lm, vis = model.model.language_model, model.model.visual
    parts = [(model.lm_head, "head"), (lm.layers, "body"), (vis.patch_embed, "vis_embed"), (vis.blocks, "vis_patch"),
             (vis.merger, "vis_merged"), *[(m, "vis_merged") for m in getattr(vis, "deepstack_merger_list", [])]]
    seen = set()
    for mod, part in parts:
        for m in mod.modules():
            if isinstance(m, MATMULS):
                out[part] += m.weight.numel()
                seen.add(m)
    missed = [n for n, m in model.named_modules()
              if isinstance(m, MATMULS) and m not in seen]
    if missed: raise ValueError(f"matmul_weights: no part for {missed}")
    return out


def vision_segments(config, grid: tuple[int, int, int], kind: str) -> list[int]:
    "Patches in each attention segment of a clip: a frame pair; Qwen2.5-VL's windowed blocks: each window."
    t, h, w = grid
    vc = config.vision_config
    if kind != "vision window block": return [h * w] * t
    m = vc.spatial_merge_size
    win = vc.window_size // vc.patch_size // m  # window side in merged cells
    sides = lambda n: [min(win, n - i) for i in range(0, n, win)]
    return [a * b * m * m for a in sides(h // m) for b in sides(w // m)] * t


def least_step(config, weights: dict, kinds: dict[str, int], grid, P: int, T: int, G: int) -> dict:
    "The least FLOPs of each phase of one group (the module docstring's formulas), naive (False) and shared (True)."
    tc, vc = config.get_text_config(), config.vision_config
    V_p = grid[0] * grid[1] * grid[2]
    V_m = V_p // vc.spatial_merge_size**2
    vis = (2 * (weights["vis_embed"] + weights["vis_patch"]) * V_p + 2 * weights["vis_merged"] * V_m
           + 4 * vc.hidden_size * sum(n * sum(s * s for s in vision_segments(config, grid, k))
                                      for k, n in kinds.items() if k.startswith("vision")))
    types = getattr(tc, "layer_types", None) or ["full_attention"] * tc.num_hidden_layers
    if len(types) != tc.num_hidden_layers or set(types) - {"full_attention", "linear_attention"}:
        raise ValueError(f"least_step: layer kinds {sorted(set(types))} of {len(types)} layers; counted: full "
                         f"attention and Qwen3.5's linear attention over all {tc.num_hidden_layers}")
    A = 4 * types.count("full_attention") * tc.num_attention_heads * head_dim(tc)  # per query-key pair: QK^T and AV
    # Qwen3.5's Gated DeltaNet layers: the delta rule per token (`delta_rule_flop`), whatever its context
    D = types.count("linear_attention") * (delta_rule_flop(1, 1, tc.linear_num_value_heads, tc.linear_key_head_dim,
                                                           tc.linear_value_head_dim) if "linear_attention" in types else 0)
    causal = lambda n: n * (n + 1) // 2
    lm = lambda tokens, logits, pairs: Count(2 * weights["body"] * tokens + 2 * weights["head"] * logits + A * pairs
                                             + D * tokens, head=2 * weights["head"] * logits, lm_attn=A * pairs + D * tokens)
    V = Count(vis, vis)
    decode_pairs = G * (causal(P + T - 1) - causal(P))  # contexts P + 1 ... P + T - 1
    out = {}
    for shared in (False, True):
        k = 1 if shared else G  # prompts through the language model
        out[shared, "rollout vision"] = V
        out[shared, "rollout prefill"] = lm(k * P, G, k * causal(P))
        out[shared, "rollout decode"] = lm(G * (T - 1), G * (T - 1), decode_pairs)
        out[shared, "logp"] = V + lm(k * P + G * (T - 1), G * T, k * causal(P) + decode_pairs)
        # trained: 3 x the forward, but the pixels need no gradient (the patch embedding: weight gradient only)
        no_dx = 2 * weights["vis_embed"] * V_p
        out[shared, "update", False] = out[shared, "update", True] = out[shared, "logp"] * 3 - Count(no_dx, no_dx)
    return out


# --- report -----------------------------------------------------------------------------------------------------

def gflop(x: int) -> str:
    g = x / 1e9
    return f"{g:,.0f}" if abs(g) >= 100 else f"{g:.2f}"


def phase_part(c: Count, part: str) -> int:
    "A phase's FLOPs: all, the vision tower's, or the rest (the language model: decoder layers, lm_head)."
    return {"all": c.total, "vision": c.vision, "lm": c.total - c.vision}[part]


def gap_causes(ex: dict, least: dict, step, shared: bool, n_logp: int, updates: int) -> dict:
    "Executed - least of the step (checkpointing on), split by cause."
    e_on, e_off, l = step(ex, shared, True), step(ex, shared, False), step(least, shared, False)
    no_grad_calls = ex[shared, "rollout vision"].dummy + ex[shared, "logp"].dummy * n_logp
    dummy = (no_grad_calls * ex["dummy", "no grad"].total
             + ex[shared, "update", False].dummy * updates * ex["dummy", "trained"].total)
    c = {"recompute under checkpointing (the update's blocks forwarded twice)": e_on.total - e_off.total,
         "vision tower beyond once per clip and pass": e_off.vision - dummy - l.vision,
         "dummy-vision tower calls (the absent image modality)": dummy,
         "lm_head beyond one row per sampled / scored token": e_off.head - l.head,
         "attention beyond the least (shared: masked kernels over the completions' full rectangle)":
             e_off.lm_attn - l.lm_attn}
    c["other (tokens beyond the least: the last prompt token on every rollout row, the naive path's last "
      "completion token fed in; rope)"] = e_on.total - l.total - sum(c.values())
    c["mismatch pass (only in a step without signal; then one log-prob pass)"] = 0
    return c


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="qwen3_vl", choices=COUNTED)
    ap.add_argument("--size", default="8b", help="a size of models.VLM_SHAPES (random weights: shapes only)")
    ap.add_argument("--frames", type=int, default=128)
    ap.add_argument("--res", type=int, default=512, help="frame side in pixels (a multiple of patch x merge)")
    ap.add_argument("--G", type=int, default=8, help="completions per prompt")
    ap.add_argument("--new-tokens", type=int, default=512, help="tokens per completion (T)")
    ap.add_argument("--chunk", type=int, default=4, help="completions per update micro-batch")
    ap.add_argument("--groups", type=int, default=1, help="prompts (groups) per step; every phase scales with it")
    ap.add_argument("--updates", type=int, default=1, help="updates_per_batch: > 1 adds the old log-prob pass")
    ap.add_argument("--beta", type=float, default=0.0, help="KL coefficient: > 0 adds the reference log-prob pass")
    ap.add_argument("--verify", action="store_true", help="also count the full depth directly and assert it equals "
                    "the scaled count")
    ap.add_argument("--verify-decode", action="store_true", help="with --verify: count every decode step (not the "
                    "two ends summed) in the direct count")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    shapes = ShapesOnly()
    full, base = block_counts(a.family, a.size), base_counts(a.family, a.size)
    full_model = fake_vlm(vlm_config(a.family, a.size, full), fake)  # its weights and the prompt's layout
    prompt = bench_step.synthetic_video_prompt(full_model, a.frames, a.res)
    prompt = replace(prompt, pixel_values_videos=fake_empty(prompt.pixel_values_videos.shape, fake))
    P, T, G = prompt.prompt_len, a.new_tokens, a.G
    grid = tuple(int(x) for x in prompt.video_grid_thw[0])

    runs = {}
    for kind in [None, *full]:  # the base depth, then one block more of each kind
        counts = dict(base) if kind is None else {**base, kind: base[kind] + 1}
        model = fake_vlm(vlm_config(a.family, a.size, counts), fake)
        runs[kind] = count_step(model, fake, shapes, prompt, T, G, a.chunk)
    ex = combine(runs, full, base)
    checks = []
    if a.verify:
        direct = count_step(full_model, fake, shapes, prompt, T, G, a.chunk, every_decode=a.verify_decode)
        bad = {k: (ex[k], direct[k]) for k in ex if ex[k] != direct[k]}
        assert not bad, f"scaled != direct full-depth count: {bad}"
        every = ", every decode step counted" if a.verify_decode else ""
        checks.append(f"scaling check: the counts at depth {base} and one block more, scaled to {full}, equal "
                      f"the direct full-depth count{every} ({len(ex)} phase counts, exact)")

    w = matmul_weights(full_model)
    least = least_step(full_model.config, w, full, grid, P, T, G)
    # the shared path runs the tower once per clip and pass: its count must equal the least's formula exactly
    for key, d in (((True, "rollout vision"), 0), ((True, "logp"), ex["dummy", "no grad"].total),
                   ((True, "update", False), ex["dummy", "trained"].total)):
        e, l = ex[key], least[key]
        assert e.vision - e.dummy * d == l.vision, f"{key}: vision tower {e.vision} - dummy != least {l.vision}"
    ex = {k: v if k[0] == "dummy" else v * a.groups for k, v in ex.items()}  # a dummy call's FLOPs stay per call
    least = {k: v * a.groups for k, v in least.items()}
    n_logp = int(a.updates > 1) + int(a.beta > 0)  # log-prob passes in the step

    def step(d, shared, ckpt):
        return (d[shared, "rollout vision"] + d[shared, "rollout prefill"] + d[shared, "rollout decode"]
                + d[shared, "logp"] * n_logp + d[shared, "update", ckpt] * a.updates)

    def row(name, value):
        cells = []
        for shared in (False, True):
            e, l = value(ex, shared), value(least, shared)
            cells += [gflop(e), gflop(l), f"{e / l:.2f}x" if l else "-"]
        print(f"| {name} | " + " | ".join(cells) + " |")

    n_vis = sum(n for k, n in full.items() if k.startswith("vision"))
    layers = full.get("text layer") or f"{full['linear layer'] + full['attention layer']} ({full['linear layer']} Gated DeltaNet, {full['attention layer']} full attention)"
    print(f"{a.family} {a.size}: {layers} decoder layers, {n_vis} vision blocks; matmul weights "
          f"N_b {w['body'] / 1e9:.3f} B, N_h {w['head'] / 1e9:.3f} B, "
          f"N_vp {(w['vis_embed'] + w['vis_patch']) / 1e6:.0f} M (patch embedding {w['vis_embed'] / 1e6:.1f} M), "
          f"N_vm {w['vis_merged'] / 1e6:.0f} M")
    print(f"{a.groups} group(s) of G = {G}; prompt {P} tokens ({a.frames} frames at {a.res} x {a.res}: grid "
          f"{list(grid)}); T = {T}; update micro-batches of {a.chunk}; updates {a.updates}, beta {a.beta}")
    print()
    print("| phase | naive executed GFLOP | naive least | naive ratio | shared executed GFLOP | shared least | "
          "shared ratio |")
    print("|---|---|---|---|---|---|---|")
    row("rollout: vision tower", lambda d, s: d[s, "rollout vision"].total)
    row("rollout: prefill (language model)", lambda d, s: d[s, "rollout prefill"].total)
    row(f"rollout: decode ({T - 1} steps x G)", lambda d, s: d[s, "rollout decode"].total)
    note = f"x {n_logp} in this step" if n_logp else "none in this step: updates 1, beta 0"
    for part, name in (("vision", "vision tower"), ("lm", "language model")):
        row(f"log-prob pass ({note}): {name}", lambda d, s: phase_part(d[s, "logp"], part))
    for ckpt in (False, True):
        for part, name in (("vision", "vision tower"), ("lm", "language model")):
            row(f"update, checkpointing {'on' if ckpt else 'off'}: {name}",
                lambda d, s: phase_part(d[s, "update", ckpt], part))
    for ckpt in (False, True):
        row(f"**step, checkpointing {'on' if ckpt else 'off'}**", lambda d, s: step(d, s, ckpt).total)
    print()
    print("Executed - least of the step, checkpointing on, by cause: GFLOP (share of the gap)")
    print()
    print("| cause | naive | shared prefix |")
    print("|---|---|---|")
    causes = {s: gap_causes(ex, least, step, s, n_logp, a.updates) for s in (False, True)}
    gaps = {s: step(ex, s, True).total - step(least, s, True).total for s in (False, True)}
    for name in causes[True]:
        print(f"| {name} | " + " | ".join(f"{gflop(causes[s][name])} ({100 * causes[s][name] / gaps[s]:.1f}%)"
                                          for s in (False, True)) + " |")
    print(f"| **executed - least** | {gflop(gaps[False])} | {gflop(gaps[True])} |")
    print()
    naive_least, shared_least = step(least, False, True).total, step(least, True, True).total
    print(f"naive least - shared least: {gflop(naive_least - shared_least)} GFLOP (the prompt through the language "
          f"model {G} times a pass instead of once); executed naive / shared, checkpointing on: "
          f"{step(ex, False, True).total / step(ex, True, True).total:.2f}x")
    for line in checks: print(line)
    print(f"counted in {time.perf_counter() - t0:.0f} s ({shapes.stub_reads} reads of a fake scalar stubbed)")
    print(f"update flop ratio: {ex[True, 'update', True].total / least[True, 'update', True].total:.2f}")


if __name__ == "__main__":
    main()
