#!/usr/bin/env bash
# flashcl-probe end to end: its JSON report parses, --tune writes a tuning
# file with forward and backward entries, and the library (through
# flashcl-bench) loads that file's entries for this device and runs them
# correctly.
set -euo pipefail
probe=$1 bench=$2 dir=$3
mkdir -p "$dir"
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
configs=$((forward + backward))
# The library reads them for this device, and the bench (which checks O and
# dQ against the double reference) passes with them, both passes. That a
# backward line is what flashcl_backward_config then uses: test_tuning's
# backward_entry_used.
FLASHCL_TUNING="$dir/tuning.txt" "$bench" --quick --verbose --paths flash --pass forward,backward > "$dir/bench.log" 2>&1
grep -q "tuning file $dir/tuning.txt: $configs configuration(s) for this device" "$dir/bench.log"
echo "probe: $configs tuned configuration(s) ($backward backward) written, loaded and used"
