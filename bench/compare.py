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


def main():
    flashcl_rows = list(csv.DictReader(open(sys.argv[1])))
    torch_rows = list(csv.DictReader(open(sys.argv[2]))) if len(sys.argv) > 2 else []
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
