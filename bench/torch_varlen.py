#!/usr/bin/env python3
"""PyTorch's counterpart of flashcl-bench --varlen: one packed batch of
self-attention sequences of the given lengths (queries = keys), timed the
ways PyTorch users run varlen attention, each on its own so one API that
fails does not stop the others:

  fa2_varlen   torch.ops.aten._flash_attention_forward on the packed
               [total, H, d] tensors with int32 cumulative offsets (FA2's varlen)
  nested_fa2   nested tensors (torch.nested, layout=torch.jagged) through
               F.scaled_dot_product_attention, flash backend
  per_seq_fa2  one F.scaled_dot_product_attention call per sequence, flash
               backend, enable_gqa
  fa2_dense    one SDPA flash call of about the same tokens: batch = the
               sequences, N = their mean length rounded (flashcl-bench's dense column)

GQA is passed natively where an API takes it; where it refuses, K and V are
repeated to Hq heads before the timing and the row's gqa column says
"kv-repeated". CUDA events, warm-up, median of --reps; TFLOP/s = 4·L²·d·Hq
summed over the sequences (halved when causal), FlashAttention's convention,
as flashcl-bench counts it.

    python3 bench/torch_varlen.py --varlen 100,2000,517 --heads 32:8 --d 128 --dtype f16 --csv out.csv
    python3 bench/torch_varlen.py --varlen 100,2000,517 --dry-run   (parse and print the plan; no torch)
"""
import argparse
import csv
import math
import statistics
import sys

DTYPES = ("f16", "bf16")  # FlashAttention's dtypes
BACKENDS = ("fa2_varlen", "nested_fa2", "per_seq_fa2", "fa2_dense")


def lengths_arg(text):
    """'L1,L2,...' as flashcl-bench --varlen takes it: integers >= 1, no empty items."""
    items = text.split(",")
    if not text:
        raise argparse.ArgumentTypeError("the list is empty")
    if any(not x.strip() for x in items):
        raise argparse.ArgumentTypeError("expected comma-separated lengths (no empty items)")
    try:
        lengths = [int(x) for x in items]
    except ValueError:
        raise argparse.ArgumentTypeError("expected comma-separated integers") from None
    if min(lengths) < 1:
        raise argparse.ArgumentTypeError("every length must be at least 1")
    return lengths


def heads_arg(text):
    """'Hq:Hkv' (or 'H'): Hkv divides Hq."""
    try:
        parts = [int(x) for x in text.split(":")]
    except ValueError:
        raise argparse.ArgumentTypeError("expected Hq:Hkv, e.g. 32:8") from None
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2 or min(parts) < 1 or parts[0] % parts[1]:
        raise argparse.ArgumentTypeError("expected Hq:Hkv with Hq, Hkv >= 1 and Hkv dividing Hq")
    return tuple(parts)


def ints_arg(text):
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("expected comma-separated integers") from None


def dtypes_arg(text):
    names = text.split(",")
    bad = [x for x in names if x not in DTYPES]
    if bad:
        raise argparse.ArgumentTypeError(f"{','.join(bad)}: FlashAttention takes {' and '.join(DTYPES)}")
    return names


