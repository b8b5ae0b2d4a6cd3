#!/usr/bin/env bash
# flashcl-probe end to end: its JSON report parses, --tune writes a tuning
# file with forward, backward and decode entries, and the library (through
# flashcl-bench) loads that file's entries for this device and runs them
# correctly, the decode entry's key block and split count included.
set -euo pipefail
probe=$1 bench=$2 dir=$3
mkdir -p "$dir"
# Runs "$@" with its output in $log, once more where it failed on LeakSanitizer's own crash at exit
# ("Tracer caught signal 11 ... LeakSanitizer has encountered a fatal error", CI's ASan run: twice in three
# runs on 2026-12-02, never in ten alone): that is not a leak found, which ("detected memory leaks") fails.
run_logged() {
  local log=$1; shift
  "$@" > "$log" 2>&1 && return 0
  grep -q "LeakSanitizer has encountered a fatal error" "$log" || return 1
  echo "probe: LeakSanitizer crashed (not a leak) in $*; once more" >&2
  "$@" > "$log" 2>&1
}
"$probe" --json --n 1024 --d 64 > "$dir/probe.json"
python3 - "$dir/probe.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p = r["probed"]
assert p["usable_local_mem"] > 0, p
assert p["copy_gb_s"] > 0 and p["fma_tflops"] > 0, p
assert r["roofline"]["standard_bytes"] > r["roofline"]["flash_bytes"] > 0, r["roofline"]
print("probe: usable local memory", p["usable_local_mem"], "bytes; copy", p["copy_gb_s"], "GB/s")
PY
"$probe" --tune --quick --n 128 --tokens 128 --hidden 64 --out "$dir/tuning.txt" 2>/dev/null
head -1 "$dir/tuning.txt" | grep -qx "flashcl-tuning 2"
forward=$(grep -c "|kind=forward|" "$dir/tuning.txt" || true)
backward=$(grep -c "|kind=backward|" "$dir/tuning.txt" || true)
[ "$forward" -ge 1 ] || { echo "probe: no kind=forward line"; exit 1; }
[ "$backward" -ge 1 ] || { echo "probe: no kind=backward line (the backward key was not tuned)"; exit 1; }
# The decode keys (f16 d=128): a group of 4 (rows=4) and one of 7, whose line is the kernel's rows, 8 (the
# library looks a group of 5..8 up as rows=8; a rows=7 line would make it ignore the whole file). The decode
# kernel, or where tensor cores take the key the tensor-core decode kernel.
decode_line() {  # rows
  grep -E "\|kind=forward\|kernel=decode(-tensor-core)?\|dtype=f16\|d=128\|mask=none\|rows=$1\|" "$dir/tuning.txt" ||
    true
}
line4=$(decode_line 4) line8=$(decode_line 8)
[ -n "$line4" ] && [ -n "$line8" ] ||
  { echo "probe: no decode line for rows 4 or 8 (groups 4 and 7):"; grep decode "$dir/tuning.txt"; exit 1; }
! grep -q "|rows=7|" "$dir/tuning.txt" || { echo "probe: a rows=7 line (the kernel's rows are 8)"; exit 1; }
field() {  # name line
  sed -n "s/.*|$1=\([a-z0-9-]*\)|.*/\1/p" <<<"$2"
}
for line in "$line4" "$line8"; do
  [ -n "$(field block_n "$line")" ] && [ -n "$(field splits "$line")" ] ||
    { echo "probe: a decode line lacks block_n or splits: $line"; exit 1; }
done
configs=$((forward + backward))
# The library reads them for this device, and the bench (which checks O and
# dQ against the double reference) passes with them, both passes. That a
# backward line is what flashcl_backward_config then uses: test_tuning's
# backward_entry_used.
FLASHCL_TUNING="$dir/tuning.txt" run_logged "$dir/bench.log" "$bench" --quick --verbose --paths flash --pass forward,backward
grep -q "tuning file $dir/tuning.txt: $configs configuration(s) for this device" "$dir/bench.log"
# Each decode key's timed grid at these options (flashcl-probe's decode_shape_of: --n keys, --tokens / --n
# sequences, --hidden / d query heads but one group at least): f16 d=128, 1 sequence, 4:1 and 7:1 heads, 128
# keys. Each call plans its line's key block and split count (the debug log of the forward) and is right.
for check in "4:1 $line4" "7:1 $line8"; do
  heads=${check%% *} line=${check#* }
  kernel=$(field kernel "$line") block_n=$(field block_n "$line") splits=$(field splits "$line")
  FLASHCL_TUNING="$dir/tuning.txt" run_logged "$dir/decode.log" "$bench" --decode "1:$heads:1:128" --d 128 --dtype f16 \
    --warmup 1 --reps 2 --verbose
  grep -q "forward: $kernel, $splits split(s), .*-DBLOCK_N=$block_n " "$dir/decode.log" ||
    { echo "probe: the decode call of $heads heads did not plan block_n=$block_n, splits=$splits"; exit 1; }
  echo "probe: decode $heads heads: block_n=$block_n splits=$splits from the tuning file"
done
echo "probe: $configs tuned configuration(s) ($backward backward) written, loaded and used"
