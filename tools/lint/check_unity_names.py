#!/usr/bin/env python3
"""Checks that sources compiled in batches (CMake's unity build) cannot change each other's
meaning. A batch is one translation unit, so what one source keeps to itself leaks into the next:

  - names in an anonymous namespace, `static` at namespace scope, and using-declarations at
    namespace scope: two sources with the same name either fail to compile or, worse, silently
    become overloads of each other (the same alias or using-declaration twice is harmless);
  - `using namespace` at namespace scope, and macros left defined at the end of a source.

Sources that CMakeLists.txt lists in NNX_UNITY_ALONE are compiled alone and not checked.
Prints each finding, and exits 1 if any. Usage:
  check_unity_names.py [ROOT]   (checks the library's sources, which CMake batches)
"""
import pathlib
import re
from collections import defaultdict

import report

LIBRARY = ["core", "sharding", "framework", "modules", "optim", "checkpoint", "data", "metrics"]

KIND = re.compile(r"\b(?:struct|class|union|enum(?:\s+class)?)\s+(\w+)")
USING = re.compile(r"^\s*using\s+(\w+)\s*=")
TEMPLATE = re.compile(r"^\s*template\s*<")
IDENT_BEFORE = re.compile(r"(~?\w+|operator\s*\S+)\s*$")


def strip(text):
    """Drops comments, string and character literals (keeping newlines)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            out.append("\n" * text.count("\n", i, n if j < 0 else j))
            i = n if j < 0 else j + 2
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            out.append('""')
            i = n if end < 0 else end + len(m.group(1)) + 2
        elif c == "'" and re.search(r"(?<![\w.])\d[\w.]*$", text[max(0, i - 40):i]):
            out.append(c)  # a digit separator, as in 200'000
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_attributes(statement):
    """Removes `[[...]]` and `__attribute__((...))` wherever they stand."""
    statement = re.sub(r"\[\[.*?\]\]", " ", statement)
    while (k := statement.find("__attribute__")) >= 0:
        depth, j = 0, statement.find("(", k)
        for j in range(j, len(statement)):
            depth += {"(": 1, ")": -1}.get(statement[j], 0)
            if depth == 0:
                break
        statement = statement[:k] + " " + statement[j + 1:]
    return statement


def skip_template_header(statement):
    """Removes a leading `template <...>`."""
    if not TEMPLATE.match(statement):
        return statement
    depth, start = 0, statement.index("<")
    for k in range(start, len(statement)):
        if statement[k] == "<":
            depth += 1
        elif statement[k] == ">":
            depth -= 1
            if depth == 0:
                return skip_template_header(statement[k + 1:])
    return statement


def declared_name(statement):
    """(name, the statement where it is an alias, else None) for what a namespace-scope
    declaration (attributes and template header removed) introduces, or None."""
    if not statement or statement.startswith(("namespace", "extern", "static_assert")):
        return None
    if statement.startswith("using"):
        m = USING.match(statement)  # an alias: the same alias in two sources is harmless
        return (m.group(1), statement) if m else None
    head = statement.split("(")[0]
    m = KIND.search(head)
    if m and "(" not in statement.split(m.group(0))[0]:
        return m.group(1), None
    depth, end = 0, len(statement)
    for k, ch in enumerate(statement):
        if ch in "<[":
            depth += 1
        elif ch in ">]":
            depth -= 1
        elif depth == 0 and ch in "(={;":
            end = k
            break
    m = IDENT_BEFORE.search(statement[:end])
    return (m.group(1), None) if m else None


def file_local_names(text):
    """Names a source keeps to itself (anonymous-namespace and `static` namespace-scope ones, and
    using-declarations), each with its statement where it is an alias or using-declaration, else
    None; and the source's namespace-scope `using namespace` directives."""
    names, directives, namespaces, depth, statement = set(), [], [], 0, ""

    def declaration(raw):
        s = " ".join(skip_template_header(drop_attributes(raw)).split())
        if s.startswith("using namespace"):
            directives.append(s)
        elif re.match(r"^using\s+[\w:]+::(\w+)$", s):  # a using-declaration
            names.add((s.split("::")[-1], s))
        elif (namespaces and namespaces[-1]) or re.match(r"^(inline\s+|constexpr\s+)*static\b", s):
            declared = declared_name(s)
            if declared:
                names.add(declared)

    body_depth = None  # brace depth of a definition body being skipped
    for ch in text:
        if body_depth is not None:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == body_depth:
                    body_depth = None
                    statement = ""
            continue
        if ch == "{":
            s = " ".join(statement.split())
            m = re.match(r"^(inline\s+)?namespace(\s+[\w:]+)?\s*$", s)
            if m:
                namespaces.append(m.group(2) is None)
                depth += 1
                statement = ""
                continue
            declaration(statement)
            body_depth = depth
            depth += 1
            continue
        if ch == "}":
            depth -= 1
            if namespaces:
                namespaces.pop()
            statement = ""
            continue
        if ch == ";":
            declaration(statement)
            statement = ""
            continue
        if ch == "#" and not statement.strip():
            statement = "#"
            continue
        if statement.startswith("#"):
            if ch == "\n":
                statement = ""
            else:
                statement += ch
            continue
        statement += ch
    return names, directives


def leaked_macros(text):
    """Macros still defined at the end."""
    defined = {}
    for number, line in enumerate(text.splitlines(), 1):
        m = re.match(r"\s*#\s*define\s+(\w+)", line)
        if m:
            defined[m.group(1)] = number
        m = re.match(r"\s*#\s*undef\s+(\w+)", line)
        if m:
            defined.pop(m.group(1), None)
    return [f"{number}: macro {name} still defined at the end" for name, number in
            defined.items()]


def compiled_alone(root):
    """The sources CMakeLists.txt keeps out of the batches (NNX_UNITY_ALONE)."""
    cmake = root / "CMakeLists.txt"
    text = cmake.read_text() if cmake.exists() else ""
    m = re.search(r"set\(NNX_UNITY_ALONE\b([^)]*)\)", text)
    return set(m.group(1).split()) if m else set()


def main(root):
    problems, alone = [], compiled_alone(root)
    owners = defaultdict(list)
    for folder in LIBRARY:
        for path in sorted((root / folder).rglob("*.cpp")):
            rel = path.relative_to(root)
            if str(rel) in alone:
                continue
            text = strip(path.read_text(errors="replace"))
            names, directives = file_local_names(text)
            for name, alias in names:
                owners[name].append((str(rel), alias))
            problems += [f"{rel}: `{d}` at namespace scope (list the source in NNX_UNITY_ALONE, "
                         "or name what it uses)" for d in directives]
            problems += [f"{rel}:{leak}" for leak in leaked_macros(text)]
    for name, entries in sorted(owners.items()):
        files = [f for f, _ in entries]
        aliases = {alias for _, alias in entries}
        if len(files) > 1 and not (len(aliases) == 1 and None not in aliases):
            problems.append(f"library: `{name}` is file-local in {len(files)} sources: "
                            + ", ".join(files))
    return problems, f"{len(problems)} name(s) that batches would share", "unity names ok"


if __name__ == "__main__":
    report.run(main)
