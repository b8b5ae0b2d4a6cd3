#!/usr/bin/env python3
"""Fails where the library's files call each other in a circle.

A file "imports" another when it calls a function or reads a variable
defined there (fcl_* and flashcl_* names; src/internal.h declares them all,
so #include lines say nothing). Every strongly connected group of more than
one file is a circle: the kernel table, the status and the helpers must stay
leaves that know no caller. Usage: import-cycles.py SRC_DIR"""
import os
import re
import sys

DEFINITION = re.compile(r"^[A-Za-z][^\n;=]*?\b((?:fcl|flashcl)_\w+)\s*\(([^;{]|\n)*?\)\s*\{", re.M)
VARIABLE = re.compile(r"^(?:const\s+)?[A-Za-z][\w\s\*]*?\b(fcl_\w+)\s*(?:\[\])?\s*=", re.M)
# Comments and string literals name functions without calling them.
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"", re.S)


def main(src):
    files = sorted(f for f in os.listdir(src) if f.endswith(".c"))
    text = {f: COMMENT.sub("", open(os.path.join(src, f), encoding="utf-8").read()) for f in files}
    owner = {}
    for f in files:
        for m in DEFINITION.finditer(text[f]):
            owner.setdefault(m.group(1), f)
        for m in VARIABLE.finditer(text[f]):
            owner.setdefault(m.group(1), f)
    uses = {f: {} for f in files}
    for f in files:
        for name in set(re.findall(r"\b(?:fcl|flashcl)_\w+\b", text[f])):
            o = owner.get(name)
            if o and o != f:
                uses[f].setdefault(o, set()).add(name)

    # Tarjan's strongly connected components.
    index, low, stack, on_stack, groups = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in uses[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for f in files:
        if f not in index:
            visit(f)
    if not groups:
        print(f"no import circle among {len(files)} files of {src}")
        return 0
    for group in groups:
        print("circle:", " <-> ".join(group), file=sys.stderr)
        for f in group:
            for o in sorted(set(uses[f]) & set(group)):
                print(f"  {f} uses {o}: {', '.join(sorted(uses[f][o]))}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
