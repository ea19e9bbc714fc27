"""What does a checkpoint's answer position hold? `letter_probe` (`09c_warmstart`) on a run's training clips.

For each run folder (or checkpoint folder) given, loads the newest checkpoint's model, takes the first `--n` training
clips of each multiple-choice data source of the run's suite, and prints per source: p(right letter), the spread of
p(first letter) over clips, the gap between the mean head inputs of clips with different answers (~0 when the answer
position does not carry the clip's answer) and their spread within an answer. A hand-over whose colour gap is small
leaves GRPO to build the difference in the layers that read the clip, the plateau some default runs never left.

    python bench/handover_probe.py runs/grpo-seeds/handover-s2-t1 runs/grpo-seeds/handover-s0-t1
    python bench/handover_probe.py --init runs/grpo-seeds/handover-s2-t1   # and its untrained model
"""
import argparse, json, os, sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def newest_checkpoint(path: Path) -> Path:
    from easyvideor1.checkpoint import checkpoint_dirs  # complete checkpoints only, oldest first
    if (path / "trainer_state.json").exists(): return path
    ckpts = checkpoint_dirs(path)
    if not ckpts: sys.exit(f"{path}: no complete checkpoints/step_* folder and no trainer_state.json")
    return ckpts[-1]


def probe(path: Path, n: int, init: bool = False) -> dict:
    import torch
    from transformers import AutoModelForImageTextToText
    from easyvideor1.config import TrainConfig, contracts
    from easyvideor1.data import read_samples
    from easyvideor1.models import model_family, qwen_processor
    from easyvideor1.rollout import use_released_positions
    from easyvideor1.step import load_prompts
    from easyvideor1.warmstart import letter_probe, probe_summary, option_letters
    ck = newest_checkpoint(path)
    state = json.loads((ck / "trainer_state.json").read_text())
    cfg = TrainConfig(**state["config"])
    if init:  # the run's untrained model: the same family, size and seed
        from easyvideor1.models import model_spec, qwen_vlm
        model = qwen_vlm(*model_spec(cfg.model), seed=cfg.seed)
        state = dict(state, step=0)
    else:
        model = AutoModelForImageTextToText.from_pretrained(ck / "model", dtype=torch.float32)
    family = model_family(model)
    use_released_positions(model)
    processor = qwen_processor(family)
    run = ck.parent.parent
    data = Path(cfg.data) if cfg.data else run / "suite" / "train.jsonl"
    samples = [s for s in read_samples(data) if len(option_letters(s.options)) > 1]
    sources = sorted({s.data_source for s in samples})
    picked = [x for src in sources for x in [s for s in samples if s.data_source == src][:n]]
    vc, ic = contracts(cfg, family)
    prompts, _ = load_prompts(picked, processor, vc, ic)
    return dict(step=state["step"], summary=probe_summary(letter_probe(model, processor, picked, prompts)))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", help="run folders (their newest checkpoint) or checkpoint folders")
    p.add_argument("--n", type=int, default=256, help="training clips per data source")
    p.add_argument("--init", action="store_true", help="also probe each run's untrained model (step 0)")
    a = p.parse_args()
    print("| run | step | source | n | p(right) | spread of p(first) | gap | within |")
    print("|---|---|---|---|---|---|---|---|")
    for r, init in [(r, i) for r in a.runs for i in ([True, False] if a.init else [False])]:
        got = probe(Path(r), a.n, init)
        for src, s in got["summary"].items():
            print(f"| {r} | {got['step']} | {src} | {s['n']} | {s['p_right']:.3f} | {s['spread']:.4f} | {s['gap']:.3f} | {s['within']:.3f} |",
                  flush=True)


if __name__ == "__main__":
    main()
