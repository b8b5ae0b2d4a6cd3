#!/usr/bin/env bash
# flashcl-bench --varlen end to end in seconds (meson test bench_varlen): a few
# short sequences, GQA, both masks, f32 and f16, one rep; every call succeeds
# and its CSV joins in compare.py; bad lists and heads are refused; and
# torch_varlen.py parses the same arguments without torch (--dry-run).
set -euo pipefail
bench=$1 src=$2 dir=$3
mkdir -p "$dir"
args=(--varlen 1,17,64,100 --heads 4:2 --d 32 --causal 0,1)
"$bench" "${args[@]}" --dtype f32,f16 --warmup 0 --reps 1 --csv "$dir/varlen.csv" > "$dir/varlen.log" 2>&1 \
  || { cat "$dir/varlen.log"; exit 1; }
python3 - "$dir/varlen.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 4, rows
for r in rows:
    assert r["mode"] == "varlen" and r["status"] == r["dense_status"] == "FLASHCL_SUCCESS", r
    assert (r["sequences"], r["total_tokens"], r["min_len"], r["max_len"]) == ("4", "182", "1", "100"), r
    assert (r["heads_q"], r["heads_kv"], r["dense_batch"], r["dense_N"]) == ("4", "2", "4", "46"), r
    assert r["kernel"] and r["dense_kernel"] and float(r["median_ms"]) > 0 and float(r["dense_ms"]) > 0, r
PY
python3 "$src/compare.py" "$dir/varlen.csv" > "$dir/compare.md"
grep -q "^| 32 | f16 | 1 | 4 | 182 | " "$dir/compare.md" || { cat "$dir/compare.md"; exit 1; }
for bad in "" "1,,2" "0,5" "5,-3"; do
  if "$bench" --varlen "$bad" > /dev/null 2>&1; then echo "--varlen \"$bad\" was accepted"; exit 1; fi
done
for bad in 3:2 0:1 4: x; do
  if "$bench" --varlen 5 --heads "$bad" > /dev/null 2>&1; then echo "--heads \"$bad\" was accepted"; exit 1; fi
done
python3 "$src/torch_varlen.py" "${args[@]}" --dtype f16 --dry-run > "$dir/torch-dry-run.txt"
grep -qx "4 sequences, 182 tokens (1..100), heads 4:2; dense 4x46" "$dir/torch-dry-run.txt"
echo "varlen: 4 cases timed and joined; bad arguments refused; torch_varlen.py parses the same arguments"
