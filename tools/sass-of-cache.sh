#!/bin/bash
# sass-of-cache.sh: what NVIDIA's driver made of a kernel, read back without a GPU. flashcl's program
# cache (FLASHCL_CACHE_DIR) keeps, on NVIDIA's OpenCL, the PTX the driver's own front end produced; this
# assembles it with CUDA's ptxas (the driver's JIT of the same CUDA release gives the same registers and
# spills as -cl-nv-verbose) and disassembles it with nvdisasm, then prints the registers, the spills and
# the instruction mix between the first and the last tensor-core product (mma.sync or wgmma): the kernel's
# key loop, one block of keys.
#
#   FLASHCL_CACHE_DIR=/tmp/c flashcl-bench ... on the GPU, bring /tmp/c back, then
#   tools/sass-of-cache.sh /tmp/c/0c252eb43a404632.bin [sm_90a]
#
# Needs ptxas (PTXAS, default ptxas on PATH or /usr/local/cuda/bin/ptxas) and nvdisasm (NVDISASM,
# default nvdisasm on PATH; PyPI's nvidia-cuda-nvdisasm wheel has one). The static __local arrays are
# shrunk first to share 48 KB (ptxas alone refuses more; their size changes no instruction).
# docs/perf.md (2026-12-01) used it to find the ldmatrix address arithmetic and the exponent's fix-up, 2026-12-02
# to see that the overlapped wgmma loop kept its softmax between the two waits (printed where there is one).
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,15p' "$0"; exit 2; }
entry=$1 arch=${2:-sm_90a}
PTXAS=${PTXAS:-$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)}
NVDISASM=${NVDISASM:-$(command -v nvdisasm || echo nvdisasm)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 "$(dirname "$0")/ptx-of-cache.py" "$entry" "$tmp/kernel.ptx" --shrink-shared
if ! "$PTXAS" -arch="$arch" -v "$tmp/kernel.ptx" -o "$tmp/kernel.cubin" > "$tmp/ptxas.log" 2>&1; then
    cat "$tmp/ptxas.log" >&2
    exit 1
fi
grep -E "Compiling|registers|spill" "$tmp/ptxas.log" || true
"$NVDISASM" -c "$tmp/kernel.cubin" > "$tmp/kernel.sass"

python3 - "$tmp/kernel.sass" <<'PY'
import collections, re, sys
ops = []
for line in open(sys.argv[1]):
    m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s*(.*?);", line)
    if m:
        text = re.sub(r"^@!?U?P\w+\s+", "", m.group(1).strip())
        ops.append(text.split()[0].split(".")[0])
products = [i for i, op in enumerate(ops) if op in ("HMMA", "HGMMA")]
if not products:
    sys.exit("no tensor-core product in this kernel")
loop = ops[products[0]:products[-1] + 1]
print(f"{len(loop)} instructions from the first to the last product ({len(ops)} in all):")
for op, n in collections.Counter(loop).most_common(16):
    print(f"{n:6d} {op}")
# The overlapped wgmma loop (WGMMA_OVERLAP): what runs between waiting for S alone and waiting for PV.
lines = [l for l in open(sys.argv[1]) if re.match(r"\s*/\*[0-9a-f]{4,}\*/", l)]
start = None
for i, l in enumerate(lines):
    if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in l:
        start = i
    elif start is not None and "WARPGROUP.DEPBAR.LE gsb0, 0x0" in l:
        between = lines[start + 1:i]
        print(f"between wgmma.wait_group 1 and 0: {len(between)} instructions, "
              f"{sum('MUFU.EX2' in b for b in between)} exponents")
        start = None
PY
