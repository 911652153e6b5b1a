#!/usr/bin/env python3
"""Checks that nnx's folders depend one way. Every `#include <nnx/FOLDER/...>` in a source,
header or test must point to the same layer or one below it. Prints each upward include with
file and line, and exits 1 if any.

Layers, lowest first (docs/design.md explains them):
  core        errors, shapes, JAX-compatible random numbers
  sharding    meshes, specs, communicators, sharded arrays and their ops, redistribution
  framework   variables, modules, graph/state, rngs, initializers, transforms, value_and_grad
  modules, optim, checkpoint, data, metrics   (side by side: none includes another)
  tools, examples, tests       (may include anything)
Within a folder, detail/ headers are internal: only the same folder (or tests) includes them.
"""
import pathlib
import re

import report

LAYER = {"core": 0, "sharding": 1, "framework": 2, "modules": 3, "optim": 3, "checkpoint": 3,
         "data": 3, "metrics": 3}
TOP = {"tools", "examples", "tests"}
INCLUDE = re.compile(r'^\s*#\s*include\s*<nnx/([a-z_]+)/([^>]+)>')


def main(root):
    problems = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.suffix not in (".h", ".cpp", ".cu") or rel.parts[0] not in LAYER.keys() | TOP:
            continue
        here = rel.parts[0]
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target, rest = m.group(1), m.group(2)
            where = f"{rel}:{number}: includes <nnx/{target}/{rest}>"
            if target not in LAYER:
                problems.append(f"{where}, a folder that is not a layer")
            elif here in TOP:
                continue
            elif LAYER[target] > LAYER[here]:
                problems.append(f"{where}, a layer above {here}/ ({target} is layer "
                                f"{LAYER[target]}, {here} is {LAYER[here]})")
            elif LAYER[target] == LAYER[here] and target != here:
                problems.append(f"{where}, a sibling layer ({here}/ and {target}/ stand side "
                                f"by side)")
            elif rest.startswith("detail/") and target != here:
                problems.append(f"{where}, another folder's internal header")
    return problems, f"{len(problems)} upward or sideways include(s)", "layers ok"


if __name__ == "__main__":
    report.run(main)
