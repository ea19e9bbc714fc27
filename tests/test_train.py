"""The trainer end to end: the command line, presets, resume from the hand-over, and 2-process runs on CPU.

Exact resume mid-GRPO and every GRPO variant (DAPO, GSPO, Dr. GRPO, CISPO, ...) run in `tests/test_device.py`, through
`bench/gpu_check.py --cpu` under the device guard."""
import json, os, subprocess, sys
from pathlib import Path

import pytest

from easyvideor1.config import load_config
from easyvideor1.synthetic import read_jsonl
from easyvideor1.train import train

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(model="qwen2_5_vl:tiny", synthetic_n=4, synthetic_test_n=2, prompts_per_step=2, group_size=2,
            sft_steps=1, sft_batch_size=2, max_new_tokens=8, eval_every=0, eval_n=2, tensorboard=False,
            lr=1e-2, sft_lr=1e-2, warmup_steps=1, temperature=1.0, synthetic_val_n=1,
            lr_decay_steps=0,  # the decay depends on max_steps, which the resume tests shorten to stop a run early
            dynamic_sampling=False, beta=0.0)  # the default recipe's extra draws and reference pass: tested by gpu_check and the shrunk presets


def _env():
    return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def test_cli_help_lists_every_config_key():
    out = subprocess.run([sys.executable, "-m", "easyvideor1.train", "--help"], capture_output=True, text=True, env=_env())
    assert out.returncode == 0, out.stderr
    for key in ("group_size", "offline_mode", "max_steps", "output_dir", "save_every", "dynamic_sampling", "mask_truncated",
                "overlong_buffer", "overlong_penalty", "dual_clip", "parallel", "reset_momentum", "strict_data"):
        assert f"  {key} (" in out.stdout


def test_cli_help_shows_the_core_keys_first(capsys):
    "`--help` lists TrainConfig's ~25 core keys (its first fields, `config_sections()['core']`) before the sections of the rest."
    import re
    from dataclasses import fields
    from easyvideor1.config import TrainConfig, config_sections, parse_args
    core, names = config_sections()["core"], [f.name for f in fields(TrainConfig)]
    assert 20 <= len(core) <= 30 and names[:len(core)] == core
    assert [k for ks in config_sections().values() for k in ks] == names  # every key in one section, in field order
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    out = capsys.readouterr().out
    listed = re.findall(r"^  (\w+) \(", out, re.M)
    assert listed[:len(core)] == core and sorted(listed) == sorted(names)
    assert out.index("core keys") < out.index("data keys") < out.index("GRPO keys")


def test_cli_rejects_unknown_key(tmp_path):
    out = subprocess.run([sys.executable, "-m", "easyvideor1.train", "max_stepz=1"], capture_output=True, text=True, env=_env())
    assert out.returncode != 0 and "unknown key 'max_stepz'" in out.stderr


def test_tiny_cpu_preset_is_the_embedded_default():
    "configs/tiny-cpu.yaml holds exactly the defaults `python -m easyvideor1.train` runs with."
    from dataclasses import asdict
    from easyvideor1.config import TrainConfig
    assert asdict(load_config(ROOT / "configs" / "tiny-cpu.yaml")) == asdict(TrainConfig())


SCHEDULE = dict(sft_steps=2, max_steps=4, warmup_steps=2, lr_decay_steps=2)  # warm-up, stable and decay in 6 steps


def test_two_process_ddp_leaves_identical_parameters(tmp_path):
    "ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes 2 -m easyvideor1.train ...: same weights, same lr as 1 process."
    out, one = tmp_path / "ddp", tmp_path / "one"
    cfg = dict(TINY, **SCHEDULE, save_every=0)
    args = [f"{k}={v}" for k, v in dict(cfg, output_dir=str(out), tensorboard=True).items()]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "easyvideor1.train", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(_env(), ACCELERATE_USE_CPU="true"), timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    d0, d1 = (out / "params_rank0.sha256").read_text(), (out / "params_rank1.sha256").read_text()
    assert d0 == d1
    metrics = read_jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(6))
    train(load_config(overrides=dict(cfg, output_dir=str(one))))
    lr_one = [m["lr"] for m in read_jsonl(one / "metrics.jsonl")]
    assert [m["lr"] for m in metrics] == pytest.approx(lr_one, rel=1e-12) and lr_one[-1] == 0 and len(set(lr_one)) > 2
    assert (out / "best" / "best.json").exists()  # the validation split picked a checkpoint
    assert (out / "curve.png").exists() and (out / "final.md").exists()
    assert list(out.glob("easyvideor1/events.out.tfevents.*"))  # TensorBoard, config (with its mapping field) included


