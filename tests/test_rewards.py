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
