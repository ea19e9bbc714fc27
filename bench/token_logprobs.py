"""Peak memory and time of token log-probs with gradient: plain `log_softmax(...).gather(...)` vs the
chunked `easyvideor1.grpo.token_logprobs`, on bf16 logits with Qwen's 151,936-token vocabulary.
Each side runs in its own subprocess; memory is the peak resident set (VmHWM) above the baseline after the
logits exist (the peak is reset with /proc/self/clear_refs). Usage: python bench/token_logprobs.py [T] (default 1024 completion positions)."""
import subprocess, sys, time

CHILD = r'''
import sys, time, torch
from easyvideor1.grpo import token_logprobs
def mem(key):
    for line in open("/proc/self/status"):
        if line.startswith(key): return int(line.split()[1]) / 1024
torch.manual_seed(0); torch.set_num_threads(1)
T, V = int(sys.argv[2]), 151936
logits = torch.randn(1, T, V, dtype=torch.bfloat16).requires_grad_()
ids = torch.randint(0, V, (1, T))
torch.zeros(1, 1, V).log_softmax(-1); token_logprobs(torch.zeros(1, 1, V), torch.zeros(1, 1, dtype=torch.long))  # warm up
open("/proc/self/clear_refs", "w").write("5")  # reset the peak to the current resident set
base = mem("VmRSS"); t = time.perf_counter()
if sys.argv[1] == "plain":
    lp = logits.float().log_softmax(-1).gather(-1, ids[..., None]).squeeze(-1)
else:
    lp = token_logprobs(logits, ids)
lp.sum().backward()
print(mem("VmHWM") - base, time.perf_counter() - t, float(lp.sum()), float(logits.grad.float().abs().sum()))
'''

def run(side, T):
    out = subprocess.run([sys.executable, "-c", CHILD, side, str(T)], capture_output=True, text=True, check=True)
    return [float(x) for x in out.stdout.split()]

if __name__ == "__main__":
    T = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    plain, chunked = run("plain", T), run("chunked", T)
    print(f"bf16 logits (1, {T}, 151936) = {T * 151936 * 2 / 2**20:.0f} MiB; forward + backward")
    print(f"{'':10} {'peak MiB above logits':>22} {'seconds':>8}")
    for name, r in (("plain", plain), ("chunked", chunked)): print(f"{name:10} {r[0]:22.0f} {r[1]:8.2f}")
    print(f"memory ratio plain / chunked: {plain[0] / chunked[0]:.1f}x; time ratio: {plain[1] / chunked[1]:.2f}x")
    print(f"same values: {abs(plain[2] - chunked[2]) / abs(plain[2]) < 1e-4}, same gradient mass: {abs(plain[3] - chunked[3]) / plain[3] < 1e-2}")