@pytest.mark.parametrize("preset", sorted(p.name for p in (ROOT / "configs").glob("*.yaml")))
def test_every_preset_loads(preset):
    "Every training preset names only known keys with values of the right type."
    load_config(ROOT / "configs" / preset)


def test_synthetic_suite_follows_its_config(tmp_path):
    "The default suite: trajectories for direction only; a changed suite config remakes the suite, an unchanged one is reused."
    from dataclasses import replace
    from easyvideor1.config import prepare_data
    cfg = load_config(overrides=dict(output_dir=str(tmp_path), synthetic_n=2, synthetic_test_n=1, synthetic_val_n=1))
    train_file, val_file, test_file = prepare_data(cfg, True, lambda: None)
    rows = read_jsonl(train_file)
    assert [(r["problem_id"], r["has_offline_trajectory"]) for r in read_jsonl(val_file)] == [("direction-val-0000", False), ("color-val-0000", False)]
    assert [(r["data_source"], r["has_offline_trajectory"]) for r in rows] == [("synthetic/direction", True)] * 2 + [("synthetic/color", False)] * 2
    assert all(r["options"] == ["A. red", "B. green"] for r in rows if r["data_source"] == "synthetic/color")
    stamp = train_file.stat().st_mtime_ns
    prepare_data(cfg, True, lambda: None)
    assert train_file.stat().st_mtime_ns == stamp  # same config: not regenerated
    prepare_data(replace(cfg, synthetic_offline_tasks=""), True, lambda: None)
    assert all(r["has_offline_trajectory"] for r in read_jsonl(train_file))


def _suite_link(src: Path, dst: Path):
    dst.mkdir(parents=True)
    os.symlink(src / "suite", dst / "suite")


@pytest.fixture(scope="module")
def tiny_suite(tmp_path_factory):
    "One tiny synthetic suite (and frame cache) shared by the variant runs."
    root = tmp_path_factory.mktemp("variants")
    train(load_config(overrides=dict(TINY, output_dir=str(root / "seed"), max_steps=0)))
    return root / "seed"


def test_resume_from_the_hand_over_keeps_its_evaluation(tiny_suite, tmp_path):
    "A run resumed from the hand-over checkpoint keeps the evaluation made there (it precedes that checkpoint), so its final table still has the warm-start column."
    out = tmp_path / "run"
    _suite_link(tiny_suite, out)
    train(load_config(overrides=dict(TINY, output_dir=str(out), max_steps=0)))  # the warm start alone: evaluated and saved at step 1
    hand = TINY["sft_steps"]
    assert [e["step"] for e in read_jsonl(out / "evals.jsonl")] == [0, hand]
    train(load_config(overrides=dict(TINY, output_dir=str(out), max_steps=2, resume=True)))
    assert [e["step"] for e in read_jsonl(out / "evals.jsonl")] == [0, hand, hand + 2]
    assert "after warm start" in (out / "final.md").read_text()
    train(load_config(overrides=dict(TINY, output_dir=str(out), max_steps=2, resume=True)))  # finished: evaluated again, not twice
    assert [e["step"] for e in read_jsonl(out / "evals.jsonl")] == [0, hand, hand + 2]


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_machines_on_one_host(tmp_path):
    "accelerate launch --num_machines 2 --machine_rank 0|1 on loopback, one CPU process each: identical parameters after training."
    out, port = tmp_path / "nodes", _free_port()
    args = [f"{k}={v}" for k, v in dict(TINY, output_dir=str(out), max_steps=2).items()]
    def node(rank):
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", "2", "--num_processes", "2",
               "--machine_rank", str(rank), "--main_process_ip", "127.0.0.1", "--main_process_port", str(port),
               "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "easyvideor1.train", *args]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=dict(_env(), ACCELERATE_USE_CPU="true"))
    procs = [node(0), node(1)]
    logs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(l[-3000:] for l in logs)
    assert (out / "params_rank0.sha256").read_text() == (out / "params_rank1.sha256").read_text()
    assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == [0, 1, 2]


