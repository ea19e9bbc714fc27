"""With EASYVIDEOR1_META_GUARD=<file>, every Python process started with this folder on PYTHONPATH runs under
`tests/device_guard.py`'s guard and appends the device-less factory sites it met to <file> when it exits."""
import atexit, os, sys

_log = os.environ.get("EASYVIDEOR1_META_GUARD")
if _log:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
    from device_guard import MetaGuard

    _guard = MetaGuard().install()

    @atexit.register
    def _write_sites():
        with open(_log, "a") as f:
            f.writelines(f"{s}\n" for s in sorted(_guard.sites))