def causal_arg(text):
    values = ints_arg(text)
    if any(x not in (0, 1) for x in values):
        raise argparse.ArgumentTypeError("expected 0, 1 or 0,1")
    return values


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--varlen", type=lengths_arg, required=True, help="L1,L2,... the sequence lengths")
    ap.add_argument("--heads", type=heads_arg, default=(32, 8), help="Hq:Hkv (default 32:8)")
    ap.add_argument("--d", type=ints_arg, default=[64, 128], help="head dims (default 64,128)")
    ap.add_argument("--dtype", type=dtypes_arg, default=["f16"], help="f16,bf16 (default f16)")
    ap.add_argument("--causal", type=causal_arg, default=[0, 1], help="0,1 (default 0,1)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    ap.add_argument("--reps", type=int, default=10, help="timed runs, median reported (default 10)")
    ap.add_argument("--csv", help="the results as CSV (required unless --dry-run)")
    ap.add_argument("--dry-run", action="store_true", help="print the cases and their FLOPs; torch is not imported")
    args = ap.parse_args(argv)
    if any(d < 1 or d > 256 for d in args.d):
        ap.error("--d: head dims must be 1..256")
    if args.warmup < 0 or args.reps < 1:
        ap.error("--warmup must be >= 0 and --reps >= 1")
    if not args.dry_run and not args.csv:
        ap.error("--csv is required (or --dry-run)")
    return args


def varlen_flops(lengths, d, heads_q, causal):
    """FlashAttention's count, summed per sequence: 4·L²·d·Hq, halved when causal."""
    return sum(4.0 * n * n * d * heads_q for n in lengths) * (0.5 if causal else 1.0)


def dense_shape(lengths):
    """flashcl-bench's dense comparison: batch = the sequences, N = the mean length rounded half up."""
    count = len(lengths)
    return count, (sum(lengths) + count // 2) // count


def cases(args):
    for d in args.d:
        for dtype_name in args.dtype:
            for causal in args.causal:
                yield d, dtype_name, causal


def median_ms(torch, fn, warmup, reps):
    """Median of reps CUDA-event timings of fn() after warmup untimed calls."""
    times = []
    for i in range(warmup + reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def run_case(torch, args, d, dtype_name, causal, write):
    """The four ways on one (d, dtype, causal); write(backend, gqa, ms, tflops, status) per way."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    lengths, (heads_q, heads_kv) = args.varlen, args.heads
    dev = torch.device("cuda")
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    total, longest, shortest = sum(lengths), max(lengths), min(lengths)
    batch, n = dense_shape(lengths)
    rows = max(total, batch * n)  # the dense call reads the first batch·N rows, as flashcl-bench's does
    gen = torch.Generator(device=dev).manual_seed(total * 131 + d)

    def rand(heads):
        return torch.rand((rows, heads, d), device=dev, generator=gen).mul_(2).sub_(1).to(dtype)

    q, k, v = rand(heads_q), rand(heads_kv), rand(heads_kv)
    group = heads_q // heads_kv
    scale = 1.0 / math.sqrt(d)
    offsets = [0]
    for length in lengths:
        offsets.append(offsets[-1] + length)
    cu_seqlens = torch.tensor(offsets, dtype=torch.int32, device=dev)
    flops = varlen_flops(lengths, d, heads_q, causal)

    def repeated(x):  # [rows, Hkv, d] -> [rows, Hq, d]: what a user does where GQA is refused
        return x.repeat_interleave(group, dim=1)

    def timed(backend, make_call, total_flops):
        """make_call(gqa_native) -> a no-argument call; first with native GQA, else with K/V repeated.
        SDPA is held to its flash backend (the aten call is FA2 itself)."""
        attempts = [True, False] if group > 1 else [True]
        error = None
        for native in attempts:
            try:
                with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                    call = make_call(native)
                    call()  # refuses here, or runs
                    torch.cuda.synchronize()
                    ms = median_ms(torch, call, args.warmup, args.reps)
            except Exception as e:  # an API that refuses this shape, dtype or GQA
                error = e
                print(f"torch_varlen: {backend} (gqa {'native' if native else 'kv-repeated'}) d={d} {dtype_name} "
                      f"causal={causal}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                      file=sys.stderr)
                torch.cuda.synchronize()
                continue
            write(backend, "native" if native or group == 1 else "kv-repeated", ms,
                  total_flops / (ms * 1e-3) / 1e12, "ok")
            return
        write(backend, "", None, None, type(error).__name__)

    # (a) FA2's varlen kernel, as nested SDPA calls it (torch/nested/_internal/sdpa.py): packed
    # [total, H, d], int32 cumulative offsets, the longest lengths; returns (out, lse, rng, unused, mask).
    def fa2_varlen(native):
        qv = q[:total]
        kv_k, kv_v = (k[:total], v[:total]) if native else (repeated(k[:total]), repeated(v[:total]))
        return lambda: torch.ops.aten._flash_attention_forward(
            qv, kv_k, kv_v, cu_seqlens, cu_seqlens, longest, longest, 0.0, bool(causal), False, scale=scale)

    # (b) nested tensors, jagged layout: [B, j, H, d] views of the packed rows, transposed to
    # SDPA's [B, H, j, d]; min/max lengths given so no call waits on the device for them.
    def nested_fa2(native):
        offsets64 = cu_seqlens.to(torch.int64)

        def jagged(x):
            return torch.nested.nested_tensor_from_jagged(
                x[:total], offsets64, min_seqlen=shortest, max_seqlen=longest).transpose(1, 2)

        qn = jagged(q)
        kn, vn = (jagged(k), jagged(v)) if native else (jagged(repeated(k)), jagged(repeated(v)))
        extra = {"enable_gqa": True} if native and group > 1 else {}

        return lambda: F.scaled_dot_product_attention(qn, kn, vn, is_causal=bool(causal), scale=scale, **extra)

    # (c) one SDPA call per sequence: [1, H, L, d] views of the packed rows.
    def per_seq_fa2(native):
        kk, vv = (k, v) if native else (repeated(k), repeated(v))
        views = [tuple(x[s:e].unsqueeze(0).transpose(1, 2) for x in (q, kk, vv))
                 for s, e in zip(offsets[:-1], offsets[1:])]
        extra = {"enable_gqa": True} if native and group > 1 else {}

        def call():
            for qs, ks, vs in views:
                F.scaled_dot_product_attention(qs, ks, vs, is_causal=bool(causal), scale=scale, **extra)
        return call

    # (d) the dense comparison: [batch, H, N, d] views of the first batch·N rows.
    def fa2_dense(native):
        kk, vv = (k, v) if native else (repeated(k), repeated(v))
        qd, kd, vd = (x[:batch * n].view(batch, n, x.shape[1], d).transpose(1, 2) for x in (q, kk, vv))
        extra = {"enable_gqa": True} if native and group > 1 else {}

        return lambda: F.scaled_dot_product_attention(qd, kd, vd, is_causal=bool(causal), scale=scale, **extra)

    dense_flops = 4.0 * batch * n * n * d * heads_q * (0.5 if causal else 1.0)
    for backend, make_call in (("fa2_varlen", fa2_varlen), ("nested_fa2", nested_fa2),
                               ("per_seq_fa2", per_seq_fa2), ("fa2_dense", fa2_dense)):
        timed(backend, make_call, dense_flops if backend == "fa2_dense" else flops)
        torch.cuda.empty_cache()  # what the last way allocated (repeated K/V, nested views)


def main(argv=None):
    args = parse_args(argv)
    lengths, (heads_q, heads_kv) = args.varlen, args.heads
    total = sum(lengths)
    batch, n = dense_shape(lengths)
    if args.dry_run:
        print(f"{len(lengths)} sequences, {total} tokens ({min(lengths)}..{max(lengths)}), heads {heads_q}:{heads_kv}; "
              f"dense {batch}x{n}")
        for d, dtype_name, causal in cases(args):
            print(f"d={d} {dtype_name} causal={causal}: {varlen_flops(lengths, d, heads_q, causal):.6g} FLOPs")
        return 0

    import torch  # only now: --help, --dry-run and bad arguments need no torch

    name = torch.cuda.get_device_name(torch.device("cuda"))
    with open(args.csv, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["device", "torch", "backend", "mode", "sequences", "total_tokens", "heads_q", "heads_kv", "d",
                      "dtype", "causal", "dense_batch", "dense_N", "median_ms", "tflops", "gqa", "status"])
        for d, dtype_name, causal in cases(args):
            def write(backend, gqa, ms, tflops, status):
                out.writerow([name, torch.__version__, backend, "varlen", len(lengths), total, heads_q, heads_kv, d,
                              dtype_name, causal, batch, n, "" if ms is None else f"{ms:.6f}",
                              "" if tflops is None else f"{tflops:.3f}", gqa, status])
                f.flush()
            run_case(torch, args, d, dtype_name, causal, write)
            torch.cuda.empty_cache()  # the case's Q, K, V
            print(f"torch varlen d={d} {dtype_name} causal={causal} done", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
