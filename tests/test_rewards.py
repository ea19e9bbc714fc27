"""What the rewards notebook cannot show: code run in a subprocess (timeouts, process groups, isolation)
and the math timeout from worker threads."""
import os, subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from easyvideor1.rewards import (MathTimeout, MathVerifier, compute_score, compute_scores, run_python_tests)


def test_tests_run_out_of_process(tmp_path):
    "A program's side effects (globals, files outside its folder, environment, exit) never reach the scorer's process."
    marker = tmp_path / "touched"
    code = f"import os\nos.environ['EVR1_LEAK'] = '1'\nopen('mine', 'w').close()\ndef f(): return 2"
    assert run_python_tests(code, ["assert f() == 2", "assert f() == 3"]) == 0.5  # its own folder is writable
    outside = f"def f():\n    open({str(marker)!r}, 'w').close()\n    return 2"
    assert run_python_tests(outside, ["assert f() == 2"]) == 0.0 and not marker.exists()  # confined: nothing outside (issue 18)
    assert "EVR1_LEAK" not in os.environ
    assert run_python_tests("import sys\nsys.exit(3)", ["assert True"]) == 0.0
    assert run_python_tests("def f(): return 1", ["import os; os._exit(0)", "assert f() == 1"]) == 0.0


def test_hanging_tests_time_out_keeping_earlier_passes():
    "An infinite loop in one test is cut at the deadline; tests that passed before it still count."
    code = "def f(): return 1\ndef spin():\n    while True: pass"
    rate = run_python_tests(code, ["assert f() == 1", "spin()", "assert f() == 1"], timeout=1.0)
    assert rate == pytest.approx(1 / 3)  # returning at all means the loop was cut


def test_timeout_kills_the_whole_process_group():
    "A program that starts its own child process cannot leave it running after the timeout."
    code = "import os, time\nif os.fork() == 0:\n    time.sleep(300)\ntime.sleep(300)"
    assert run_python_tests(code, ["assert True"], timeout=2.0) == 0.0
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "easyvideor1 code harness" not in ps  # the harness's command line names it; none of its processes is left


def test_code_scorer_uses_tests_when_given():
    gt = "def add(a, b):\n    return a + b"
    resp = "<answer>def add(a, b): return a - b</answer>"
    assert compute_score(resp, gt, "code")["accuracy"] == 1.0  # structure matches
    assert compute_score(resp, gt, "code", tests=["assert add(1, 2) == 3"])["accuracy"] == 0.0  # behaviour does not


def test_math_timeout_off_the_main_thread_then_recovers():
    "From a worker thread a slow check raises MathTimeout at the deadline; the killed worker is replaced."
    v = MathVerifier(timeout=0.3)
    out = {}

    def work():
        try: v("(x+1)^{400}", "(x+2)^{400}")
        except MathTimeout as e: out["timeout"] = e
        out["after"] = v("\\frac{1}{2}", "0.5", timeout=60)

    t = threading.Thread(target=work)
    t.start(); t.join(120)
    try:
        assert isinstance(out.get("timeout"), MathTimeout)
        assert out["after"] is True
    finally:
        v.close()


def test_math_scorer_from_a_thread_pool():
    "The math scorer is safe from several threads at once (math-verify's own timeout is not)."
    cases = [(r"<answer>\frac{1}{\sqrt{2}}</answer>", r"\frac{\sqrt{2}}{2}", 1.0), ("<answer>(x+1)^2</answer>", "x^2+2x+1", 1.0),
             ("<answer>x^2</answer>", "x^3", 0.0), ("<answer>0.5</answer>", r"\frac{1}{2}", 1.0)]
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(lambda c: compute_score(c[0], c[1], "math")["accuracy"], cases))
    assert got == [c[2] for c in cases]


def test_math_timeout_is_counted_not_silent(monkeypatch):
    "A timeout inside a batch is a counted, warned scorer error."
    import easyvideor1.rewards as R
    slow = MathVerifier(timeout=0.2)
    monkeypatch.setattr(R, "_MATH_VERIFIER", slow)
    R._math_equal.cache_clear()
    try:
        with pytest.warns(R.RewardWarning, match="MathTimeout"):
            scores, stats = compute_scores(["<answer>(x+2)^{400}</answer>", "<answer>2</answer>"],
                                           ["(x+1)^{400}", "2"], ["math", "math"])
        assert stats.errors == {"math": 1} and stats.error_indices == [0]
        assert scores[1]["accuracy"] == 1.0
    finally:
        slow.close()


