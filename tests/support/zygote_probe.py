"""A Python worker stand-in for tests/integration/test_worker_zygote.py, run as ``python -m tests.support.zygote_probe
<action>``: prints one JSON line saying how it was started, then ``sleep``s, ``exit<N>``s, ``raise``s or ends."""

from __future__ import annotations

import json
import os
import sys
import time


def main(action: str) -> None:
    report = {"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv, "cwd": os.getcwd(), "path": sys.path[:3],
              "probe_env": os.environ.get("ZYGOTE_PROBE"), "name": __name__, "umask": os.umask(0o22),
              "preloaded": "pyspark.daemon" in sys.modules,
              "cmdline": open("/proc/self/cmdline", "rb").read().rstrip(b"\0").decode(),
              "environ": open("/proc/self/environ", "rb").read().decode(errors="replace").split("\0")}
    if action == "stdin":
        report["stdin"] = sys.stdin.read()
    print(json.dumps(report), flush=True)
    if action == "sleep":
        time.sleep(120)
    elif action.startswith("exit"):
        sys.exit(int(action[4:]))
    elif action == "raise":
        raise RuntimeError("the probe's own error")


if __name__ == "__main__":
    main(sys.argv[1])
