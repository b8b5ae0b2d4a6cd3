#!/usr/bin/env python3
"""Joins flashcl-bench's CSV and torch_sdpa.py's CSV (same run, same shapes)
into one Markdown table of TFLOP/s with the ratios flashcl / FA2,
flashcl / mem-efficient and flashcl / standard.

    python3 bench/compare.py flashcl.csv torch.csv > compare.md
"""
import csv
import sys


def key(row):
    return (row.get("pass", "forward"), int(row["N"]), int(row["d"]), row["dtype"], int(row["causal"]))


def decode_table(flashcl_rows, torch_rows):
    """flashcl-bench --decode against torch_sdpa.py --decode: ms and K+V GB/s."""
    def dkey(r):
        return tuple(int(r[c]) for c in ("batch", "heads_q", "heads_kv", "Nq", "Nk", "d")) + (r["dtype"],)
    torch = {}
    for r in torch_rows:
        if r.get("status") == "ok":
            torch.setdefault(dkey(r), {})[r["backend"]] = float(r["median_ms"])
    cols = ["batch", "Hq", "Hkv", "Nq", "Nk", "d", "dtype", "kernel", "splits", "flashcl ms", "K+V GB/s",
            "FA2 ms", "cuDNN ms", "flashcl/FA2 (speed)"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in flashcl_rows:
        k, t = dkey(r), torch.get(dkey(r), {})
        ok = r["status"] == "FLASHCL_SUCCESS"
        ms = float(r["median_ms"]) if ok else None
        fa2 = t.get("fa2")
        print("| " + " | ".join([*(str(x) for x in k), r["kernel"], r["splits"],
                                 f"{ms:.4f}" if ms else r["status"], r["kv_gb_s"] if ok else "—",
                                 f"{fa2:.4f}" if fa2 else "—", f"{t['cudnn']:.4f}" if "cudnn" in t else "—",
                                 f"{fa2 / ms:.2f}×" if ms and fa2 else "—"]) + " |")


def main():
    flashcl_rows = list(csv.DictReader(open(sys.argv[1])))
    torch_rows = list(csv.DictReader(open(sys.argv[2]))) if len(sys.argv) > 2 else []
    if flashcl_rows and flashcl_rows[0].get("mode", "").startswith("decode"):
        return decode_table(flashcl_rows, torch_rows)
    ours, torch = {}, {}
    for r in flashcl_rows:
        if r["status"] == "FLASHCL_SUCCESS":
            ours.setdefault(key(r), {})[r["path"]] = float(r["tflops"])
        else:
            ours.setdefault(key(r), {})[r["path"]] = r["status"]
    for r in torch_rows:
        if r["status"] == "ok":
            torch.setdefault(key(r), {})[r["backend"]] = float(r["tflops"])

    def fmt(x):
        return f"{x:.1f}" if isinstance(x, float) else ("—" if x is None else str(x))

    def ratio(a, b):
        return f"{a / b:.2f}×" if isinstance(a, float) and isinstance(b, float) and b > 0 else "—"

    cols = ["pass", "N", "d", "dtype", "causal", "flashcl", "standard", "FA2", "cuDNN", "mem-eff", "math",
            "flashcl/FA2", "flashcl/mem-eff", "flashcl/standard"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for k in sorted(ours, key=lambda k: (k[0], k[3], k[2], k[4], k[1])):
        o, t = ours[k], torch.get(k, {})
        flash, std = o.get("flash"), o.get("standard")
        print("| " + " | ".join([k[0], str(k[1]), str(k[2]), k[3], str(k[4]), fmt(flash), fmt(std),
                                 fmt(t.get("fa2")), fmt(t.get("cudnn")), fmt(t.get("mem_efficient")),
                                 fmt(t.get("math")), ratio(flash, t.get("fa2")),
                                 ratio(flash, t.get("mem_efficient")), ratio(flash, std)]) + " |")
    print("\nTFLOP/s = 4·B·H·N²·d / t (halved when causal; ×2.5 for the backward, ×3.5 for both); "
          "batch·N = 16k tokens, heads·d = 2048.")


if __name__ == "__main__":
    main()
