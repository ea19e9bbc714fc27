"""Reward scoring throughput per problem family on one CPU core.

Run: `OMP_NUM_THREADS=1 python bench/rewards.py [--n 20000]`. Prints responses per second per family
(batch `compute_scores`, a realistic mix of correct, wrong, partial, malformed and tag-less responses,
ground truths repeated in groups of G=8 as in GRPO), the ratio to the 10,000/s target for the families
that have one, and ROUGE-L's bit-parallel LCS against the textbook table on caption-length texts.
"""
import argparse
import os
import random
import time

from easyvideor1.rewards import compute_scores, lcs_length, tokenize

TARGET = 10_000  # responses/s on one core for multiple choice, numerical and grounding
G = 8  # rollouts per prompt: each ground truth appears G times in a batch


def naive_lcs(a, b):
    "The O(len(a) len(b)) table: the side the bit-parallel LCS is compared against."
    row = [0] * (len(b) + 1)
    for x in a:
        prev = 0
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], prev + 1 if x == y else max(row[j], row[j - 1])
    return row[-1]


def think(rng):
    return "<think>" + " ".join(rng.choice(["the", "box", "moves", "left", "then", "a", "frame", "I", "see"])
                                for _ in range(rng.randint(20, 80))) + "</think>"


def box(rng):
    x, y = rng.randint(0, 500), rng.randint(0, 300)
    return [x, y, x + rng.randint(5, 140), y + rng.randint(5, 140)]


def jitter(b, rng, s=10):
    "A nearby box with 1-decimal coordinates (unique answers, so no cache flatters the rate)."
    return ([round(v + rng.uniform(-s, s), 1) for v in b[:2]] +
            [round(v + rng.uniform(-s, s) + 2 * s, 1) for v in b[2:]])


def make(family, n, rng):
    "n (response, ground truth, extra) for one family; ground truths repeat in groups of G."
    out, gt = [], None
    for i in range(n):
        fresh = i % G == 0
        kind = rng.random()
        if family == "multiple choice":
            if fresh: gt = rng.choice("ABCD")
            ans = rng.choice([gt, rng.choice("ABCD"), f"({gt}) the car", f"I think {gt}", "a dog or so"])
            extra = {"options": ["A. red", "B. blue", "C. green", "D. white"]}
        elif family == "numerical":
            if fresh: gt = str(rng.randint(0, 200))
            ans = rng.choice([gt, str(rng.randint(0, 200)), f"{gt}.0 cars", "one hundred", "1e2", "many"])
            extra = {}
        elif family == "regression":
            if fresh: gt = f"{rng.uniform(0.5, 50):.1f}"
            ans = rng.choice([gt, f"{float(gt) * rng.uniform(0.5, 1.5):.2f}", f"{gt} meters", "far"])
            extra = {}
        elif family == "boolean":
            if fresh: gt = rng.choice(["yes", "no"])
            ans = rng.choice(["yes", "no", "No, it is not true", "maybe"])
            extra = {}
        elif family == "temporal grounding":
            if fresh:
                s = round(rng.uniform(0, 30), 1)
                gt = f'<think>{{"time": [{s}, {s + rng.uniform(1, 10):.1f}], "boxes": {{}}}}</think>'
            s = round(rng.uniform(0, 30), 3)  # 3 decimals: unique answers, so no cache flatters the rate
            ans = rng.choice([f'{{"time": [{s}, {s + 4.0}]}}', f"[{s}, {s + 2}]", "from 3 to 5 s"])
            extra = {}
        elif family == "spatial grounding":
            if fresh: gtb = box(rng); gt = f'{{"boxes": {gtb}}}'
            ans = rng.choice([f'{{"boxes": {jitter(gtb, rng)}}}', f'{{"boxes": {box(rng)}}}', "[1, 2, 3]"])
            extra = {}
        elif family == "spatial-temporal grounding":
            if fresh:
                t0 = rng.randint(0, 20); frames = range(t0, t0 + rng.randint(1, 8))
                gtb = {str(f): box(rng) for f in frames}
                gt = f'<answer>{{"time": [{t0 - 0.4}, {frames[-1] + 0.3}], "boxes": {str(gtb).replace(chr(39), chr(34))}}}</answer>'
            pb = {k: jitter(v, rng) for k, v in gtb.items() if rng.random() < 0.7}
            ans = rng.choice([f'{{"time": [{t0}, {t0 + 3}], "boxes": {str(pb).replace(chr(39), chr(34))}}}',
                              f'{{"time": [{t0}, {t0 + 3}]}}', "no idea"])
            extra = {}
        elif family == "tracking":
            if fresh:
                gtb = {str(f): box(rng) for f in range(rng.randint(4, 16))}
                gt = f'{{"boxes": {str(gtb).replace(chr(39), chr(34))}}}'
            pb = {k: jitter(v, rng) for k, v in gtb.items() if rng.random() < 0.8}
            ans = f'{{"boxes": {str(pb).replace(chr(39), chr(34))}}}'
            extra = {}
        elif family == "open-ended":
            words = "a red car turns left at the corner then stops near the blue house".split()
            if fresh: gt = " ".join(rng.sample(words, rng.randint(1, 10)))
            ans = rng.choice([gt, " ".join(rng.sample(words, rng.randint(1, 12))), "红色的汽车向左转"])
            extra = {}
        elif family == "ocr":
            words = "stop no entry after 10 pm exit only keep left".split()
            if fresh: gt = " ".join(rng.sample(words, rng.randint(2, 8)))
            ans = rng.choice([gt, gt.upper(), " ".join(rng.sample(words, rng.randint(1, 8)))])
            extra = {}
        elif family == "llava":
            if fresh: gt = rng.choice(["Response 1", "Response 2", "Tie"])
            ans = rng.choice(["Response 1", "Response 2", "Tie", "Response 2 is better than Response 1"])
            extra = {}
        elif family == "math":
            if fresh: gt = rng.choice([r"\frac{1}{2}", r"\frac{\sqrt{2}}{2}", "x^2+2x+1", "3"])
            ans = rng.choice([gt, "0.5", r"\frac{1}{\sqrt{2}}", "(x+1)^2", "4", r"\sqrt{3}"])
            extra = {}
        elif family == "code":
            gt = "import math\ndef area(r):\n    return math.pi * r ** 2\nclass Circle:\n    pass"
            ans = rng.choice(["```python\nimport math\ndef area(r):\n    return math.pi*r*r\n```",
                              "def area(r): return 3.14 * r * r", "def area(r) return r"])
            extra = {}
        else:
            raise ValueError(f"unknown family {family!r}")
        tag = kind < 0.9  # 10% of responses forget the answer tag
        out.append((think(rng) + (f"<answer>{ans}</answer>" if tag else ans), gt, extra))
    return out


