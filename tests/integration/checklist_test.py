#!/usr/bin/env python3
"""checklist_test.py: scripts/device/checklist.py's verdict on a GPU test program, with stand-in
programs (shell scripts) on a machine said to have a GPU. A GoogleTest program that ran no case
is a failure, and the caller's GTEST_FILTER does not reach the programs: on the H200 a wrapper's
GTEST_FILTER made five gtest programs pass with 0 tests."""
import os
import stat
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "scripts", "device"))
import checklist  # noqa: E402


def program(folder, name, body):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body)
    os.chmod(path, stat.S_IRWXU)
    return path


def verdict(folder, path):
    t = {"name": os.path.basename(path), "argv": [path], "env": [], "timeout": 30}
    return checklist.run_one(t, {}, folder, folder, "1", 30.0)


def main():
    os.environ["GTEST_FILTER"] = "*NothingMatches*"
    failures = []
    with tempfile.TemporaryDirectory() as d:
        cases = {
            # A gtest program that honours GTEST_FILTER: 0 tests when the filter reaches it.
            "filtered": ('if [ -n "$GTEST_FILTER" ]; then n=0; else n=4; fi\n'
                         'echo "[  PASSED  ] $n tests."\n', "ok"),
            "none": ('printf "\\033[0;32m[  PASSED  ] \\033[m0 tests.\\n"\n', "FAILED"),
            "some": ('echo "[  PASSED  ] 12 tests."\n', "ok"),
            "skipped": ("exit 77\n", "FAILED"),
        }
        for name, (body, want) in cases.items():
            got = verdict(d, program(d, name, body))
            print("%-9s %-7s %s" % (name, got[1], got[3]))
            if got[1] != want:
                failures.append("%s: %s, expected %s" % (name, got[1], want))
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