@pytest.mark.parametrize("preset", sorted(p.name for p in (ROOT / "configs").glob("*.yaml")))
def test_every_preset_runs_shrunk(preset, tiny_suite, tmp_path):
    "Each preset with only the model, media, batch and budget shrunk (and the HF engine: vLLM lives in its own venv) trains a warm-start and a GRPO step."
    cfg = load_config(ROOT / "configs" / preset)
    fam = cfg.model.split(":")[0] if ":" in cfg.model else "qwen2_5_vl"
    out = tmp_path / preset
    # a preset with its own suite options makes its own tiny suite (written through the link, the shared one would change)
    if cfg.synthetic_task_options == load_config().synthetic_task_options: _suite_link(tiny_suite, out)
    else: out.mkdir(parents=True)
    shrunk = dict(model=f"{fam}:tiny", video_max_frames=4, video_min_pixels=3136, video_max_pixels=12544, image_min_pixels=3136,
                  image_max_pixels=12544, prompts_per_step=2, group_size=2, max_new_tokens=8, sft_steps=1, sft_batch_size=2,
                  max_steps=1, eval_n=2, eval_every=0, save_every=0, engine="hf", vllm_sleep=False, output_dir=str(out), tensorboard=False,
                  data="", eval_data="", **{k: TINY[k] for k in ("synthetic_n", "synthetic_test_n", "synthetic_val_n")})
    from dataclasses import asdict
    train(load_config(overrides={**asdict(cfg), **shrunk}))
    assert [m["phase"] for m in read_jsonl(out / "metrics.jsonl")] == ["sft", "grpo"]


def test_bad_rows_are_checked_before_the_first_step(tiny_suite, tmp_path):
    "An unknown problem type and a missing clip are skipped and listed (file:line) before training; strict_data refuses at start-up."
    from easyvideor1.validate import ValidationError
    rows = read_jsonl(tiny_suite / "suite" / "train.jsonl")
    bad = [dict(rows[0], problem_id="bad-type", problem_type="interpretive dance"),
           dict(rows[0], problem_id="bad-clip", videos=["videos/missing.mp4"])]
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows + bad))
    cfg = dict(TINY, data=str(data), eval_data=str(tiny_suite / "suite" / "test.jsonl"), media_root=str(tiny_suite / "suite"),
               output_dir=str(tmp_path / "run"), max_steps=1)
    train(load_config(overrides=cfg))
    report = (tmp_path / "run" / "validation-train.md").read_text()
    assert f"train.jsonl:{len(rows) + 1} | unknown problem_type" in report and f"train.jsonl:{len(rows) + 2} | video" in report
    assert "2 skipped" in report
    with pytest.raises(ValidationError, match=f"train.jsonl:{len(rows) + 1}"):
        train(load_config(overrides=dict(cfg, strict_data=True, output_dir=str(tmp_path / "strict"))))


