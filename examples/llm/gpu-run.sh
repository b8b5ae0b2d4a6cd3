#!/bin/bash
# flashcl-llm on a GPU machine without network (the lead's H200 runs), from
# the repository root: rebuilds the GGUF from .model-parts/ (carried in two
# calls: the 98 MB file exceeds one call's 64 MiB), builds, runs the full
# reference check, times prefill and decode, compares one-pass and chunked
# prefill of a ~7,500-token prompt, then times transformers' LlamaForCausalLM
# (f16, SDPA) on the same GGUF weights. Logs go to /tmp/llm-gpu, and as one
# llm-gpu-logs.tgz into $OUT when it is set (the device tool returns 8 files at most).
#
#   examples/llm/gpu-run.sh stage                  copy the .model-parts/ parts present to /tmp
#   examples/llm/gpu-run.sh [all|check|speed|long|torch]
set -uo pipefail
step="${1:-all}"
out=/tmp/llm-gpu
mkdir -p "$out"
model="${FLASHCL_LLM_MODEL:-/tmp/SmolLM2-135M-Instruct.Q4_1.gguf}"
if [ "$step" = stage ]; then
    cp -v .model-parts/SmolLM2.gguf.part-* .model-parts/SHA256 /tmp/ 2>/dev/null
    ls -l /tmp/SmolLM2.gguf.part-* 2>/dev/null
    exit 0
fi
if [ ! -f "$model" ]; then
    # Each part from .model-parts/ or, staged by an earlier call, from /tmp.
    rm -f "$model.tmp"
    for part in 00 01; do
        f=.model-parts/SmolLM2.gguf.part-$part
        [ -f "$f" ] || f=/tmp/SmolLM2.gguf.part-$part
        [ -f "$f" ] || { echo "gpu-run.sh: part $part of the GGUF is neither in .model-parts/ nor in /tmp"; exit 1; }
        cat "$f" >> "$model.tmp" || exit 1
    done
    mv "$model.tmp" "$model"
fi
want=$(cut -d' ' -f1 .model-parts/SHA256 2>/dev/null || echo b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53)
[ "$(sha256sum "$model" | cut -d' ' -f1)" = "$want" ] || { echo "gpu-run.sh: $model is not the expected GGUF"; exit 1; }

if [ ! -x build-gpu/examples/llm/flashcl-llm ]; then
    meson setup build-gpu --buildtype=release -Dtests=disabled >"$out/meson.txt" 2>&1 || { tail -20 "$out/meson.txt"; exit 1; }
fi
ninja -C build-gpu examples/llm/flashcl-llm examples/llm/llm-tokenize >"$out/ninja.txt" 2>&1 || { tail -20 "$out/ninja.txt"; exit 1; }
llm=build-gpu/examples/llm/flashcl-llm
texts=tests/data/llm-text
long=/tmp/llm-long.txt
cat "$texts"/{declaration,gettysburg,pride-and-prejudice-1,bill-of-rights}.txt \
    "$texts"/{declaration,gettysburg,pride-and-prejudice-1,bill-of-rights}.txt > "$long"
short="Write a short story about a lighthouse keeper who finds a message in a bottle."

if [ "$step" = all ] || [ "$step" = check ]; then
    echo "== reference check (all positions, all generations)"
    "$llm" --check tests/data/llm-reference.txt "$model" 2>&1 | tee "$out/check.txt" | grep -v "^  "
fi
if [ "$step" = all ] || [ "$step" = speed ]; then
    echo "== decode speed: chat prompt, 256 tokens (profiled, then without events)"
    "$llm" --chat -n 256 "$model" "$short" > "$out/decode-text.txt" 2> "$out/decode.txt"; cat "$out/decode.txt"
    "$llm" --chat -n 256 --no-profile "$model" "$short" > /dev/null 2> "$out/decode-noprof.txt"
    grep -E "^(prefill|decode):" "$out/decode-noprof.txt"
    echo "== prefill speed: the ~7,500-token prompt in one pass, 64 decoded"
    "$llm" -n 64 "$model" -f "$long" > /dev/null 2> "$out/long-prefill.txt"; cat "$out/long-prefill.txt"
fi
if [ "$step" = all ] || [ "$step" = long ]; then
    echo "== long context: one pass vs chunks of 512 (and of 1000)"
    for chunk in 512 1000; do
        "$llm" --compare-chunked "$chunk" -n 32 "$model" -f "$long" 2>&1 | tee "$out/compare-$chunk.txt" | tail -3
    done
fi
if [ "$step" = all ] || [ "$step" = torch ]; then
    echo "== transformers LlamaForCausalLM, f16, SDPA, same GGUF (gguf wheel from .whl/)"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site
    PYTHONUNBUFFERED=1 python3 examples/llm/bench-transformers.py "$model" --prompt "$short" --tokens 256 2>&1 | tee "$out/torch-short.txt"
    PYTHONUNBUFFERED=1 python3 examples/llm/bench-transformers.py "$model" --prompt-file "$long" --tokens 64 2>&1 | tee "$out/torch-long.txt"
fi
[ -n "${OUT:-}" ] && tar -czf "$OUT/llm-gpu-logs.tgz" -C /tmp llm-gpu
exit 0
