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

shared=$(python3 "$here/ptx-of-cache.py" "$entry" "$out.ptx" --dynamic-shared)
# ncu-harness.c passes the 30 arguments of the dense, unsplit kernel (no varlen, no split-KV).
params=$(grep -c "^\s*\.param .* flash_forward_mma_param_" "$out.ptx" || true)
[ "$params" -eq 30 ] || { echo "$entry: flash_forward_mma takes $params arguments, the harness 30 (varlen or split?)" >&2; exit 1; }
gcc -O2 -std=c11 -o "$out.harness" "$here/ncu-harness.c" -I"$CUDA_HOME/include" -L"$CUDA_HOME/lib64/stubs" -lcuda -lm
"$out.harness" "$out.ptx" "$shared" "$n" "$heads" "$d" "$block_m" "$wg" "$dtype" | tee "$out.time"
"$NCU" --clock-control none --set full --import-source no --kernel-name flash_forward_mma --launch-skip 2 \
  --launch-count 1 -f -o "$out" "$out.harness" "$out.ptx" "$shared" "$n" "$heads" "$d" "$block_m" "$wg" "$dtype" 3 \
  > "$out.ncu.log" 2>&1 || { tail -20 "$out.ncu.log"; exit 1; }
"$NCU" -i "$out.ncu-rep" --page details --print-details all > "$out.details.txt" 2>&1 || true
"$NCU" -i "$out.ncu-rep" --page source --csv --print-source sass > "$out.source.csv" 2>&1 || true
