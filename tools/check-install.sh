#!/usr/bin/env bash
# Installs the build into a private prefix and builds examples/seed-example.c
# against it the way a user would (pkg-config), then runs it: the header,
# library, pkg-config file and symbol visibility are what an adopter gets.
#   tools/check-install.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
prefix=$build/install-check
rm -rf "$prefix"
meson configure "$build" -Dprefix="$prefix" >/dev/null
meson install -C "$build" >/dev/null
pc=$(dirname "$(find "$prefix" -name flashcl.pc | head -1)")
export PKG_CONFIG_PATH=$pc
libdir=$(pkg-config --variable=libdir flashcl)
cc -std=c99 -Wall -Wextra -Werror examples/seed-example.c $(pkg-config --cflags --libs flashcl) -o "$build/seed-example-installed"
# Only flashcl_* symbols are exported.
if nm -D --defined-only "$libdir/libflashcl.so" | awk '$2 ~ /[TDB]/ {print $3}' | grep -v '^flashcl_'; then
  echo "check-install: symbols other than flashcl_* are exported" >&2; exit 1
fi
out=$(LD_LIBRARY_PATH=$libdir "$build/seed-example-installed")
echo "$out"
echo "$out" | grep -q "O = 36.8806" || { echo "check-install: wrong result" >&2; exit 1; }
echo "check-install: installed header, library and pkg-config file work"