def bench(family, n, rng, repeat=3):
    "Best-of-`repeat` responses per wall second and per CPU second of `compute_scores` on one family, and its stats."
    data = make(family, n, rng)
    r, g, e = map(list, zip(*data))
    best, best_cpu, stats = 0.0, 0.0, None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        _, stats = compute_scores(r, g, [family] * n, e)
        best = max(best, n / (time.perf_counter() - t0))
        best_cpu = max(best_cpu, n / max(time.process_time() - c0, 1e-9))
    return best, best_cpu, stats


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000, help="responses per fast family")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"): os.sched_setaffinity(0, {0})
    rng = random.Random(0)
    fast = ["multiple choice", "numerical", "temporal grounding", "spatial grounding",
            "spatial-temporal grounding", "tracking"]
    other = {"regression": args.n, "boolean": args.n, "open-ended": args.n // 4, "ocr": args.n // 4,
             "llava": args.n, "code": 2_000, "math": 200}
    rows = []
    for fam in fast + list(other):
        n = args.n if fam in fast else other[fam]
        rate, cpu_rate, stats = bench(fam, n, rng, repeat=1 if fam == "math" else 3)
        assert not stats.errors, f"{fam}: scorer errors {stats.errors}"
        rows.append((fam, n, rate, cpu_rate, stats.mean_accuracy[next(iter(stats.mean_accuracy))], fam in fast))
    print(f"reward scoring on one core (affinity {sorted(os.sched_getaffinity(0))}, load average "
          f"{os.getloadavg()[0]:.1f}); per CPU second is what the core delivers when it is not shared\n")
    print(f"| {'family':<28} | {'n':>6} | {'resp/s wall':>11} | {'resp/s CPU':>10} | {'mean acc':>8} | {'CPU vs 10k/s':>13} |")
    print(f"|{'-' * 30}|{'-' * 8}|{'-' * 13}|{'-' * 12}|{'-' * 10}|{'-' * 15}|")
    for fam, n, rate, cpu_rate, acc, has_target in rows:
        ratio = f"{cpu_rate / TARGET:.2f}x {'ok' if cpu_rate > TARGET else 'BELOW'}" if has_target else ""
        cpu = "in worker" if fam == "math" else f"{cpu_rate:,.0f}"  # math-verify runs in its own process
        print(f"| {fam:<28} | {n:>6} | {rate:>11,.0f} | {cpu:>10} | {acc:>8.3f} | {ratio:>13} |")

    a = tokenize(" ".join(rng.choice("the a red car turns left at corner".split()) for _ in range(300)))
    b = tokenize(" ".join(rng.choice("the a red car turns left at corner".split()) for _ in range(300)))
    timings = {}
    for name, fn in [("naive table", naive_lcs), ("bit-parallel", lcs_length)]:
        t0 = time.perf_counter()
        for _ in range(5): out = fn(a, b)
        timings[name] = (time.perf_counter() - t0) / 5
        assert out == naive_lcs(a, b)
    print(f"\nROUGE-L LCS of two 300-token captions: naive {timings['naive table'] * 1e3:.2f} ms, "
          f"bit-parallel {timings['bit-parallel'] * 1e3:.3f} ms, ratio {timings['naive table'] / timings['bit-parallel']:.0f}x")


if __name__ == "__main__":
    main()
