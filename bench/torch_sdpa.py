#!/usr/bin/env python3
"""Times PyTorch's scaled_dot_product_attention backends on the shapes
flashcl-bench uses (batch*N = tokens, heads*d = hidden), so the two can be
compared in the same device run. CUDA events, warm-up, median of --reps.

    python3 bench/torch_sdpa.py --n 1024,4096 --d 64,128 --dtype f16,f32 --csv out.csv
    python3 bench/torch_sdpa.py --pass backward ...   (autograd's backward alone; FLOPs 2.5x forward)
    python3 bench/torch_sdpa.py --decode 8:32:8:1:32768 --d 128 --dtype f16 --csv out.csv
                                      (flashcl-bench --decode's shapes: SDPA with enable_gqa, K+V GB/s)
"""
import argparse
import csv
import itertools
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {
    "fa2": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "mem_efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}
# tf32 / tf32x3 are flashcl's f32 rows with TF32 allowed: PyTorch runs them in f32.
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
          "tf32": torch.float32, "tf32x3": torch.float32}


def ints(text):
    return [int(x) for x in text.split(",") if x]


PASS_FLOPS = {"forward": 1.0, "backward": 2.5, "both": 3.5}  # FlashAttention's convention


def chosen_backends(args):
    return [(name, BACKENDS[name]) for name in args.backends.split(",")]


def time_backend(backend, q, k, v, causal, warmup, reps, pass_name="forward", d_o=None):
    """Median ms of the pass: the forward; autograd's backward alone (its
    forward runs untimed before each timed backward); or both."""
    train = pass_name != "forward"
    with sdpa_kernel([backend]):
        times = []
        for i in range(warmup + reps):
            if train:
                q.grad = k.grad = v.grad = None
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if pass_name == "backward":
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                torch.cuda.synchronize()
                start.record()
                out.backward(d_o)
            else:
                start.record()
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                if train:
                    out.backward(d_o)
            end.record()
            end.synchronize()
            if i >= warmup:
                times.append(start.elapsed_time(end))
            del out
    return statistics.median(times)