def test_a_failed_run_leaves_no_process_group(tiny_suite, tmp_path, monkeypatch):
    "FSDP2 in one process makes its own group: a run refused at setup and one that crashes after it both destroy it, so the next run in the process starts (a crash once failed every later FSDP2 test of a CI run with 'initialize the default process group twice')."
    import torch.distributed as dist
    import easyvideor1.train as T
    from easyvideor1.validate import ValidationError
    rows = read_jsonl(tiny_suite / "suite" / "train.jsonl")
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows + [dict(rows[0], problem_type="interpretive dance")]))
    cfg = dict(TINY, data=str(data), eval_data=str(tiny_suite / "suite" / "test.jsonl"), media_root=str(tiny_suite / "suite"),
               parallel="fsdp2", max_steps=1)
    with pytest.raises(ValidationError):  # refused in setup_run, after launch made the group
        train(load_config(overrides=dict(cfg, strict_data=True, output_dir=str(tmp_path / "strict"))))
    assert not dist.is_initialized()

    def crash(*a, **k): raise RuntimeError("crashed mid-run")
    monkeypatch.setattr(T, "evaluate_and_keep", crash)  # the first thing a started run does
    with pytest.raises(RuntimeError, match="crashed mid-run"):
        train(load_config(overrides=dict(cfg, output_dir=str(tmp_path / "crash"))))
    assert not dist.is_initialized()


def test_code_rows_pass_their_tests_to_the_scorer():
    "A code row's `tests` reach the reward: a wrong function that compiles no longer earns full marks."
    from easyvideor1.data import Sample
    from easyvideor1.replay import Trajectory
    from easyvideor1.step import score_groups
    s = Sample(id="c0", problem="write f", answer="def f(x): return 2 * x", problem_type="code", data_type="text",
               extra=dict(tests=["assert f(2) == 4"]))
    good, wrong = (Trajectory([1], f"<answer>{c}</answer>") for c in ("def f(x): return 2 * x", "def f(x): return x + 100"))
    scores, _ = score_groups([s], [[good, wrong]])
    assert scores[0][0]["accuracy"] == 1.0 and scores[0][1]["accuracy"] == 0.0


def _letter_prob(smoothing: float, suite: Path, steps: int = 40, uniform: bool = False, lr: float = 3e-3,
                 prior_through: str = "network") -> float:
    "Warm-start a tiny model on one direction clip (answer tokens only); (p(answer letter), p(other letter)) there."
    import torch
    from easyvideor1.data import read_samples
    from easyvideor1.models import qwen_processor, qwen_vlm
    from easyvideor1.config import TrainConfig, contracts
    from easyvideor1.step import load_prompts, offline_groups
    from easyvideor1.warmstart import answer_end, option_targets, sft_update, smoothed_logp, sft_micro_batches
    torch.manual_seed(0)
    samples = [s for s in read_samples(suite / "suite" / "train.jsonl") if s.has_offline][:1] * 2  # one clip: nothing to discriminate
    model, proc = qwen_vlm("qwen2_5_vl", "tiny", seed=0), qwen_processor("qwen2_5_vl")
    vc, ic = contracts(TrainConfig(), "qwen2_5_vl")
    prompts, _ = load_prompts(samples, proc, vc, ic)
    trajs = [g[0] for g in offline_groups(samples, proc.tokenizer, 8)]
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    for _ in range(steps):
        sft_update(model, prompts, trajs, proc, opt, 2, answer_only=True, samples=samples, smoothing=smoothing, max_grad_norm=1.0,
                   uniform=[uniform] * len(trajs), prior_through=prior_through)
    mb = sft_micro_batches(prompts, trajs, proc, 2, answer_only=True)[0]
    ids, w, _ = option_targets(trajs, samples, proc.tokenizer, mb.mask.shape[1], 0.5,  # w = 1 where the other letter goes
                            [answer_end(t, proc.tokenizer) for t in trajs])
    with torch.no_grad(): lp, both = smoothed_logp(model, mb, ids, w)
    p_alt = ((both - lp).exp() * mb.mask).sum() / mb.mask.sum()  # w = 1: both - lp = log p(other letter)
    return float((lp.exp() * mb.mask).sum() / mb.mask.sum()), float(p_alt)


def test_option_smoothing_keeps_the_other_letters_alive(tiny_suite):
    "Plain cross-entropy drives p(answer) to ~1; with smoothing eps the optimum is 1 - eps (the policy still samples the others)."
    (p, q), (ps, qs) = _letter_prob(0.0, tiny_suite), _letter_prob(0.3, tiny_suite)
    assert p > 0.95 and q < 0.01, (p, q)
    assert abs(ps - 0.7) < 0.08 and abs(qs - 0.3) < 0.08, (ps, qs)  # the optimum: p(answer) = 1 - eps, p(other) = eps


