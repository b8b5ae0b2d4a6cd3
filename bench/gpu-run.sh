#!/usr/bin/env bash
# One whole GPU run on an NVIDIA machine with its OpenCL driver: build
# flashcl against NVIDIA's OpenCL, run the test suite there, run flashcl-bench
# and PyTorch's SDPA backends on the same shapes, and join the two tables.
# Results go to $OUT (default ./gpu-out). Needs the Debian packages of
# CLBlast and Check in .devdeb/ (carried with the tree).
#
#   bench/gpu-run.sh [tests|bench|all] [flashcl-bench options...]
#   bench/gpu-run.sh decode ["B:Hq:Hkv:Nq:Nk,..."]   (decode / chunked prefill, flashcl-bench --decode
#                    dense and paged (PAGE_SIZE), and with the decode kernel off on OFF_SHAPES; PyTorch's
#                    SDPA with enable_gqa on the same shapes; DECODE_D picks d)
#   bench/gpu-run.sh decode-table   (the decode table: 45 decode shapes, f16, one query a sequence, dense
#                    cache; group sizes 1, 4, 5, 7, 8, 16 at d 64/128/256, batch 1-64, 4k-128k keys (the grid is
#                    listed in the mode below); flashcl-bench --decode and PyTorch's FA2 and cuDNN (SDPA,
#                    enable_gqa) on the same shapes; four of the d=128 shapes paged (PAGE_SIZE) against dense;
#                    K+V GB/s against COPY_CEILING (default: flashcl-probe's copy rate on that card) in $OUT/decode-table.md. DT_CALLS calls back to
#                    back (1), DT_NK_DIV divides every cache length (1; a small run to check the flow); each
#                    dense table on each layout of DT_LAYOUTS ("bnhd bhnd"), flashcl and PyTorch on the same one)
#   bench/gpu-run.sh decode-sweep ["W,N W,N ..."]   (decode-tensor-core's tiles forced, warps x keys a block, on
#                    SWEEP_SHAPES at SWEEP_D (128), SWEEP_SPLITS split counts (the plan's); K+V GB/s)
#   bench/gpu-run.sh decode-merge-ab ["B:Hq:Hkv:Nq:Nk,..."]   (split-KV decode merged in place against the
#                    combine step, AB_ROUNDS (2) rounds interleaved, SWEEP_D head dims (64 128 256))
#   bench/gpu-run.sh varlen ["L1,L2,..."]   (varlen prefill: flashcl-bench --varlen on a realistic mix,
#                    VARLEN_COUNT (64) lengths log-uniform in VARLEN_MIN..VARLEN_MAX (100..8000) from
#                    VARLEN_SEED (1), or the list given; GQA 32:8, d 128 and 64, f16 and bf16, causal 0 and 1;
#                    bench/torch_varlen.py (FA2 varlen, nested tensors, per-sequence SDPA) on the same list)
#   bench/gpu-run.sh probe     (flashcl-probe report and --tune --quick; flashcl-bench on the perf
#                    table's N=16k shapes without and with the tuning file; then the tests)
#   bench/gpu-run.sh mma-sweep "W,M,N W,M,N ..."   (tensor-core shapes: warps,m_tiles,block_n,
#                    forced through FLASHCL_KERNELS; each is checked by the tensor-core tests, then timed at N=16k next to FA2;
#                    SWEEP_D picks head dims (SWEEP_HIDDEN heads*d, 2048), QUICK=1 skips the per-shape forward tests)
#   bench/gpu-run.sh ab BASE_TREE [flashcl-bench options...]   (an A/B in one call: BASE_TREE, a source
#                    tree carried with this one, e.g. `git archive REV | tar x -C .gpu/base` with .gpu in
#                    carry, built beside this tree in BASE_BUILD (default /tmp/flashcl-base-build; a separate
#                    one for each base tree: an existing one is reused as it is); flashcl-bench with the options on both, AB_ROUNDS (2)
#                    rounds of base then new; PyTorch on the same shapes; bench/ab.py joins them: medians,
#                    the change, × FA2 and cuDNN, and the errors compared)
#   bench/gpu-run.sh options-ab "OPTS|OPTS|..." [flashcl-bench options]   (build options A/B on one build:
#                    each '|'-separated FLASHCL_BUILD_OPTIONS value ("-" none; the first the base) under each of
#                    AB_KERNELS (';'-separated FLASHCL_KERNELS values, "-" the default plan), AB_ROUNDS (2)
#                    rounds interleaved, PyTorch on the same shapes, bench/ab.py against the first; each
#                    kernel set against the first too, on the first variant)
#   bench/gpu-run.sh pairs-ab "KERNELS@OPTS;KERNELS@OPTS;..." [flashcl-bench options]   (plans A/B on one
#                    build: each ';'-separated pair a FLASHCL_KERNELS value and a FLASHCL_BUILD_OPTIONS value
#                    ("-" none), the first the base; the driver's register report for each pair first, then
#                    AB_ROUNDS (2) rounds interleaved, PyTorch on the same shapes, bench/ab.py against the first)
#   bench/gpu-run.sh variants "FLAGS|FLAGS|..." [flashcl-bench options]   (the attention variants' cost: each
#                    '|'-separated set of flashcl-bench flags ("-" none, the first the base), e.g.
#                    "-|--alibi|--sinks|--softcap 10000", on the same shapes, AB_ROUNDS (2) rounds interleaved,
#                    PyTorch on the same shapes, bench/ab.py against the first)
#   bench/gpu-run.sh f32-sweep ["BM,BN ..." ["W,M,N ..."|none]]   (register-tiled f32 tiles, then
#                    TF32 shapes, timed at N=16k after the forward and tile tests; SKIP_TESTS=1
#                    skips those, FLASHCL_SWEEP_OPTIONS adds build options to the f32 runs)
set -u -o pipefail
MODE=${1:-all}; shift || true
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
BUILD=/tmp/flashcl-build

