#!/bin/sh
# docs/design.md's kernel table is flashcl-probe --kernels' output, so it
# cannot drift from src/kernels.c: fails, with the difference, where it has.
# Usage: test_design_table.sh FLASHCL_PROBE DESIGN_MD
set -eu
probe=$1
design=$2
expected=$(mktemp)
actual=$(mktemp)
trap 'rm -f "$expected" "$actual"' EXIT
"$probe" --kernels > "$expected"
sed -n '/^<!-- kernel-table:/,/^<!-- end kernel-table -->/p' "$design" | sed '1d;$d' > "$actual"
if ! [ -s "$actual" ]; then
    echo "$design has no kernel-table block" >&2
    exit 1
fi
if ! diff -u "$expected" "$actual"; then
    echo "docs/design.md's kernel table differs from flashcl-probe --kernels: paste its output there" >&2
    exit 1
fi
echo "docs/design.md's kernel table matches flashcl-probe --kernels ($(grep -c '^| [a-z0-9-]* | \(forward\|backward\) |' "$expected") kernels)"