@pytest.mark.parametrize("through,lr", [("network", 3e-3), ("rows", 1e-2)])  # the rows alone: a larger step for the same time
def test_format_only_samples_hand_over_undecided(tiny_suite, through, lr):
    """A format-only warm-start sample trains its letter against a uniform target: p(its letter) = p(the other) = 1/2, whatever
    letter it was written with, trained through the whole network or through the letters' output rows alone."""
    p, q = _letter_prob(0.0, tiny_suite, uniform=True, lr=lr, prior_through=through)
    assert abs(p - 0.5) < 0.08 and abs(q - 0.5) < 0.08, (p, q)


def test_format_only_letter_trains_the_output_layer_only(tiny_suite):
    """A format-only sample's uniform letter target is a prior: it reaches the output layer alone, so it cannot teach the
    layers that read the clip to stop reading it (the whole-network version did: colour then took 5x longer to learn)."""
    import torch
    from easyvideor1.data import read_samples
    from easyvideor1.models import qwen_processor, qwen_vlm
    from easyvideor1.config import TrainConfig, contracts
    from easyvideor1.step import load_prompts, offline_groups
    from easyvideor1.warmstart import answer_end, format_only, option_targets, smoothed_logp, sft_micro_batches
    samples = format_only(read_samples(tiny_suite / "suite" / "train.jsonl"), "synthetic/color")[:2]
    assert len(samples) == 2
    model, proc = qwen_vlm("qwen2_5_vl", "tiny", seed=0), qwen_processor("qwen2_5_vl")
    vc, ic = contracts(TrainConfig(), "qwen2_5_vl")
    prompts, _ = load_prompts(samples, proc, vc, ic)
    trajs = [g[0] for g in offline_groups(samples, proc.tokenizer, 8)]
    mb = sft_micro_batches(prompts, trajs, proc, 2, answer_only=True)[0]  # the loss mask holds the letter alone
    ids, w, prior = option_targets(trajs, samples, proc.tokenizer, mb.mask.shape[1], 0.0,
                                   [answer_end(t, proc.tokenizer) for t in trajs], uniform=[True, True])
    assert prior.sum() == 2 and (prior <= mb.mask.bool()).all()  # one letter position per row
    def grads(prior_):
        model.zero_grad(set_to_none=True)
        _, both = smoothed_logp(model, mb, ids, w, prior_)
        (-(both * mb.mask).sum()).backward()
        g = {n: (p.grad.abs().sum().item() if p.grad is not None else 0.0) for n, p in model.named_parameters()}
        inner = sum(v for n, v in g.items() if ".visual." in n or ".layers." in n)
        rows = model.lm_head.weight.grad.abs().sum(1).nonzero().flatten().tolist()  # output rows that moved (tied: embeddings)
        return rows, inner
    letters = sorted({int(ids[0][prior][0]), int(mb.inputs.input_ids[:, -mb.mask.shape[1]:][prior][0])})  # '>A', '>B'
    rows, inner = grads(prior)
    assert rows == letters and inner == 0, (rows, letters, inner)  # the two letters' rows, nothing else
    rows, inner = grads(None)  # the same target through the whole network (the old format-only samples)
    assert len(rows) > 1000 and inner > 0, (len(rows), inner)


def test_format_only_picks_unanswered_multiple_choice_of_its_sources():
    from easyvideor1.data import Sample
    from easyvideor1.warmstart import format_only
    mk = lambda i, src, opts=("A. red", "B. green"), out="": Sample(f"s{i}", "<video>Colour?", "multiple choice", "B", "video",
                                                                     options=list(opts), data_source=src, offline_output=out)
    rows = [mk(0, "synthetic/color"), mk(1, "synthetic/direction"), mk(2, "synthetic/color", out="<answer>B</answer>"),
            mk(3, "synthetic/color", opts=()), mk(4, "synthetic/color")]
    got = format_only(rows, "synthetic/color, other")
    assert [s.id for s in got] == ["s0", "s4"] and all(s.offline_output == "<answer>A</answer>" and s.answer == "B" for s in got)
    assert format_only(rows, "") == [] and rows[0].offline_output == ""  # the data set itself is left as it was