def decode(args, dev, name):
    """Few queries per sequence against a long cache, GQA through enable_gqa;
    causal when more than one query (chunked prefill), aligned bottom-right as
    flashcl-bench's is (torch.nn.attention.bias.causal_lower_right)."""
    from torch.nn.attention.bias import causal_lower_right
    with open(args.csv, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["device", "torch", "backend", "mode", "batch", "heads_q", "heads_kv", "Nq", "Nk", "d", "dtype",
                      "median_ms", "kv_gb_s", "status"])
        for item, d, dtype_name in itertools.product(args.decode.split(","), args.d, args.dtype.split(",")):
            b, hq, hkv, nq, nk = (int(x) for x in item.split(":"))
            gen = torch.Generator(device=dev).manual_seed(nk * 131 + d)
            dtype = DTYPES[dtype_name]
            q = k = v = None
            try:
                q = torch.rand((b, hq, nq, d), device=dev, generator=gen).mul_(2).sub_(1).to(dtype)
                # K and V as [B, Hkv, Nk, d] in memory (a head's keys contiguous, PyTorch's usual), or, with
                # --kv-layout bnhd, as flashcl-bench's [B, Nk, Hkv, d] seen through a transpose (the same bytes).
                shape = (b, hkv, nk, d) if args.kv_layout == "bhnd" else (b, nk, hkv, d)
                k, v = (torch.rand(shape, device=dev, generator=gen).mul_(2).sub_(1).to(dtype) for _ in range(2))
            except RuntimeError as e:  # inputs that do not fit (OutOfMemoryError): every backend's row says so
                print(f"torch_sdpa: {item} d={d} {dtype_name}: inputs: {type(e).__name__}: {str(e)[:200]}",
                      file=sys.stderr)
                for bname, _ in chosen_backends(args):
                    out.writerow([name, torch.__version__, bname, "decode", b, hq, hkv, nq, nk, d, dtype_name, "", "",
                                  type(e).__name__])
                f.flush()
                del q, k, v
                torch.cuda.empty_cache()
                continue
            if args.kv_layout == "bnhd":
                k, v = k.transpose(1, 2), v.transpose(1, 2)
            kv_bytes = 2 * k.numel() * k.element_size()
            for bname, backend in chosen_backends(args):
                try:
                    with sdpa_kernel([backend]):
                        times = []
                        for i in range(args.warmup + args.reps):
                            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                            start.record()
                            for _ in range(args.calls):  # back to back: launches overlap the kernels
                                if nq > 1:  # flashcl's causal mask: bottom-right aligned (is_causal: top-left)
                                    F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(nq, nk),
                                                                   enable_gqa=True)
                                else:
                                    F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                            end.record()
                            end.synchronize()
                            if i >= args.warmup:
                                times.append(start.elapsed_time(end) / args.calls)
                    ms = statistics.median(times)
                    row = [f"{ms:.6f}", f"{kv_bytes / (ms * 1e-3) / 1e9:.2f}", "ok"]
                except Exception as e:  # a backend that refuses this shape, or runs out of memory on it
                    row = ["", "", type(e).__name__]
                    print(f"torch_sdpa: {item} d={d} {dtype_name} {bname}: {type(e).__name__}: {str(e)[:200]}",
                          file=sys.stderr)
                    torch.cuda.empty_cache()
                out.writerow([name, torch.__version__, bname, "decode", b, hq, hkv, nq, nk, d, dtype_name] + row)
                f.flush()
            del q, k, v
            torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=ints, default=[512, 1024, 2048, 4096, 8192, 16384, 32768])
    ap.add_argument("--d", type=ints, default=[64, 128])
    ap.add_argument("--dtype", default="f32,f16")
    ap.add_argument("--causal", type=ints, default=[0, 1])
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--math-max-n", type=int, default=8192,
                    help="skip the math backend above this N (it materialises N*N per head)")
    ap.add_argument("--pass", dest="passes", default="forward", help="forward,backward,both")
    ap.add_argument("--decode", default="", help="B:Hq:Hkv:Nq:Nk,... (instead of the sweep)")
    ap.add_argument("--calls", type=int, default=1,
                    help="--decode: calls back to back per timed run, reported per call (launches overlapped)")
    ap.add_argument("--kv-layout", default="bhnd", choices=["bhnd", "bnhd"],
                    help="--decode: K/V memory layout (bnhd: flashcl-bench's [B, N, H, d])")
    ap.add_argument("--backends", default=",".join(BACKENDS), help="which of " + ",".join(BACKENDS))
    ap.add_argument("--csv", required=True)
    args = ap.parse_args()
    if args.calls < 1:
        ap.error("--calls: at least 1")
    if any(b not in BACKENDS for b in args.backends.split(",")):
        ap.error(f"--backends: one of {','.join(BACKENDS)}, comma-separated")

    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(dev)
    if args.decode:
        return decode(args, dev, name)
    with open(args.csv, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["device", "torch", "backend", "pass", "N", "d", "dtype", "causal", "batch", "heads",
                      "median_ms", "tflops", "status"])
        shapes = itertools.product(args.passes.split(","), args.d, args.dtype.split(","), args.causal, args.n)
        for pass_name, d, dtype_name, causal, n in shapes:
            train = pass_name != "forward"
            batch, heads = max(1, args.tokens // n), args.hidden // d
            gen = torch.Generator(device=dev).manual_seed(n * 131 + d)
            shape = (batch, heads, n, d)
            q, k, v = (torch.rand(shape, device=dev, generator=gen, dtype=torch.float32)
                       .mul_(2).sub_(1).to(DTYPES[dtype_name]).requires_grad_(train) for _ in range(3))
            d_o = (torch.rand(shape, device=dev, generator=gen, dtype=torch.float32)
                   .mul_(2).sub_(1).to(DTYPES[dtype_name])) if train else None
            flops = 4.0 * batch * heads * n * n * d * (0.5 if causal else 1.0) * PASS_FLOPS[pass_name]
            for bname, backend in chosen_backends(args):
                if bname == "math" and n > args.math_max_n:
                    continue
                try:
                    ms = time_backend(backend, q, k, v, bool(causal), args.warmup, args.reps, pass_name, d_o)
                    row = [f"{ms:.6f}", f"{flops / (ms * 1e-3) / 1e12:.3f}", "ok"]
                except Exception as e:  # a backend that refuses this dtype/shape
                    row = ["", "", type(e).__name__]
                out.writerow([name, torch.__version__, bname, pass_name, n, d, dtype_name, causal,
                              batch, heads] + row)
                f.flush()
            print(f"torch {pass_name} N={n} d={d} {dtype_name} causal={causal} done", file=sys.stderr)
            del q, k, v, d_o
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
