"bench/flops.py at a small shape: its depth-scaled count equals the direct full-depth count; the ratio line ends it."
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_flops_scaled_equals_direct_and_prints_the_ratio(capsys):
    spec = importlib.util.spec_from_file_location("bench_flops", ROOT / "bench" / "flops.py")
    flops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(flops)
    # small, not tiny: tiny's 2 decoder layers and 1 vision block are the counted depths themselves (nothing scaled)
    # one micro-batch per group (the default 8B run covers a group in two chunks): every pass costs a few seconds
    flops.main(["--size", "small", "--frames", "4", "--res", "64", "--new-tokens", "4", "--G", "2", "--chunk", "2",
                "--verify", "--verify-decode"])  # asserts scaled == direct, every decode step counted
    lines = capsys.readouterr().out.strip().splitlines()
    assert any(l.startswith("scaling check:") and "every decode step counted" in l for l in lines)
    table = [l for l in lines if l.startswith("| **step, checkpointing on**")]
    assert len(table) == 1 and len(table[0].split("|")) == 9  # phase + 6 columns
    last = lines[-1].split()
    assert last[:3] == ["update", "flop", "ratio:"] and float(last[3]) >= 1.0
