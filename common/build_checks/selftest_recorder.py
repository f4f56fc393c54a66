#!/usr/bin/env python3
"""vLLM's stand-in in `selftest` (common/build_checks/selftest.py): records the argv and the environment it
was exec'd with into the file COMPAT_SELFTEST_RECORD names, then exits 0.

It ships in the image beside the runtime package, executable, because the platform may give the
container a /tmp that allows no exec (Docker mounts `--tmpfs /tmp` noexec): a stand-in written
into the temp dir could not be exec'd there, and the gate runs the self-test that way. The
environment is read from /proc, as exec gave it, not Python's locale-coerced copy. Standard
library only; any Python 3 on PATH runs it.
"""

import json
import os
import sys

RECORD = "COMPAT_SELFTEST_RECORD"


def exec_environ() -> dict:
    env = {}
    try:
        with open("/proc/self/environ", "rb") as fh:
            for entry in fh.read().split(b"\0"):
                key, sep, value = entry.partition(b"=")
                if sep and key:
                    env.setdefault(os.fsdecode(key), os.fsdecode(value))
    except OSError:
        env = dict(os.environ)
    return env


def main() -> int:
    env = exec_environ()
    path = env.get(RECORD)
    if not path:
        print(f"selftest recorder: {RECORD} is not set; nothing recorded", file=sys.stderr)
        return 2
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"argv": sys.argv, "env": env}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
