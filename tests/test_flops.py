"bench/flops.py at a small shape: its depth-scaled count equals the direct full-depth count; the ratio line ends it."
import importlib.util
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[1]


def load_flops():
    spec = importlib.util.spec_from_file_location("bench_flops", ROOT / "bench" / "flops.py")
    flops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(flops)
    return flops


@pytest.mark.parametrize("groups", [1, 2, 6])
def test_conv_backward_is_twice_the_forward_with_groups(groups):
    "A convolution's backward (input and weight gradients) costs twice its forward, grouped (Qwen3.5's conv1d) or not."
    flops = load_flops()
    conv = torch.nn.Conv1d(6, 6, 4, groups=groups, padding=3, bias=False, device="cpu")
    x = torch.randn(2, 6, 10, requires_grad=True, device="cpu")  # (b, C, L)
    fc = FlopCounterMode(display=False, custom_mapping={torch.ops.aten.convolution_backward: flops.conv_backward_flop})
    with fc: conv(x).sum().backward()
    c = fc.get_flop_counts()["Global"]
    assert c[torch.ops.aten.convolution_backward] == 2 * c[torch.ops.aten.convolution] > 0


# qwen3_vl small, not tiny: tiny's 2 decoder layers and 1 vision block are the counted depths themselves (nothing
# scaled). qwen3_5 tiny: 3 Gated DeltaNet layers scaled from 1, the full-attention layer and the vision block not.
@pytest.mark.parametrize("family,size", [("qwen3_vl", "small"), ("qwen3_5", "tiny")])
def test_flops_scaled_equals_direct_and_prints_the_ratio(capsys, family, size):
    flops = load_flops()
    rules = {n: getattr(flops.modeling_qwen3_5, n) for n in ("torch_chunk_gated_delta_rule",
                                                              "torch_recurrent_gated_delta_rule")}
    added, add = [], flops.DeltaRule.add  # the delta-rule stand-in's counts: forward n, backward 2 n
    flops.DeltaRule.add = staticmethod(lambda flop: (added.append(flop), add(flop)))
    # one micro-batch per group (the default 8B run covers a group in two chunks): every pass costs a few seconds
    flops.main(["--family", family, "--size", size, "--frames", "4", "--res", "64", "--new-tokens", "4", "--G", "2",
                "--chunk", "2", "--verify", "--verify-decode"])  # asserts scaled == direct, every decode step counted
    lines = capsys.readouterr().out.strip().splitlines()
    assert any(l.startswith("scaling check:") and "every decode step counted" in l for l in lines)
    table = [l for l in lines if l.startswith("| **step, checkpointing on**")]
    assert len(table) == 1 and len(table[0].split("|")) == 9  # phase + 6 columns
    last = lines[-1].split()
    assert last[:3] == ["update", "flop", "ratio:"] and float(last[3]) >= 1.0
    # transformers' delta-rule functions are back after each count, and the stand-in ran where the family has them
    assert {n: getattr(flops.modeling_qwen3_5, n) for n in rules} == rules
    if family == "qwen3_5":  # prefill and decode (forward) and the update's backward (twice a forward) were counted
        assert added and any(2 * a in added for a in added), added[:10]
    else: assert not added