@pytest.mark.parametrize("prior", ["network", "rows"])
def test_format_only_samples_join_the_warm_start_after_its_answer_steps(tiny_suite, tmp_path, prior):
    "Colour clips (no offline trajectory) enter the warm start's batches once its answer-only steps are over; GRPO logs accuracy per source."
    out = tmp_path / "fmt"
    _suite_link(tiny_suite, out)
    train(load_config(overrides=dict(TINY, output_dir=str(out), sft_steps=6, sft_answer_steps=3, sft_batch_size=4, max_steps=1,
                                     sft_format_prior=prior)))
    rows = read_jsonl(out / "metrics.jsonl")
    sft = [r for r in rows if r["phase"] == "sft"]
    assert [r["answer_only"] for r in sft] == [True] * 3 + [False] * 3
    assert all(r["format_only"] == 0 for r in sft[:3]) and sum(r["format_only"] for r in sft[3:]) > 0, [r["format_only"] for r in sft]
    grpo = [r for r in rows if r["phase"] == "grpo"]
    assert grpo and all(0 <= v <= 1 for r in grpo for k, v in r.items() if k.startswith("acc_source/synthetic/"))
    assert any(k.startswith("acc_source/synthetic/") for r in grpo for k in r)


def test_answer_only_batches_stop_at_the_answer(tiny_suite):
    "Answer-only micro-batches are cut after the answer: fewer positions, the same answer log-probs as the whole trajectory."
    import torch
    from easyvideor1.data import read_samples
    from easyvideor1.models import qwen_processor, qwen_vlm
    from easyvideor1.config import TrainConfig, contracts
    from easyvideor1.step import load_prompts, offline_groups
    from easyvideor1.warmstart import answer_span_mask, batch_logp_fn, sft_micro_batches
    samples = [s for s in read_samples(tiny_suite / "suite" / "train.jsonl") if s.has_offline][:3]
    model, proc = qwen_vlm("qwen2_5_vl", "tiny", seed=0), qwen_processor("qwen2_5_vl")
    prompts, _ = load_prompts(samples, proc, *contracts(TrainConfig(), "qwen2_5_vl"))
    trajs = [g[0] for g in offline_groups(samples, proc.tokenizer, 48)]
    cut, = sft_micro_batches(prompts, trajs, proc, 4, answer_only=True)
    full, = sft_micro_batches(prompts, trajs, proc, 4)
    T = full.mask.shape[1]
    span = torch.zeros_like(full.mask)
    for i, t in enumerate(trajs): span[i, T - len(t.ids):] = torch.tensor(answer_span_mask(t, proc.tokenizer), dtype=span.dtype)
    assert cut.mask.shape[1] < T and torch.equal(cut.mask.sum(1), span.sum(1))
    with torch.no_grad(): lp_cut, lp_full = batch_logp_fn(model)(cut), batch_logp_fn(model)(full)
    assert torch.allclose((lp_cut * cut.mask).sum(1), (lp_full * span).sum(1), atol=1e-5)


def test_log_every_thins_tensorboard_not_the_metrics(tiny_suite, tmp_path):
    "log_every=2 over 3 steps: metrics.jsonl has all 3 rows, TensorBoard the steps 1 and 2 (every 2nd, and the last; not 0)."
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    out = tmp_path / "log2"
    _suite_link(tiny_suite, out)
    train(load_config(overrides=dict(TINY, output_dir=str(out), max_steps=2, log_every=2, tensorboard=True)))
    assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == [0, 1, 2]
    steps = []
    for f in out.rglob("events.out.tfevents.*"):  # accelerate writes one file per tracker folder
        ea = EventAccumulator(str(f)); ea.Reload()
        steps += [e.step for tag in ea.Tags()["scalars"] if tag == "lr" for e in ea.Scalars(tag)]  # lr: on every step
    assert sorted(steps) == [1, 2], steps


