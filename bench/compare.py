#!/usr/bin/env python3
"""Joins flashcl-bench's CSV and torch_sdpa.py's CSV (same run, same shapes)
into one Markdown table of TFLOP/s with the ratios flashcl / FA2,
flashcl / mem-efficient and flashcl / standard. flashcl-bench --decode's CSV
joins torch_sdpa.py --decode's, and flashcl-bench --varlen's torch_varlen.py's
(the mode column of the first says which).

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


def varlen_table(flashcl_rows, torch_rows):
    """flashcl-bench --varlen against torch_varlen.py on the same lengths: TFLOP/s of the packed batch,
    of the dense call of the same tokens, and of PyTorch's varlen ways."""
    def vkey(r):
        return tuple(int(r[c]) for c in ("sequences", "total_tokens", "heads_q", "heads_kv", "d")) + (
            r["dtype"], int(r["causal"]))
    torch = {}
    for r in torch_rows:
        if r.get("mode") == "varlen" and r.get("status") == "ok":
            # "*": K and V repeated to Hq heads, the API refused GQA
            mark = "*" if r.get("gqa") == "kv-repeated" else ""
            torch.setdefault(vkey(r), {})[r["backend"]] = (float(r["tflops"]), mark)

    def tf(entry):
        return f"{entry[0]:.1f}{entry[1]}" if entry else "—"

    cols = ["d", "dtype", "causal", "seqs", "tokens", "kernel", "flashcl ms", "flashcl TFLOP/s", "dense B×N",
            "dense kernel", "dense TFLOP/s", "varlen/dense", "FA2 varlen", "nested", "per-seq", "FA2 dense",
            "flashcl/FA2 varlen"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in flashcl_rows:
        t = torch.get(vkey(r), {})
        ok, dense_ok = r["status"] == "FLASHCL_SUCCESS", r["dense_status"] == "FLASHCL_SUCCESS"
        ours = float(r["tflops"]) if ok else None
        fa2 = t.get("fa2_varlen")
        print("| " + " | ".join([
            r["d"], r["dtype"], r["causal"], r["sequences"], r["total_tokens"], r["kernel"] or "—",
            f"{float(r['median_ms']):.3f}" if ok else r["status"], f"{ours:.1f}" if ok else "—",
            f"{r['dense_batch']}×{r['dense_N']}", r["dense_kernel"] or "—",
            f"{float(r['dense_tflops']):.1f}" if dense_ok else r["dense_status"],
            f"{float(r['varlen_over_dense']):.2f}×" if ok and dense_ok else "—",
            tf(fa2), tf(t.get("nested_fa2")), tf(t.get("per_seq_fa2")), tf(t.get("fa2_dense")),
            f"{ours / fa2[0]:.2f}×" if ours is not None and fa2 and fa2[0] > 0 else "—"]) + " |")
    print("\nTFLOP/s = 4·L²·d·Hq summed over the sequences (halved when causal); dense: one call of batch = "
          "sequences, N = the mean length rounded (its own FLOPs). * K/V repeated to Hq heads (the API refused GQA).")


def main():
    flashcl_rows = list(csv.DictReader(open(sys.argv[1])))
    torch_rows = list(csv.DictReader(open(sys.argv[2]))) if len(sys.argv) > 2 else []
    if flashcl_rows and flashcl_rows[0].get("mode", "").startswith("decode"):
        return decode_table(flashcl_rows, torch_rows)
    if flashcl_rows and flashcl_rows[0].get("mode") == "varlen":
        return varlen_table(flashcl_rows, torch_rows)
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
