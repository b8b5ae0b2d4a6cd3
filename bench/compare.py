#!/usr/bin/env python3
"""Joins flashcl-bench's CSV and torch_sdpa.py's CSV (same run, same shapes)
into one Markdown table of TFLOP/s with the ratios flashcl / FA2,
flashcl / mem-efficient and flashcl / standard. flashcl-bench --decode's CSV
joins torch_sdpa.py --decode's, and flashcl-bench --varlen's torch_varlen.py's
(the mode column of the first says which).

    python3 bench/compare.py flashcl.csv torch.csv > compare.md
    python3 bench/compare.py --ceiling 4204 decode-flashcl.csv decode-torch.csv
        (decode: K+V GB/s against a copy ceiling in GB/s, × FA2 and × cuDNN, paged against dense)
"""
import argparse
import csv
import os
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


def decode_grid_table(flashcl_rows, torch_rows, ceiling, l2_mb):
    """flashcl-bench --decode against torch_sdpa.py --decode, as K+V GB/s against the copy ceiling (GB/s)
    with × FA2 and × cuDNN (speed: their time / flashcl's); where the CSV has paged rows too, a second table
    of paged against dense (the same flashcl-bench call). A shape PyTorch refused or could not hold shows
    the exception's name."""
    def dkey(r):
        return tuple(int(r[c]) for c in ("batch", "heads_q", "heads_kv", "Nq", "Nk", "d")) + (r["dtype"],)

    def kv_mb(k):
        b, _, hkv, _, nk, d, dtype = k
        return 2.0 * b * nk * hkv * d * (4 if dtype == "f32" else 2) / 1e6

    torch = {}
    for r in torch_rows:
        if r.get("mode", "decode") == "decode":
            ok = r.get("status") == "ok"
            torch.setdefault(dkey(r), {})[r["backend"]] = float(r["median_ms"]) if ok else r.get("status") or "?"
    dense, paged = {}, {}
    for r in flashcl_rows:
        (paged if r["mode"] == "decode-paged" else dense).setdefault(dkey(r), r)

    def ms_of(r):
        return float(r["median_ms"]) if r and r["status"] == "FLASHCL_SUCCESS" else None

    def gb(x):
        return "—" if not x else f"{x:.0f}" if x >= 100 else f"{x:.2f}"

    def vs(name, t, ms, k):
        x = t.get(name)
        if isinstance(x, float) and x > 0:
            return gb(kv_mb(k) / 1e3 / (x * 1e-3)), f"{x / ms:.2f}×" if ms else "—"
        return (x or "—"), "—"

    def short(n):
        return f"{n // 1024}k" if n % 1024 == 0 else str(n)

    cols = ["d", "B", "Nk", "group (Hq:Hkv)", "K+V MB", "kernel", "splits", "flashcl ms", "GB/s",
            f"% of {ceiling:g}", "FA2 GB/s", "× FA2", "cuDNN GB/s", "× cuDNN"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    near_l2 = False
    for k, r in dense.items():
        b, hq, hkv, nq, nk, d, dtype = k
        ms, t = ms_of(r), torch.get(k, {})
        gbs = 2.0 * b * nk * hkv * d * (4 if dtype == "f32" else 2) / (ms * 1e-3) / 1e9 if ms else None
        mark = "‡" if l2_mb and kv_mb(k) <= 2 * l2_mb else ""
        near_l2 = near_l2 or bool(mark)
        fa2, fa2_x = vs("fa2", t, ms, k)
        cudnn, cudnn_x = vs("cudnn", t, ms, k)
        group = f"{hq // hkv}{'' if nq == 1 else f'×{nq}'} ({hq}:{hkv})"
        print("| " + " | ".join([
            str(d) + ("" if dtype == "f16" else f" {dtype}"), str(b), short(nk), group, f"{kv_mb(k):.0f}{mark}",
            r["kernel"] or "—", r["splits"], f"{ms:.4f}" if ms else r["status"], gb(gbs),
            f"{100 * gbs / ceiling:.0f}%" if gbs else "—", fa2, fa2_x, cudnn, cudnn_x]) + " |")
    print(f"\nGB/s: K and V read once (2·B·Nk·Hkv·d·2 bytes for f16) over the median time; % of the copy ceiling "
          f"of {ceiling:g} GB/s; × FA2 / × cuDNN: their time over flashcl's (above 1: flashcl faster).")
    if near_l2:
        print(f"‡ K+V within twice the {l2_mb:g} MB L2: repeated runs may read part of it from L2, so its GB/s "
              "can pass what HBM gives.")
    if paged:
        print("\nPaged against dense, each pair from one flashcl-bench call:\n")
        cols = ["d", "B", "Nk", "group (Hq:Hkv)", "dense GB/s", "paged GB/s", "paged time / dense",
                "paged × FA2 (dense)"]
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
        for k, pr in paged.items():
            b, hq, hkv, nq, nk, d, dtype = k
            dms, pms = ms_of(dense.get(k)), ms_of(pr)
            fa2 = torch.get(k, {}).get("fa2")
            print("| " + " | ".join([
                str(d), str(b), short(nk), f"{hq // hkv} ({hq}:{hkv})",
                gb(float(dense[k]["kv_gb_s"])) if dms else (dense.get(k) or {}).get("status", "—"),
                gb(float(pr["kv_gb_s"])) if pms else pr["status"], f"{pms / dms:.3f}" if pms and dms else "—",
                f"{fa2 / pms:.2f}×" if pms and isinstance(fa2, float) else "—"]) + " |")


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


def read_rows(paths):
    """The rows of comma-separated CSV paths, one header each; a missing or empty file gives none."""
    rows = []
    for path in filter(None, (paths or "").split(",")):
        if os.path.exists(path) and os.path.getsize(path) > 0:
            with open(path, newline="") as f:
                rows += list(csv.DictReader(f))
        else:
            print(f"compare.py: {path} missing or empty; its columns stay blank", file=sys.stderr)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("flashcl", help="flashcl-bench's CSV (several: comma-separated)")
    ap.add_argument("torch", nargs="?", default="", help="torch_sdpa.py's or torch_varlen.py's CSV (several: commas)")
    ap.add_argument("--ceiling", type=float, default=0,
                    help="decode: the copy ceiling in GB/s; K+V GB/s as a share of it, × FA2 and × cuDNN")
    ap.add_argument("--l2-mb", type=float, default=0, help="decode, with --ceiling: mark K+V within twice this L2")
    args = ap.parse_args()
    flashcl_rows, torch_rows = read_rows(args.flashcl), read_rows(args.torch)
    if not flashcl_rows:
        print("compare.py: no flashcl rows", file=sys.stderr)
        return 1
    if flashcl_rows[0].get("mode", "").startswith("decode"):
        if args.ceiling > 0:
            return decode_grid_table(flashcl_rows, torch_rows, args.ceiling, args.l2_mb)
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
    sys.exit(main())
