#!/bin/bash
# ncu-of-cache.sh: Nsight Compute's counters for a flashcl forward tensor-core kernel (mma.sync or wgmma), on
# the GPU machine. ncu does not see NVIDIA OpenCL's launches, so this takes the PTX the driver produced from
# flashcl's program cache (as tools/sass-of-cache.sh does), turns its static __local arrays into one block
# of dynamic shared memory (CUDA's JIT refuses more than 48 KB static), and launches it through CUDA's
# driver API from tools/ncu-harness.c with the grid, work-group and arguments flashcl gives it.
#
#   FLASHCL_CACHE_DIR=/tmp/c flashcl-bench --n 16384 --d 128 ... (one shape: one kernel entry), then
#   tools/ncu-of-cache.sh /tmp/c/ENTRY.bin N HEADS D BLOCK_M WG DTYPE OUT_PREFIX
#
# BLOCK_M is the work-group's query rows (16 · warps · m_tiles), WG its threads (32 · warps), DTYPE 1 f16,
# 2 bf16. Writes OUT_PREFIX.ptx (the patched PTX), .time (the harness's own timing, to compare with the
# bench's), .ncu-rep (ncu --set full), .details.txt and .source.csv (SASS with its stall samples).
# Needs gcc, CUDA's headers and libcuda (CUDA_HOME, default /usr/local/cuda), ncu (NCU, default ncu).
set -euo pipefail
[ $# -ge 8 ] || { sed -n '2,14p' "$0"; exit 2; }
entry=$1 n=$2 heads=$3 d=$4 block_m=$5 wg=$6 dtype=$7 out=$8
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NCU=${NCU:-$(command -v ncu || echo /opt/nvidia/nsight-compute/2025.3.1/ncu)}
here=$(cd "$(dirname "$0")" && pwd)

shared=$(python3 - "$entry" "$out.ptx" <<'PY'
import re, sys
data = open(sys.argv[1], "rb").read()
start = data.find(b"//\n// Generated")
if start < 0:
    start = data.find(b".version")
if start < 0:
    sys.exit(f"{sys.argv[1]}: no PTX in this cache entry (not NVIDIA's OpenCL?)")
ptx = data[start:].split(b"\0", 1)[0].decode("ascii", "replace")
decl = re.compile(r"^\s*\.shared \.align (\d+) \.b8 ([^\[\s]+)\[(\d+)\];\s*$", re.M)
offset, places = 0, []
for align, name, size in decl.findall(ptx):
    align = int(align)
    offset = (offset + align - 1) // align * align
    places.append((name, offset))
    offset += int(size)
ptx = decl.sub("", ptx)
for name, at in places:
    ptx = re.sub(r"(?<![\w$])" + re.escape(name) + r"(?![\w$])", f"fcl_dyn_smem+{at}" if at else "fcl_dyn_smem", ptx)
# NVIDIA OpenCL's get_group_id adds %envreg0..2 (the work-group offsets, zero for flashcl's launches) to
# %ctaid; CUDA does not set them.
used = sorted(set(re.findall(r"%envreg\d+", ptx)))
if [r for r in used if r not in ("%envreg0", "%envreg1", "%envreg2")]:
    sys.exit(f"{sys.argv[1]}: reads {used}; only the work-group offsets %envreg0..2 are known here")
ptx = re.sub(r"%envreg[0-2]\b", "0", ptx)
entry_at = re.search(r"^(\.visible\s+)?\.entry", ptx, re.M)
ptx = ptx[:entry_at.start()] + ".extern .shared .align 1024 .b8 fcl_dyn_smem[];\n" + ptx[entry_at.start():]
open(sys.argv[2], "w").write(ptx)
print(offset)
PY
)
gcc -O2 -std=c11 -o "$out.harness" "$here/ncu-harness.c" -I"$CUDA_HOME/include" -L"$CUDA_HOME/lib64/stubs" -lcuda -lm
"$out.harness" "$out.ptx" "$shared" "$n" "$heads" "$d" "$block_m" "$wg" "$dtype" | tee "$out.time"
"$NCU" --clock-control none --set full --import-source no --kernel-name flash_forward_mma --launch-skip 2 \
  --launch-count 1 -f -o "$out" "$out.harness" "$out.ptx" "$shared" "$n" "$heads" "$d" "$block_m" "$wg" "$dtype" 3 \
  > "$out.ncu.log" 2>&1 || { tail -20 "$out.ncu.log"; exit 1; }
"$NCU" -i "$out.ncu-rep" --page details --print-details all > "$out.details.txt" 2>&1 || true
"$NCU" -i "$out.ncu-rep" --page source --csv --print-source sass > "$out.source.csv" 2>&1 || true
