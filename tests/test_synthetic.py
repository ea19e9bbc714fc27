"""The synthetic suite from the command line, and its determinism across processes."""
import json, os, subprocess, sys, time
from pathlib import Path

import pytest
import torch

from easyvideor1.synthetic import TASKS, decode_mp4, main, make_suite, read_jsonl, row_media

KEYS = {"problem_id", "problem", "answer", "problem_type", "data_type", "options", "has_offline_trajectory", "offline_output"}


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", MPLBACKEND="Agg")
    return subprocess.run([sys.executable, "-m", "easyvideor1.synthetic", *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def cli_suite(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cli")
    r = run_cli("--out", str(out), "--n-per-task", "2", "--n-test", "1", "--seed", "7")
    assert r.returncode == 0, r.stderr
    assert "problem_type" in r.stdout and "decoded examples" in r.stdout, r.stdout
    for name in TASKS: assert name in r.stdout, f"task {name} missing from the summary:\n{r.stdout}"
    return out


def test_cli_writes_rows_media_and_grid(cli_suite):
    train, test = read_jsonl(cli_suite / "train.jsonl"), read_jsonl(cli_suite / "test.jsonl")
    assert (len(train), len(test)) == (2 * len(TASKS), len(TASKS))
    assert (cli_suite / "examples.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for row in train + test:
        assert KEYS <= set(row), f"{row['problem_id']}: missing {KEYS - set(row)}"
        media = row["videos"] if row["data_type"] == "video" else row["images"]
        assert row["problem"].startswith(f"<{row['data_type']}>"), row["problem_id"]
        assert (cli_suite / media[0]).is_file(), f"{row['problem_id']}: {media[0]} not written"
        assert row["has_offline_trajectory"] == bool(row["offline_output"]), row["problem_id"]
        if row["has_offline_trajectory"]: assert row["offline_output"].endswith(f"<answer>{row['answer']}</answer>")
    assert sum(r["has_offline_trajectory"] for r in train) == len(TASKS)  # default fraction 0.5 of 2 per task
    assert not any(r["has_offline_trajectory"] for r in test)


def test_cli_videos_decode(cli_suite):
    row = next(r for r in read_jsonl(cli_suite / "train.jsonl") if r["data_type"] == "video")
    frames, fps = decode_mp4(cli_suite / row["videos"][0])
    assert frames.dtype == torch.uint8 and tuple(frames.shape) == (8, 3, 112, 112) and fps == 2.0


def test_cli_bad_task_fails(tmp_path):
    with pytest.raises(ValueError, match="unknown task"): main(["--out", str(tmp_path), "--n-per-task", "1", "--tasks", "nope"])


def test_same_seed_same_files_across_processes(cli_suite, tmp_path):
    "The CLI's files (another process) equal an in-process run byte for byte, and decode to equal frames."
    mine = make_suite(tmp_path / "again", n_per_task=2, seed=7, n_test=1)
    for split in ("train", "test"):
        assert (mine / f"{split}.jsonl").read_text() == (cli_suite / f"{split}.jsonl").read_text()
    for row in read_jsonl(mine / "train.jsonl") + read_jsonl(mine / "test.jsonl"):
        (a, fa), (b, fb) = row_media(mine, row), row_media(cli_suite, row)
        assert fa == fb and torch.equal(a, b), f"{row['problem_id']}: decoded frames differ"
        rel = (row.get("videos") or row.get("images"))[0]
        assert (mine / rel).read_bytes() == (cli_suite / rel).read_bytes(), f"{rel}: bytes differ"


def test_other_seed_other_suite(tmp_path):
    a = make_suite(tmp_path / "a", n_per_task=2, seed=1, n_test=0, tasks=["direction", "track"])
    b = make_suite(tmp_path / "b", n_per_task=2, seed=2, n_test=0, tasks=["direction", "track"])
    assert (a / "train.jsonl").read_text() != (b / "train.jsonl").read_text()


def test_answers_parse_per_problem_type(cli_suite):
    for row in read_jsonl(cli_suite / "train.jsonl"):
        a, pt = row["answer"], row["problem_type"]
        if pt == "multiple choice": assert a in [o[0] for o in row["options"]], row["problem_id"]
        elif pt == "numerical": assert a.isdigit(), row["problem_id"]
        elif pt == "boolean": assert a in ("yes", "no"), row["problem_id"]
        else:
            ans = json.loads(a)
            if "time" in ans: assert 0 <= ans["time"][0] < ans["time"][1] <= 4.0, row["problem_id"]
            if pt == "spatial grounding": assert len(ans["boxes"]) == 4
            if pt in ("tracking", "spatial-temporal grounding"):
                assert all(len(b) == 4 for b in ans["boxes"].values()) and ans["boxes"], row["problem_id"]


KILLED_WRITER = """
import os, sys
from pathlib import Path
from easyvideor1 import synthetic
os.replace = lambda *a: os._exit(9)  # killed between the write and the rename: no cleanup runs
synthetic.atomic_write_text(Path(sys.argv[1]), "new")
"""


def test_a_killed_writer_leaves_the_old_file_and_a_temporary_the_sweep_removes(tmp_path):
    from easyvideor1.cache import FrameCache
    from easyvideor1.synthetic import atomic_write_text, sweep_tmp
    target = atomic_write_text(tmp_path / "entries" / "x.json", "old")
    r = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(target)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 9, r.stderr
    left = [p for p in target.parent.iterdir() if p != target]
    assert target.read_text() == "old" and len(left) == 1 and left[0].read_text() == "new"
    assert FrameCache(tmp_path).clean_tmp() == 1 and not left[0].exists()  # the cache's sweep knows the name
    assert sweep_tmp(tmp_path) == 0 and target.read_text() == "old"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_the_sweep_sees_through_zombies_and_reused_pids(tmp_path):
    "A killed writer lingers as a zombie until reaped (CI once kept one long enough to fail the SIGKILL rerun test);"
    "a pid that runs again now belongs to a process that started after the temporary was written."
    from easyvideor1.synthetic import _proc_start, sweep_tmp
    z = subprocess.Popen([sys.executable, "-c", "pass"])  # exits; unreaped until we wait, so a zombie
    t0 = time.time()
    while _proc_start(z.pid)[0] != "Z" and time.time() - t0 < 60: time.sleep(0.01)
    zombie = tmp_path / f".tmp.{z.pid}.abcd.a.txt"; zombie.write_text("half")
    reused = tmp_path / f".tmp.{os.getpid()}.abcd.b.txt"; reused.write_text("half")
    os.utime(reused, (0, 0))  # written in 1970, before this process started: another writer had this pid
    mine = tmp_path / f".tmp.{os.getpid()}.abcd.c.txt"; mine.write_text("half")  # ours, live
    assert _proc_start(z.pid)[0] == "Z"
    assert sweep_tmp(tmp_path) == 2 and [p.name for p in tmp_path.iterdir()] == [mine.name]
    z.wait()
