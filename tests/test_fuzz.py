"""Bad input, tried (issue 17): seeded fuzzing of the annotation loaders and the reward router. Every input gives a
clear error naming the file (and line), a skipped-row entry naming file:line and why, or a score: never a crash of the
run, never a silent zero."""
import json, random, re, warnings
from pathlib import Path

import pytest

from easyvideor1.evaluate import AnnotationError, load_annotations, oracle_response, score_response, to_sample
from easyvideor1.rewards import RewardWarning, ScorerError, UnknownProblemType, compute_score, compute_scores

DEFECTS = Path(__file__).parent / "fixtures" / "benchmarks_defects"
HUGE = "x" * 200_000
WEIRD = [None, True, 0, -7, 1.5, float("nan"), float("inf"), -float("inf"), "", HUGE, "\udcff", [], {}, [1, [2]], {"a": 1},
         "<answer>", "<answer>B", "B", "nan", ["A. x", "A. y"], ["A. x", 3], "['A. x', 'B. y']", "[unclosed"]
FIELDS = ["problem_id", "problem_type", "problem", "options", "solution", "path", "category", "start", "end", "q_type_livesports"]


def _mutate(rng: random.Random, recs: list) -> bytes:
    "One seeded defect: a wrong value, a missing field, a non-object record, truncated JSON or non-UTF-8 bytes."
    recs = json.loads(json.dumps(recs))
    kind = rng.choice(["value", "value", "value", "missing", "record", "truncate", "bytes"])
    i = rng.randrange(len(recs))
    if kind == "value": recs[i][rng.choice(FIELDS)] = rng.choice(WEIRD)
    elif kind == "missing": recs[i].pop(rng.choice(FIELDS), None)
    elif kind == "record": recs[i] = rng.choice(WEIRD)
    data = json.dumps(recs, indent=2).encode("utf-8", "surrogatepass")  # NaN / Infinity literals, lone surrogates
    if kind == "truncate": data = data[:rng.randrange(1, len(data))]
    if kind == "bytes":
        at = rng.randrange(len(data))
        data = data[:at] + rng.choice([b"\xff", b"\xc3", b"\x80\x80", b"\xed\xa0\x80"]) + data[at:]
    return data


@pytest.mark.parametrize("stem", ["livesports3k_qa", "longvideoreason", "videomathqa"])
def test_loader_fuzz_gives_named_errors_or_explained_rows(stem, tmp_path):
    rng = random.Random(stem)
    recs = json.loads((DEFECTS / f"{stem}.json").read_text())
    path = tmp_path / f"{stem}.json"
    outcomes = {"error": 0, "loaded": 0}
    for trial in range(60):
        path.write_bytes(_mutate(rng, recs))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                bench, items, rep = load_annotations(path)
        except AnnotationError as e:  # the whole file cannot be read: the message names it (and the line where there is one)
            assert path.name in str(e), (trial, str(e)[:300])
            assert len(str(e)) < 2000, "error messages quote, they do not dump"
            outcomes["error"] += 1
            continue
        outcomes["loaded"] += 1
        assert rep.loaded + len(rep.skipped) == rep.rows == len(recs), (trial, rep.counts())
        assert len({it.item_id for it in items}) == len(items)
        for s in rep.skipped: assert re.fullmatch(rf"{re.escape(path.name)}:\d+", s["where"]) and s["reason"], s
        for it in items:  # what loads is usable: it scores its own ground truth 100%, and a junk response without raising
            assert score_response(to_sample(it), oracle_response(it))["accuracy"] == 1.0, (trial, it)
            assert 0.0 <= score_response(to_sample(it), _response(rng))["accuracy"] <= 1.0
    assert outcomes["error"] and outcomes["loaded"], outcomes  # both paths were exercised


PIECES = ["<answer>", "</answer>", "< answer >", "< / answer >", "<think>", "</think>", "A", "B", "yes", "no", "{", "}", "[", "]",
          '"time"', '"boxes"', ":", ",", "1e999", "NaN", "nan", "-inf", "3.14159", "\\boxed{", "the answer is", "Response 2", "é",
          "红色", "\x00", "\udcff", " ", "\n", "(", ")", '"10"', "1/0", "10^999", "<svg>", "</svg>", "<p>", "[" * 3000]


def _response(rng: random.Random) -> str:
    if rng.random() < 0.05: return rng.choice([HUGE, "<answer>" + HUGE, "{" * 50_000, "1" * 5000])
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 30)))


GTS = [("multiple choice", "B", {"options": ["A. red", "B. blue (dark)", "C. green"]}), ("numerical", "3.14", {}),
       ("regression", "11.4", {}), ("boolean", "yes", {}), ("temporal grounding", '{"time": [1, 2]}', {}),
       ("spatial grounding", '{"boxes": [0, 0, 10, 10]}', {}), ("spatial-temporal grounding", '{"time": [1, 2], "boxes": {"1": [0, 0, 5, 5]}}', {}),
       ("tracking", '{"boxes": {"0": [0, 0, 1, 1], "1": [1, 1, 2, 2]}}', {}), ("open-ended", "A cat jumps onto the table.", {}),
       ("ocr", "STOP here", {}), ("critic", "Response 1", {}), ("svg-code", '<svg><rect x="1"/></svg>', {}), ("html-code", "<p>x</p>", {})]


@pytest.mark.parametrize("ptype,gt,extra", GTS, ids=[g[0] for g in GTS])
def test_router_fuzz_any_response_scores(ptype, gt, extra):
    "A model can write anything: with a valid ground truth every response gets a score in [0, 1], never an exception."
    rng = random.Random(ptype)
    for _ in range(150):
        r = _response(rng)
        for strict in (False, True):
            s = compute_score(r, gt, ptype, strict_format=strict, **extra)
            assert all(0.0 <= s[k] <= 1.0 for k in ("overall", "accuracy", "format")), (r[:200], s)
    assert compute_score(f"<answer>{gt}</answer>", gt, ptype, **extra)["accuracy"] == 1.0  # and the truth still scores


def test_router_fuzz_bad_ground_truths_are_named_errors_never_silent_zeros():
    rng = random.Random(0)
    for _ in range(200):
        ptype, _, extra = rng.choice(GTS)
        gt = rng.choice([_response(rng), rng.choice(WEIRD)])
        try: compute_score(_response(rng), gt, ptype, **extra)
        except (ScorerError, TypeError) as e:
            assert "ground truth" in str(e) or "ground_truth=" in str(e), str(e)[:300]
    with pytest.warns(RewardWarning, match=r"sample 1: .*response must be a string"):
        scores, stats = compute_scores(["<answer>B</answer>", None, 7], ["B", "B", "B"], ["mc"] * 3)
    assert stats.error_indices == [1, 2] and scores[0]["accuracy"] == 1.0  # counted, not silent
    with pytest.raises(UnknownProblemType, match="problem_type must be a string"):
        compute_scores(["B"], ["B"], [float("nan")])
