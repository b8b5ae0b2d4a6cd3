#!/usr/bin/env python3
"""A/B of two flashcl builds on the same shapes in one device call (bench/gpu-run.sh ab).

    bench/ab.py BASE.csv[,BASE2.csv] NEW.csv[,NEW2.csv] [TORCH.csv]

Each side may be several flashcl-bench CSVs of the same shapes (runs interleaved base, new, base, new, so
drift over the call falls on both): a row's TFLOP/s is the median over its runs. Prints a Markdown table
joined on (pass, N, d, dtype, causal): base, new, the change, and where PyTorch's CSV (bench/torch_sdpa.py)
is given the new build against FlashAttention-2 and cuDNN. The errors against the double reference are
compared: a row whose error differs between the builds is marked, since a change meant only to move work
in time keeps them to the digit."""
import csv
import os
import statistics
import sys


def key(r):
    return (r.get("pass", "forward"), r["N"], r["d"], r["dtype"], r["causal"])


def load(paths):
    runs = {}
    for path in paths.split(","):
        with open(path) as f:
            for r in csv.DictReader(f):
                if r["status"] == "FLASHCL_SUCCESS":
                    runs.setdefault(key(r), []).append(r)
    return runs


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    base, new = load(sys.argv[1]), load(sys.argv[2])
    torch = {}
    if len(sys.argv) == 4 and not os.path.exists(sys.argv[3]):
        print(f"ab.py: {sys.argv[3]}: no PyTorch figures (not written?); the ratios are left out", file=sys.stderr)
    elif len(sys.argv) == 4:
        with open(sys.argv[3]) as f:
            for r in csv.DictReader(f):
                if r.get("status", "ok") == "ok":
                    torch[(r.get("pass", "forward"), r["N"], r["d"], r["dtype"], r["causal"], r["backend"])] = float(r["tflops"])
    print("| pass | N | d | dtype | causal | base TFLOP/s | new TFLOP/s | change | new × FA2 | new × cuDNN | err (new) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for k in sorted(new, key=lambda k: (k[0], int(k[2]), k[3], k[4], int(k[1]))):
        tn = statistics.median(float(r["tflops"]) for r in new[k])
        tb = statistics.median(float(r["tflops"]) for r in base[k]) if k in base else float("nan")
        errs_new = {r["err_ref"] for r in new[k]}
        errs_base = {r["err_ref"] for r in base.get(k, [])}
        err = ", ".join(sorted(errs_new)) + ("" if not errs_base or errs_base == errs_new else
                                              " (base " + ", ".join(sorted(errs_base)) + ")")
        ratio = lambda backend: f"{tn / torch[k + (backend,)]:.2f}" if k + (backend,) in torch else ""
        print(f"| {' | '.join(k)} | {tb:.4g} | {tn:.4g} | {100 * (tn / tb - 1):+.1f}% | {ratio('fa2')} | "
              f"{ratio('cudnn')} | {err} |")


if __name__ == "__main__":
    main()
