#!/usr/bin/env python3
"""Checks that tests include Catch only through tests/catch_after_torch.h. LibTorch's
c10/util/Logging.h defines a one-argument CHECK, and whichever header comes last defines it: a
test that included Catch before a torch header would get c10's CHECK, which aborts instead of
reporting, wherever the precompiled header does not fix the order. tests/main.cpp, which
defines Catch's runner, is the one exception. Prints each direct include, and exits 1 if any.
"""
import re

import report

CATCH = re.compile(r'^\s*#\s*include\s*[<"]catch2/catch\.hpp[>"]')
ALLOWED = {"tests/main.cpp", "tests/catch_after_torch.h"}


def main(root):
    problems = []
    for path in sorted((root / "tests").rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.suffix not in (".h", ".cpp") or rel in ALLOWED:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if CATCH.match(line):
                problems.append(f"{rel}:{number}: includes Catch directly; include "
                                f"\"catch_after_torch.h\" (relative to tests/) instead")
    return (problems, f"{len(problems)} direct Catch includes in tests",
            "test includes ok")


if __name__ == "__main__":
    report.run(main)