@pytest.mark.parametrize("threshold,scored", [(-1.0, 1), (0.5, 2)])  # always mix: scored once; conditional: the online first
def test_draw_groups_mixes_offline_and_scores_online_once_unless_conditional(monkeypatch, threshold, scored):
    """Phases 3-5 on a fake engine: a direction prompt gets 3 online answers (1 right of 3) and, in `replace` mode, one
    offline trajectory; a conditional plan (offline_threshold 0.5) still mixes it in (accuracy 1/3 < 0.5) and skips it
    at threshold 0.2. The router runs once per draw, or twice when the mix must read the online accuracy first."""
    import easyvideor1.step as T
    from easyvideor1.data import Sample
    from easyvideor1.rollout import Completion, SamplingConfig
    calls = []
    real = T.compute_scores
    monkeypatch.setattr(T, "compute_scores", lambda texts, *a, **k: (calls.append(len(texts)), real(texts, *a, **k))[1])
    class Engine:
        def generate(self, prompts, sampling):
            return [[Completion([1, 2], f"<answer>{c}</answer>", [-0.1, -0.1], "stop") for c in "ABB"][:sampling.n] for _ in prompts]
    s = Sample("d0", "<video>Which way?", "multiple choice", "A", "video", options=["A. left", "B. right"],
               data_source="synthetic/direction", offline_output="<answer>A</answer>")
    from easyvideor1.models import qwen_processor
    tok = qwen_processor("qwen2_5_vl").tokenizer
    cfg = T.TrainConfig(group_size=4, offline_mode="replace", offline_per_group=1, offline_threshold=threshold)
    off = T.offline_groups([s], tok, cfg.max_new_tokens)
    d = T.draw_groups(Engine(), [s], [None], [None], off, SamplingConfig(n=1), cfg, step=0, rank=0, clock=T.StepClock())
    assert calls == [3] * (scored - 1) + [4], calls  # the online three alone, then the whole group
    assert [t.is_offline for t in d.groups[0]] == [False, False, False, True]
    assert [sc["accuracy"] for sc in d.scores[0]] == [1, 0, 0, 1] and len(d.online[0]) == 3
    assert d.groups[0][0].reward > d.groups[0][1].reward  # rewards set in place
    if threshold > 0:
        cfg2 = T.dataclasses.replace(cfg, offline_threshold=0.2)
        d2 = T.draw_groups(Engine(), [s], [None], [None], off, SamplingConfig(n=1), cfg2, step=0, rank=0, clock=T.StepClock())
        assert [t.is_offline for t in d2.groups[0]] == [False] * 3  # 1/3 >= 0.2: the group keeps its online answers


def test_qwen3_5_resume_is_exact(tiny_suite, tmp_path):
    "Qwen3.5 (hybrid layers) through the trainer: warm start, a GRPO step, a crash before its checkpoint, resume: same weights."
    import shutil
    cfg = dict(TINY, model="qwen3_5:tiny", max_steps=1, eval_n=1)  # checkpoints: the hand-over and the end
    full = tmp_path / "full"
    _suite_link(tiny_suite, full)
    train(load_config(overrides=dict(cfg, output_dir=str(full))))
    res = tmp_path / "resumed"
    shutil.copytree(full, res, symlinks=True)
    shutil.rmtree(sorted((res / "checkpoints").glob("step_*"))[-1])
    (res / "params_rank0.sha256").unlink()
    train(load_config(overrides=dict(cfg, output_dir=str(res), resume=True)))
    assert (res / "params_rank0.sha256").read_text() == (full / "params_rank0.sha256").read_text()
    m_full, m_res = read_jsonl(full / "metrics.jsonl"), read_jsonl(res / "metrics.jsonl")
    assert [m["phase"] for m in m_full] == ["sft", "grpo"] and m_res[-1]["loss"] == m_full[-1]["loss"]