export OCL_ICD_FILENAMES=/usr/local/nvidia/lib64/libnvidia-opencl.so.1
export FLASHCL_DEVICE=${FLASHCL_DEVICE:-NVIDIA}
mkdir -p /tmp/x /tmp/pc
for f in .devdeb/*.deb; do dpkg -x "$f" /tmp/x; done
for p in /tmp/x/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc; do
  sed 's#^prefix=.*#prefix=/tmp/x/usr#' "$p" > "/tmp/pc/$(basename "$p")"
done
export PKG_CONFIG_PATH=/tmp/pc LD_LIBRARY_PATH=/tmp/x/usr/lib/x86_64-linux-gnu

{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
} > "$OUT/env.txt"

{ [ -d "$BUILD" ] || meson setup "$BUILD" --buildtype=release >"$OUT/build.log" 2>&1; } && ninja -C "$BUILD" >>"$OUT/build.log" 2>&1 \
  || { tail -50 "$OUT/build.log"; exit 1; }

# "W,M,N" / "BM,BN" as the kernel options that force that shape (FLASHCL_KERNELS).
shape_opts() {  # kernel "a,b[,c]"
  local k=$1 IFS=,; set -- $2
  if [ $# -eq 3 ]; then echo "$k:warps=$1,m_tiles=$2,block_n=$3"; else echo "$k:block_m=$1,block_n=$2"; fi
}

# flashcl-bench's options that bench/torch_sdpa.py takes too (the same shapes for PyTorch).
torch_args() {
  python3 - "$@" <<'PY'
import sys
a = sys.argv[1:]
keep = {"--n", "--d", "--dtype", "--causal", "--tokens", "--hidden", "--pass"}
print(" ".join(f"{a[i]} {a[i+1]}" for i in range(len(a) - 1) if a[i] in keep))
PY
}

# One comparison of options-ab's and pairs-ab's runs in $W: k$1-v$2 (base) against k$3-v$4, under a heading.
ab_compare() {
  local base new
  base=$(ls "$W"/k$1-v$2-r*.csv 2>/dev/null | paste -sd,)
  new=$(ls "$W"/k$3-v$4-r*.csv 2>/dev/null | paste -sd,)
  echo "### $5"
  if [ -n "$base" ] && [ -n "$new" ]; then
    python3 bench/ab.py "$base" "$new" "$W/torch.csv"
  else
    echo "no CSV from one side (see k$1-v$2-r*.log and k$3-v$4-r*.log in the call's .tgz)"
  fi
  echo
}

status=0
if [ "$MODE" = tests ] || [ "$MODE" = all ]; then
  meson test -C "$BUILD" --print-errorlogs >"$OUT/tests.log" 2>&1 || status=1
  cat "$BUILD/meson-logs/testlog.txt" >> "$OUT/tests.log"
  grep -E "^ *[0-9]+/[0-9]+ |^(Ok|Fail|Timeout):" "$OUT/tests.log" | head -20
  "$BUILD/examples/flashcl-demo" 4096 8 64 1 | tee -a "$OUT/tests.log" || status=1
  # The compiler's register / spill report for each forward kernel the sweep uses.
  FLASHCL_CACHE_DIR=off FLASHCL_BUILD_OPTIONS=-cl-nv-verbose "$BUILD/bench/flashcl-bench" --verbose --paths flash --n 256 \
    --d 64,128 --dtype f32,tf32,tf32x3,f16,bf16 --causal 0,1 --warmup 0 --reps 1 2>&1 | grep -E "ptxas|registers|spill|bytes stack|build options" >> "$OUT/tests.log"
fi
if [ "$MODE" = bench ] || [ "$MODE" = all ]; then
  BENCH_ARGS=("$@")
  [ ${#BENCH_ARGS[@]} -gt 0 ] || BENCH_ARGS=(--n 1024,4096,16384,32768 --d 64,128 --dtype f32,f16 --causal 0,1)
  "$BUILD/bench/flashcl-bench" "${BENCH_ARGS[@]}" --csv "$OUT/flashcl.csv" > "$OUT/bench.log" 2>/dev/null || status=1
  cat "$OUT/bench.log"
  # PyTorch on the same shapes, in the same run.
  TORCH_ARGS=$(torch_args "${BENCH_ARGS[@]}")
  python3 bench/torch_sdpa.py $TORCH_ARGS --csv "$OUT/torch.csv" 2>>"$OUT/bench.log" || status=1
  python3 bench/compare.py "$OUT/flashcl.csv" "$OUT/torch.csv" | tee "$OUT/compare.md"
fi
if [ "$MODE" = decode ]; then
  # Decode and chunked prefill (the inference issue's shapes), flashcl and PyTorch in the same call:
  # flashcl's default plan (dense, and paged with PAGE_SIZE-key pages), then the same dense calls with
  # the decode kernel off (the kernels that ran them before it), the decode kernel's ptxas report.
  SHAPES=${1:-8:32:8:1:32768,1:32:8:1:131072,64:32:8:1:4096,1:32:8:512:16384,1:32:8:2048:16384,1:32:8:512:65536,1:32:8:2048:65536}
  D=${DECODE_D:-128}
  "$BUILD/bench/flashcl-bench" --decode "$SHAPES" --d "$D" --dtype f16 --page-size "${PAGE_SIZE:-256}" \
    --csv "$OUT/decode-flashcl.csv" > "$OUT/decode.log" 2>&1 || status=1
  cat "$OUT/decode.log"
  FLASHCL_KERNELS="decode:off;decode-tensor-core:off" "$BUILD/bench/flashcl-bench" --decode "${OFF_SHAPES:-8:32:8:1:32768,64:32:8:1:4096}" \
    --d "$D" --dtype f16 > "$OUT/decode-off.log" 2>&1 || status=1
  echo "decode kernel off:"; grep -E "^ +[0-9]" "$OUT/decode-off.log"
  FLASHCL_CACHE_DIR=off FLASHCL_BUILD_OPTIONS=-cl-nv-verbose "$BUILD/bench/flashcl-bench" --verbose \
    --decode 8:32:8:1:4096 --d "$D" --dtype f16,bf16,f32 --warmup 0 --reps 1 2>&1 \
    | grep -E "ptxas info    : Used|spill|bytes stack|flash_decode" | head -20 | tee "$OUT/decode-ptxas.log"
  python3 bench/torch_sdpa.py --decode "$SHAPES" --d "$D" --dtype f16 --csv "$OUT/decode-torch.csv" \
    2>>"$OUT/decode.log" || status=1
  python3 bench/compare.py "$OUT/decode-flashcl.csv" "$OUT/decode-torch.csv" | tee "$OUT/decode-compare.md"
fi
if [ "$MODE" = decode-table ]; then
  # The decode table (docs/perf.md, "Decode at the memory wall"): f16, one query a sequence, a dense cache,
  # B:Hq:Hkv:Nq:Nk. Not the whole cross product: at each head dim
  #   - every group size at B = 8, 32k keys, 8 KV heads (8:8, 32:8, 40:8, 56:8, 64:8, 128:8: the same K+V
  #     bytes, only the group's rows change);
  #   - batch and cache length at 32:8 (Llama 3 8B's group of 4), 1 x 4k up to 64 x 32k (8.6 GB at d = 128);
  #   - real odd and large groups at the extremes (1 x 128k, 64 x 4k): d = 128 Qwen2.5 7B's 28:4 (7), MHA
  #     32:32 (1), 40:8 (5), 128:8 (16); d = 64 Qwen2.5 0.5B's 14:2 (7); d = 256 Gemma 2B's 8:1 (8).
  # 45 shapes, 66 GB of K+V in all, at most 8.6 GB a shape (host and device). Then four d = 128 shapes paged
  # (PAGE_SIZE-key pages) against dense in one flashcl-bench call. Each step is cut at DT_STEP_TIMEOUT
  # seconds; a shape flashcl or PyTorch refuses or cannot hold is a row saying so.
  declare -A DT_SHAPES
  DT_SWEEP=8:8:8:1:32768,8:32:8:1:32768,8:40:8:1:32768,8:56:8:1:32768,8:64:8:1:32768,8:128:8:1:32768
  DT_SHAPES[128]=$DT_SWEEP,1:32:8:1:4096,1:32:8:1:32768,1:32:8:1:131072,4:32:8:1:16384,16:32:8:1:8192
  DT_SHAPES[128]+=,8:32:8:1:131072,32:32:8:1:32768,64:32:8:1:4096,64:32:8:1:32768
  DT_SHAPES[128]+=,1:28:4:1:131072,16:28:4:1:32768,64:28:4:1:4096,1:32:32:1:131072,64:32:32:1:4096
  DT_SHAPES[128]+=,1:40:8:1:131072,1:128:8:1:131072,64:128:8:1:4096
  DT_SHAPES[64]=$DT_SWEEP,1:32:8:1:131072,64:32:8:1:4096,64:32:8:1:32768,1:14:2:1:131072,64:14:2:1:4096
  DT_SHAPES[256]=$DT_SWEEP,1:32:8:1:131072,64:32:8:1:4096,32:32:8:1:16384,1:8:1:1:131072,64:8:1:1:8192
  DT_PAGED=8:32:8:1:32768,1:32:8:1:131072,64:32:8:1:4096,1:28:4:1:131072
  # DT_NK_DIV: every cache length divided (at least 16 keys), to check the flow on a small device.
  dt_scale() {
    local div=${DT_NK_DIV:-1} item out='' IFS=,
    for item in $1; do
      local nk=${item##*:} nk_div
      nk_div=$((nk / div)); [ "$nk_div" -ge 16 ] || nk_div=16
      out+=${out:+,}${item%:*}:$nk_div
    done
    echo "$out"
  }
  DT_CALLS=${DT_CALLS:-1} STEP=${DT_STEP_TIMEOUT:-240}
  # The copy ceiling of the card that runs the table (an H100's is not an H200's), unless COPY_CEILING names one.
  if [ -z "${COPY_CEILING:-}" ]; then
    COPY_CEILING=$("$BUILD/bench/flashcl-probe" --json 2>/dev/null |
      python3 -c 'import json,sys; print(round(json.load(sys.stdin)["probed"]["copy_gb_s"]))' 2>/dev/null) || COPY_CEILING=4204
    echo "copy ceiling measured by flashcl-probe: $COPY_CEILING GB/s" | tee "$OUT/decode-table-ceiling.txt"
  fi
  dt_failed() {  # STEP_NAME EXIT_STATUS LOG: status=1, and a line in LOG saying how the step ended
    status=1
    if [ "$2" -eq 124 ]; then echo "$1: cut at $STEP s (the rows it wrote are kept)"; else echo "$1: exit $2"; fi >> "$3"
  }
  # Each layout of DT_LAYOUTS (bnhd: [B, Nk, Hkv, d], flashcl's KV cache; bhnd: [B, Hkv, Nk, d], PyTorch's
  # usual): flashcl and PyTorch both on that layout, so each table compares the same bytes read the same way.
  DT_LAYOUTS=${DT_LAYOUTS:-bnhd bhnd}
  : > "$OUT/decode-table.log"
  declare -A fl_csvs torch_csvs
  for layout in $DT_LAYOUTS; do
    for d in 64 128 256; do
      shapes=$(dt_scale "${DT_SHAPES[$d]}")
      csv=$OUT/decode-table-flashcl-$layout-d$d.csv
      timeout "$STEP" "$BUILD/bench/flashcl-bench" --decode "$shapes" --d "$d" --dtype f16 --calls "$DT_CALLS" \
        --kv-layout "$layout" --csv "$csv" >> "$OUT/decode-table.log" 2>&1 ||
        dt_failed "flashcl-bench $layout d=$d" $? "$OUT/decode-table.log"
      fl_csvs[$layout]+=${fl_csvs[$layout]:+,}$csv
    done
  done
  paged=$(dt_scale "$DT_PAGED")
  timeout "$STEP" "$BUILD/bench/flashcl-bench" --decode "$paged" --d 128 --dtype f16 --page-size "${PAGE_SIZE:-256}" \
    --calls "$DT_CALLS" --csv "$OUT/decode-table-paged.csv" >> "$OUT/decode-table.log" 2>&1 ||
    dt_failed "flashcl-bench paged" $? "$OUT/decode-table.log"
  grep -E "^ +[0-9]|^flashcl-bench .*: (exit|cut)|dense cache as" "$OUT/decode-table.log"
  for layout in $DT_LAYOUTS; do  # PyTorch on the identical shapes and layout, after flashcl's, in the same call
    for d in 64 128 256; do
      shapes=$(dt_scale "${DT_SHAPES[$d]}")
      csv=$OUT/decode-table-torch-$layout-d$d.csv
      timeout "$STEP" python3 bench/torch_sdpa.py --decode "$shapes" --d "$d" --dtype f16 --backends fa2,cudnn \
        --kv-layout "$layout" --calls "$DT_CALLS" --csv "$csv" 2>>"$OUT/decode-table-torch.log" ||
        dt_failed "torch_sdpa.py $layout d=$d" $? "$OUT/decode-table-torch.log"
      torch_csvs[$layout]+=${torch_csvs[$layout]:+,}$csv
    done
  done
  # what PyTorch refused or could not hold, and why; an exit and its error where a step failed whole
  grep -E "^torch_sdpa|^[A-Za-z.]*Error" "$OUT/decode-table-torch.log" 2>/dev/null
  {
    echo "copy ceiling: $COPY_CEILING GB/s"
    for layout in $DT_LAYOUTS; do
      echo
      echo "## Decode, f16, dense $layout: flashcl against PyTorch's FA2 and cuDNN on the same layout in the same call (calls back to back: $DT_CALLS)"
      echo
      python3 bench/compare.py --ceiling "$COPY_CEILING" --l2-mb "${L2_MB:-50}" "${fl_csvs[$layout]}" \
        "${torch_csvs[$layout]}"
    done
    first=${DT_LAYOUTS%% *}
    echo
    echo "## Paged (${PAGE_SIZE:-256}-key pages) against dense, d = 128 (PyTorch: dense $first)"
    echo
    python3 bench/compare.py --ceiling "$COPY_CEILING" --l2-mb "${L2_MB:-50}" \
      "$OUT/decode-table-paged.csv" "${torch_csvs[$first]}"
  } | tee "$OUT/decode-table.md"
fi
if [ "$MODE" = decode-sweep ]; then
  # decode-tensor-core's tiles forced through FLASHCL_KERNELS: each "W,N" (warps, keys a block; the buffers
  # follow from local memory) on SWEEP_SHAPES at each SWEEP_D, f16, dense [B, Nk, Hkv, d]; SWEEP_SPLITS
  # ("S S ...", default the planner's) forces split counts too. One table of K+V GB/s per head dim.
  SHAPES=${SWEEP_SHAPES:-8:32:8:1:32768,1:32:8:1:131072,64:32:8:1:4096,64:28:4:1:4096}
  for d in ${SWEEP_D:-128}; do
    for wn in ${1:-4,64 4,128 8,128 2,32}; do
      for splits in ${SWEEP_SPLITS:-plan}; do
        opts="decode-tensor-core:warps=${wn%,*},block_n=${wn#*,}"
        [ "$splits" = plan ] || opts+=",splits=$splits"
        echo "== d=$d $opts"
        FLASHCL_KERNELS=$opts "$BUILD/bench/flashcl-bench" --decode "$SHAPES" --d "$d" --dtype f16 \
          --csv "$OUT/decode-sweep-d$d-${wn/,/x}-$splits.csv" 2>&1 | grep -E "^ +[0-9]|error|ERROR" || status=1
      done
    done
  done | tee "$OUT/decode-sweep.log"
fi
if [ "$MODE" = decode-merge-ab ]; then
  # Split-KV decode merged in place (merge=in-place) against the combine step (the default), AB_ROUNDS rounds
  # interleaved on SHAPES (split shapes: few sequences, long caches) at each SWEEP_D, f16, dense.
  SHAPES=${1:-1:32:8:1:4096,1:32:8:1:32768,1:32:8:1:131072,4:32:8:1:16384,8:32:8:1:32768,1:28:4:1:131072,1:8:1:1:131072}
  for r in $(seq "${AB_ROUNDS:-2}"); do
    for d in ${SWEEP_D:-64 128 256}; do
      for merge in in-place separate; do
        echo "== round $r d=$d merge=$merge"
        FLASHCL_KERNELS="decode-tensor-core:merge=$merge" "$BUILD/bench/flashcl-bench" --decode "$SHAPES" --d "$d" \
          --dtype f16 --csv "$OUT/merge-ab-$merge-d$d-r$r.csv" 2>&1 | grep -E "^ +[0-9]|error|ERROR" || status=1
      done
    done
  done | tee "$OUT/decode-merge-ab.log"
fi
if [ "$MODE" = varlen ]; then
  # Varlen prefill of a realistic length mix, flashcl and PyTorch on the identical list in the same call.
  # GQA 32:8: heads·d = 4096 at d = 128 and 2048 at d = 64, the sweep's range. The mix is drawn by
  # Python's own Mersenne Twister from a fixed seed (no torch, no numpy): the same list on every machine.
  LENGTHS=${1:-$(python3 - "${VARLEN_COUNT:-64}" "${VARLEN_MIN:-100}" "${VARLEN_MAX:-8000}" "${VARLEN_SEED:-1}" <<'PY'
import math, random, sys
count, lo, hi, seed = (int(x) for x in sys.argv[1:])
rng = random.Random(seed)
print(",".join(str(round(math.exp(rng.uniform(math.log(lo), math.log(hi))))) for _ in range(count)))
PY
)}
  echo "varlen lengths: $LENGTHS" | tee "$OUT/varlen-lengths.txt"
  VARLEN_ARGS=(--varlen "$LENGTHS" --heads "${VARLEN_HEADS:-32:8}" --d "${VARLEN_D:-128,64}" --dtype "${VARLEN_DTYPE:-f16,bf16}"
               --causal 0,1 --warmup 2 --reps "${VARLEN_REPS:-10}")
  "$BUILD/bench/flashcl-bench" "${VARLEN_ARGS[@]}" --csv "$OUT/varlen-flashcl.csv" > "$OUT/varlen.log" 2>&1 || status=1
  cat "$OUT/varlen.log"
  python3 bench/torch_varlen.py "${VARLEN_ARGS[@]}" --csv "$OUT/varlen-torch.csv" 2>>"$OUT/varlen.log" || status=1
  grep "^torch_varlen:" "$OUT/varlen.log"  # the ways PyTorch refused, and why
  python3 bench/compare.py "$OUT/varlen-flashcl.csv" "$OUT/varlen-torch.csv" | tee "$OUT/varlen-compare.md"
fi
if [ "$MODE" = probe ]; then
  "$BUILD/bench/flashcl-probe" > "$OUT/probe.txt" 2>&1 || status=1
  "$BUILD/bench/flashcl-probe" --json > "$OUT/probe.json" 2>/dev/null || status=1
  cat "$OUT/probe.txt"
  "$BUILD/bench/flashcl-probe" --tune --quick --out "$OUT/tuning.txt" > "$OUT/tune.log" 2>/dev/null || status=1
  cat "$OUT/tune.log" | tail -8
  SHAPES=(--n 16384 --d 64,128 --dtype f32,f16 --causal 0,1 --paths flash --reps 10)
  FLASHCL_TUNING= "$BUILD/bench/flashcl-bench" "${SHAPES[@]}" > "$OUT/bench-untuned.log" 2>/dev/null || status=1
  FLASHCL_TUNING="$OUT/tuning.txt" "$BUILD/bench/flashcl-bench" "${SHAPES[@]}" > "$OUT/bench-tuned.log" 2>/dev/null || status=1
  echo "untuned:"; grep "^flash" "$OUT/bench-untuned.log"
  echo "tuned:"; grep "^flash" "$OUT/bench-tuned.log"
  FLASHCL_TUNING= meson test -C "$BUILD" --print-errorlogs >"$OUT/tests.log" 2>&1 || status=1
  grep -E "^ *[0-9]+/[0-9]+ " "$OUT/tests.log" | head -12
fi
if [ "$MODE" = ab ]; then
  BASE_TREE=${1:?bench/gpu-run.sh ab BASE_TREE [flashcl-bench options]}; shift
  BASE_BUILD=${BASE_BUILD:-/tmp/flashcl-base-build}  # one per base tree
  { [ -d "$BASE_BUILD" ] || meson setup "$BASE_BUILD" "$BASE_TREE" --buildtype=release >>"$OUT/build.log" 2>&1; } &&
    ninja -C "$BASE_BUILD" >>"$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
  BENCH_ARGS=("$@")
  [ ${#BENCH_ARGS[@]} -gt 0 ] || BENCH_ARGS=(--n 4096,16384 --d 64,128 --dtype f16 --causal 0,1)
  base_csvs='' new_csvs=''
  for round in $(seq 1 "${AB_ROUNDS:-2}"); do  # interleaved, so drift over the call falls on both
    "$BASE_BUILD/bench/flashcl-bench" --paths flash "${BENCH_ARGS[@]}" --csv "$OUT/ab-base-$round.csv"       > "$OUT/ab-base-$round.log" 2>&1 || status=1
    "$BUILD/bench/flashcl-bench" --paths flash "${BENCH_ARGS[@]}" --csv "$OUT/ab-new-$round.csv"       > "$OUT/ab-new-$round.log" 2>&1 || status=1
    base_csvs+=${base_csvs:+,}$OUT/ab-base-$round.csv new_csvs+=${new_csvs:+,}$OUT/ab-new-$round.csv
  done
  TORCH_ARGS=$(torch_args "${BENCH_ARGS[@]}")
  # shellcheck disable=SC2086  # TORCH_ARGS: words on purpose
  python3 bench/torch_sdpa.py $TORCH_ARGS --csv "$OUT/ab-torch.csv" 2>>"$OUT/ab-torch.log" || status=1
  python3 bench/ab.py "$base_csvs" "$new_csvs" "$OUT/ab-torch.csv" | tee "$OUT/ab.md"
fi
if [ "$MODE" = options-ab ]; then
  # Build options A/B in one call, one build: VARIANTS ('|'-separated FLASHCL_BUILD_OPTIONS values, the
  # first the base; "-" is none) each run on the same shapes, AB_ROUNDS (2) rounds interleaved, under
  # each of AB_KERNELS (';'-separated FLASHCL_KERNELS values, "-" the default plan; e.g.
  # "-;tensor-core-wgmma:off" for wgmma and mma.sync); PyTorch once, first; bench/ab.py, every variant
  # against the first. Everything lands in $OUT/options-ab.tgz and options-ab.md (the call returns 8 files at most).
  VARIANTS=${1:?bench/gpu-run.sh options-ab "OPTS|OPTS|..." [flashcl-bench options]}; shift
  BENCH_ARGS=("$@")
  [ ${#BENCH_ARGS[@]} -gt 0 ] || BENCH_ARGS=(--n 4096,16384 --d 64,128 --dtype f16 --causal 0,1)
  W=$(mktemp -d)
  IFS='|' read -r -a variants <<< "$VARIANTS"
  IFS=';' read -r -a kernel_sets <<< "${AB_KERNELS:--}"
  TORCH_ARGS=$(torch_args "${BENCH_ARGS[@]}")
  # shellcheck disable=SC2086  # TORCH_ARGS: words on purpose
  python3 bench/torch_sdpa.py $TORCH_ARGS --csv "$W/torch.csv" 2>>"$W/torch.log" || status=1
  for round in $(seq 1 "${AB_ROUNDS:-2}"); do
    for ki in "${!kernel_sets[@]}"; do
      kern=${kernel_sets[$ki]}; [ "$kern" = - ] && kern=
      for vi in "${!variants[@]}"; do
        opts=${variants[$vi]}; [ "$opts" = - ] && opts=
        FLASHCL_KERNELS=$kern FLASHCL_BUILD_OPTIONS=$opts "$BUILD/bench/flashcl-bench" --paths flash "${BENCH_ARGS[@]}" \
          --csv "$W/k$ki-v$vi-r$round.csv" > "$W/k$ki-v$vi-r$round.log" 2>&1 || status=1
        tar czf "$OUT/options-ab.tgz" -C "$W" .  # so far: a call cut short still returns the runs made
      done
    done
  done
  [ ${#variants[@]} -ge 2 ] || [ ${#kernel_sets[@]} -ge 2 ] ||
    echo "options-ab: one variant ('$VARIANTS') and one kernel set: nothing to compare" >&2
  for ki in "${!kernel_sets[@]}"; do
    # each kernel set against the first, on the first variant (kernel options A/B: AB_KERNELS "-;k:block_n=..")
    [ "$ki" -eq 0 ] || ab_compare 0 0 "$ki" 0 \
      "FLASHCL_BUILD_OPTIONS='${variants[0]}': FLASHCL_KERNELS='${kernel_sets[0]}' -> '${kernel_sets[$ki]}'"
    for vi in "${!variants[@]}"; do
      [ "$vi" -eq 0 ] || ab_compare "$ki" 0 "$ki" "$vi" \
        "FLASHCL_KERNELS=${kernel_sets[$ki]}: '${variants[0]}' -> '${variants[$vi]}'"
    done
  done | tee "$OUT/options-ab.md"
  tar czf "$OUT/options-ab.tgz" -C "$W" .
fi
if [ "$MODE" = pairs-ab ]; then
  # Where a kernel shape needs its own build options (a register cap, a buffer count), options-ab's cross product
  # would time every shape under every option; here each kernel set comes with its own.
  PAIRS=${1:?bench/gpu-run.sh pairs-ab "KERNELS@OPTS;..." [flashcl-bench options]}; shift
  BENCH_ARGS=("$@")
  [ ${#BENCH_ARGS[@]} -gt 0 ] || BENCH_ARGS=(--n 4096,16384 --d 64,128 --dtype f16 --causal 0,1)
  W=$(mktemp -d)
  IFS=';' read -r -a pairs <<< "$PAIRS"
  pair_kernels() { local k=${1%%@*}; [ "$k" = - ] && k=; echo "$k"; }
  pair_options() { local o=${1#*@}; [ "$o" = - ] && o=; echo "$o"; }
  for pi in "${!pairs[@]}"; do  # registers and spills as the driver built each pair (first shape, each dtype, mask)
    FLASHCL_CACHE_DIR=off FLASHCL_KERNELS=$(pair_kernels "${pairs[$pi]}") \
      FLASHCL_BUILD_OPTIONS="-cl-nv-verbose $(pair_options "${pairs[$pi]}")" "$BUILD/bench/flashcl-bench" --verbose \
      --paths flash "${BENCH_ARGS[@]}" --warmup 0 --reps 1 2>&1 \
      | grep -E "ptxas info    : Used|spill stores|error|refused" | sort | uniq -c | sed "s/^/[pair $pi] /" | tee -a "$W/ptxas.log"
  done
  TORCH_ARGS=$(torch_args "${BENCH_ARGS[@]}")
  # shellcheck disable=SC2086  # TORCH_ARGS: words on purpose
  python3 bench/torch_sdpa.py $TORCH_ARGS --csv "$W/torch.csv" 2>>"$W/torch.log" || status=1
  for round in $(seq 1 "${AB_ROUNDS:-2}"); do
    for pi in "${!pairs[@]}"; do
      FLASHCL_KERNELS=$(pair_kernels "${pairs[$pi]}") FLASHCL_BUILD_OPTIONS=$(pair_options "${pairs[$pi]}") \
        "$BUILD/bench/flashcl-bench" --paths flash "${BENCH_ARGS[@]}" --csv "$W/k$pi-v0-r$round.csv" \
        > "$W/k$pi-v0-r$round.log" 2>&1 || status=1
      tar czf "$OUT/pairs-ab.tgz" -C "$W" .  # so far: a call cut short still returns the runs made
    done
  done
  for pi in "${!pairs[@]}"; do
    [ "$pi" -eq 0 ] || ab_compare 0 0 "$pi" 0 "'${pairs[0]}' -> '${pairs[$pi]}'"
  done | tee "$OUT/pairs-ab.md"
  tar czf "$OUT/pairs-ab.tgz" -C "$W" .
fi
if [ "$MODE" = variants ]; then
  VARIANTS=${1:?bench/gpu-run.sh variants "FLAGS|FLAGS|..." [flashcl-bench options]}; shift
  BENCH_ARGS=("$@")
  [ ${#BENCH_ARGS[@]} -gt 0 ] || BENCH_ARGS=(--n 4096,16384 --d 64,128 --dtype f16 --causal 0,1 --pass forward,backward)
  W=$(mktemp -d)
  IFS='|' read -r -a variants <<< "$VARIANTS"
  TORCH_ARGS=$(torch_args "${BENCH_ARGS[@]}")
  # shellcheck disable=SC2086  # TORCH_ARGS: words on purpose
  python3 bench/torch_sdpa.py $TORCH_ARGS --csv "$W/torch.csv" 2>>"$W/torch.log" || status=1
  for round in $(seq 1 "${AB_ROUNDS:-2}"); do
    for vi in "${!variants[@]}"; do
      flags=${variants[$vi]}; [ "$flags" = - ] && flags=
      # shellcheck disable=SC2086  # flags: words on purpose
      "$BUILD/bench/flashcl-bench" --paths flash "${BENCH_ARGS[@]}" $flags --csv "$W/k$vi-v0-r$round.csv" \
        > "$W/k$vi-v0-r$round.log" 2>&1 || status=1
      tar czf "$OUT/variants.tgz" -C "$W" .  # so far: a call cut short still returns the runs made
    done
  done
  for vi in "${!variants[@]}"; do
    [ "$vi" -eq 0 ] || ab_compare 0 0 "$vi" 0 "'${variants[0]}' -> '${variants[$vi]}'"
  done | tee "$OUT/variants.md"
  tar czf "$OUT/variants.tgz" -C "$W" .
fi
if [ "$MODE" = f32-sweep ]; then
  # Exact f32 tiles of the register-tiled kernel ("block_m,block_n"), then TF32 shapes
  # (warps,m_tiles,block_n), timed at N=16k; the forward and tile tests run first.
  if [ -z "${SKIP_TESTS:-}" ]; then
    "$BUILD/tests/test_forward" > "$OUT/forward.log" 2>&1 && echo "forward tests pass" || { status=1; grep -E ":F:|:E:" "$OUT/forward.log" | head; }
    "$BUILD/tests/test_tile" > "$OUT/tile.log" 2>&1 && echo "tile tests pass" || { status=1; grep -E ":F:|:E:" "$OUT/tile.log" | head; }
  fi
  SHAPES=(--n 16384 --d 64,128 --causal 0,1 --paths flash)
  TILES=${1:-64,64 64,32 32,64 128,32 32,32}
  CONFIGS=${2:-4,1,64 4,2,64 8,1,64 4,1,32}
  EXTRA=${FLASHCL_SWEEP_OPTIONS:-}
  for tile in $TILES; do
    FLASHCL_CACHE_DIR=off FLASHCL_KERNELS=$(shape_opts register-tiled "$tile") FLASHCL_BUILD_OPTIONS="-cl-nv-verbose $EXTRA" "$BUILD/bench/flashcl-bench" --verbose --dtype f32 \
      "${SHAPES[@]}" 2>&1 | grep -E "build options|ptxas info    : Used|spill stores|^flash " | sed "s/^/[f32 $tile $EXTRA] /" | tee -a "$OUT/sweep.log"
  done
  [ "$CONFIGS" = none ] && CONFIGS=
  for cfg in $CONFIGS; do
    FLASHCL_CACHE_DIR=off FLASHCL_KERNELS=$(shape_opts tf32 "$cfg") FLASHCL_BUILD_OPTIONS=-cl-nv-verbose "$BUILD/bench/flashcl-bench" --verbose --dtype tf32,tf32x3 \
      "${SHAPES[@]}" 2>&1 | grep -E "ptxas info    : Used|spill stores|^flash " | sed "s/^/[tf32 $cfg] /" | tee -a "$OUT/sweep.log"
  done
fi
if [ "$MODE" = mma-sweep ]; then
  CONFIGS=${1:-"4,1,64 4,2,64 4,2,32 8,1,64"}
  if [ -z "${SKIP_TESTS:-}" ]; then
    meson test -C "$BUILD" --print-errorlogs >"$OUT/tests.log" 2>&1 || status=1
    grep -E "^ *[0-9]+/[0-9]+ " "$OUT/tests.log" | head -10
  fi
  SHAPES=(--n 16384 --d "${SWEEP_D:-64,128}" --hidden "${SWEEP_HIDDEN:-2048}" --dtype f16 --causal 0,1 --paths flash)
  [ "$CONFIGS" = none ] && CONFIGS=
  for cfg in $CONFIGS; do
    # QUICK=1 times a shape without its forward-suite run (the bench still checks sampled rows).
    if [ -n "${QUICK:-}" ] || FLASHCL_KERNELS=$(shape_opts tensor-core "$cfg") "$BUILD/tests/test_tensor_cores" > "$OUT/forward-$cfg.log" 2>&1; then
      if [ -n "${QUICK:-}" ]; then echo "config $cfg: not tested (QUICK=1)"; else echo "config $cfg: forward tests pass"; fi
      FLASHCL_CACHE_DIR=off FLASHCL_KERNELS=$(shape_opts tensor-core "$cfg") FLASHCL_BUILD_OPTIONS=-cl-nv-verbose "$BUILD/bench/flashcl-bench" --verbose \
        "${SHAPES[@]}" --csv "$OUT/sweep-$cfg.csv" 2>&1 | grep -E "ptxas info    : Used|spill stores|^flash " \
        | sed "s/^/[$cfg] /" | tee -a "$OUT/sweep.log"
    else
      echo "config $cfg: forward tests FAIL"; grep -E ":F:|:E:" "$OUT/forward-$cfg.log" | head -5 | tee -a "$OUT/sweep.log"
    fi
    rm -f "$OUT/forward-$cfg.log"
  done
  if [ -z "${SKIP_TORCH:-}" ]; then
    python3 bench/torch_sdpa.py --n 16384 --d "${SWEEP_D:-64,128}" --hidden "${SWEEP_HIDDEN:-2048}" --dtype f16 --causal 0,1 --csv "$OUT/torch.csv" 2>/dev/null
    grep fa2 "$OUT/torch.csv" | tee -a "$OUT/sweep.log"
  fi
  rm -f "$OUT"/sweep-*.csv
fi
exit $status