def test_math_worker_death_is_reported_then_replaced():
    "A worker killed from outside (e.g. for memory) raises once, naming the cause; the next call starts a new one."
    v = MathVerifier(timeout=60, restart_every=2)
    try:
        assert v("2", "4/2") is True
        os.kill(v._proc.pid, 9)
        with pytest.raises(RuntimeError, match="worker exited"):
            v("3", "6/2")
        assert v._proc is None
        assert v("3", "6/2") is True
        first = v._proc.pid
        assert v("x^2", "x*x") is True
        assert v("1/2", "0.5") is True and v._proc.pid != first  # restarted after restart_every checks
    finally:
        v.close()


PAPER_BUGS = [  # PAPER.md's list of the original's bugs (and issue 17's), each must stay fixed
    ("multiple choice", "B", "<answer>It is a rainy scene, so B</answer>", 1.0),  # the article 'a' read as option A
    ("multiple choice", "B", "<answer>I think B</answer>", 1.0),  # read as 'I'
    ("numerical", "100", "<answer>one hundred</answer>", 1.0),  # read as 101
    ("numerical", "1000", "<answer>1e3</answer>", 1.0),  # read as 1
    ("regression", "11.4", "<answer>11</answer>", 1.0),  # exact match in one path
    ("tracking", '{"boxes": {"0": [0, 0, 10, 10], "1": [5, 0, 15, 10]}}', '<answer>{"boxes": {"0": [0, 0, 10, 10]}}</answer>', 0.5),
    ("spatial-temporal grounding", '{"time": [1, 3], "boxes": {"1": [0, 0, 4, 4], "2": [0, 0, 4, 4]}}',
     '<answer>{"time": [1, 3], "boxes": {"1": [0, 0, 4, 4]}}</answer>', 0.75),  # boxes averaged over predicted frames only
    ("open-ended", "enteric", "<answer>Enteric</answer>", 1.0),  # capped at 0.667 by ROUGE-2
    ("open-ended", "红色的汽车", "<answer>红色的汽车</answer>", 1.0),  # non-ASCII scored 0
    ("multiple choice", "B", "B", 1.0),  # issue 17: tagless responses are judged whole
    ("multiple choice", "B", "<think>so B</think>", 1.0),  # a think-only response: its content
    ("boolean", "yes", "<answer>Yes", 1.0), ("boolean", "yes", "< answer >Yes< / answer >", 1.0),  # unclosed, spaced tags
    ("numerical", "3.14", "<answer>3.14159</answer>", 1.0), ("numerical", "4.0", "<answer>4.005</answer>", 1.0),
    ("numerical", "3", "<answer>3.4</answer>", 0.0),  # an integer ground truth asks for the integer
    ("temporal grounding", '{"time": [10, 20]}', '<answer>{"time": ["10", "20"]}</answer>', 1.0),
    ("open-ended", "A cat jumps onto the table.", "<answer>cats jumping on tables</answer>", (0.6 + 0.25 + 0.6) / 3),
]


@pytest.mark.parametrize("ptype,gt,resp,want", PAPER_BUGS)
def test_known_bugs_stay_fixed(ptype, gt, resp, want):
    assert compute_score(resp, gt, ptype)["accuracy"] == pytest.approx(want, abs=1e-9)


def test_trainer_reward_under_strict_format():
    "The trainer's call: well-formed answers unchanged; tagless ones format 0 (accuracy from the text, or 0 with lenient=False)."
    texts = ["<answer>B</answer>", "<think>x</think><answer>C</answer>", "B", "<answer>B", "no idea"]
    scores, _ = compute_scores(texts, ["B"] * 5, ["multiple choice"] * 5, [{"options": ["A. x", "B. y", "C. z"]}] * 5, strict_format=True)
    assert [(s["accuracy"], s["format"]) for s in scores] == [(1.0, 1.0), (0.0, 1.0), (1.0, 0.0), (1.0, 0.5), (0.0, 0.0)]
    old, _ = compute_scores(texts, ["B"] * 5, ["multiple choice"] * 5, strict_format=True, lenient=False)
    assert [s["overall"] for s in old] == pytest.approx([1.0, 0.1, 0.0, 0.0, 0.0])


def test_an_exception_is_counted_never_a_silent_zero():
    with pytest.warns(Warning, match="holds no number"):
        scores, stats = compute_scores(["no tag at all"], ["unknown"], ["numerical"])  # even without an answer tag
    assert stats.errors == {"numerical": 1} and stats.error_indices == [0]
