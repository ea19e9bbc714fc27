"""A CPU stand-in for a GPU's device check: tensor factories the package calls without a device go to `meta`.

On a GPU, a tensor made on the CPU by default (`torch.zeros(n)`) crashes the first op that meets the model's CUDA
tensors. On the CPU it passes silently: the default device is the model's. Under `meta_guard()` every such factory
call made from the package (or from `bench/`) makes a `meta` tensor instead, so the op that meets the model's fails
on the CPU as it would on a GPU ("... is not on the expected device ..."), and a read of its values fails too
("Cannot copy out of meta tensor"): CPU work must say `device="cpu"`. Each such call is also recorded (file:line),
so a test can ask for none at all.

The factories are replaced in the `torch` namespace (not a `TorchFunctionMode`, which is thread-local: the
evaluator's loader threads would escape it). A subprocess is guarded by putting `tests/guard_site` on PYTHONPATH
with `EASYVIDEOR1_META_GUARD=<file>`: its `sitecustomize` installs the guard and appends the sites to that file.
"""
from __future__ import annotations

import contextlib, functools, sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
WATCHED = (str(ROOT / "easyvideor1") + "/", str(ROOT / "bench") + "/")
# every torch function that makes a new tensor from sizes or Python data and takes `device`
FACTORIES = ("tensor", "as_tensor", "asarray", "zeros", "ones", "full", "empty", "arange", "randint", "rand",
             "randn", "randperm", "linspace", "logspace", "eye", "empty_strided", "scalar_tensor")
KEEPS_DEVICE = ("as_tensor", "asarray")  # of a tensor: that tensor itself, on its own device


class MetaGuard:
    "Replaces torch's factories while installed; `sites` holds each device-less call from a watched file."
    def __init__(self, watched=WATCHED):
        self.watched, self.sites, self._orig = tuple(watched), set(), {}

    def _wrap(self, name, fn):
        @functools.wraps(fn)
        def factory(*args, **kwargs):
            if kwargs.get("device") is None and not (name in KEEPS_DEVICE and args and isinstance(args[0], torch.Tensor)):
                f = sys._getframe(1)
                if f.f_code.co_filename.startswith(self.watched):
                    site = f"{Path(f.f_code.co_filename).relative_to(ROOT)}:{f.f_lineno} torch.{name}"
                    if site not in self.sites: print(f"device guard: {site} names no device -> meta", file=sys.stderr)
                    self.sites.add(site)
                    kwargs["device"] = "meta"
            return fn(*args, **kwargs)
        return factory

    def install(self):
        for name in FACTORIES:
            self._orig[name] = getattr(torch, name)
            setattr(torch, name, self._wrap(name, self._orig[name]))
        return self

    def uninstall(self):
        for name, fn in self._orig.items(): setattr(torch, name, fn)
        self._orig = {}


@contextlib.contextmanager
def meta_guard(watched=WATCHED):
    "Within: device-less tensor factories called from the package (and bench/) make `meta` tensors."
    g = MetaGuard(watched).install()
    try: yield g
    finally: g.uninstall()
