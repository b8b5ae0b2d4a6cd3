#!/usr/bin/env python3
"""The issue's speed baseline: Hugging Face transformers' LlamaForCausalLM, f16,
SDPA attention, on the same GGUF weights (dequantised by transformers' GGUF
loader, which needs the `gguf` package), timed like flashcl-llm: prefill
tokens/s of one prompt, then greedy decode tokens/s with the KV cache.

    bench-transformers.py MODEL.gguf [--prompt-file FILE] [--tokens 128] [--dtype f16|f32] [--device cuda]

The prompt's token ids come from flashcl's own tokenizer when --ids-from is
given (the output of `llm-tokenize MODEL FILE-TEXT`), else from transformers'
tokenizer built from the GGUF. Offline: nothing is downloaded."""
import argparse
import os
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--prompt-file")
    ap.add_argument("--prompt", default="The capital of France is")
    ap.add_argument("--tokens", type=int, default=128, help="tokens to decode")
    ap.add_argument("--dtype", default="f16", choices=["f16", "bf16", "f32"])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[args.dtype]
    folder, name = os.path.split(os.path.abspath(args.model))
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=dtype, attn_implementation="sdpa")
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = model.to(args.device).eval()
    print("loaded %s (%s, sdpa) in %.1f s on %s" % (name, args.dtype, time.perf_counter() - t0,
                                                    torch.cuda.get_device_name() if args.device == "cuda" else "cpu"))
    text = open(args.prompt_file, encoding="utf-8").read() if args.prompt_file else args.prompt
    ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]], device=args.device)
    n = ids.shape[1]

    def sync():
        if args.device == "cuda":
            torch.cuda.synchronize()

    with torch.inference_mode():
        model(ids[:, :8])  # warm-up
        best_prefill = float("inf")
        for _ in range(args.reps):
            sync()
            t = time.perf_counter()
            out = model(ids, use_cache=True)
            sync()
            best_prefill = min(best_prefill, time.perf_counter() - t)
        print("prefill: %d tokens in %.4f s = %.1f tokens/s (best of %d)" % (n, best_prefill, n / best_prefill, args.reps))
        best_decode = float("inf")
        for _ in range(args.reps):
            past = model(ids, use_cache=True).past_key_values
            nxt = out.logits[:, -1:].argmax(-1)
            sync()
            t = time.perf_counter()
            for _ in range(args.tokens):
                step = model(nxt, past_key_values=past, use_cache=True)
                past = step.past_key_values
                nxt = step.logits[:, -1:].argmax(-1)
            sync()
            best_decode = min(best_decode, time.perf_counter() - t)
        print("decode: %d tokens in %.4f s = %.1f tokens/s (greedy, KV cache, batch 1, best of %d)"
              % (args.tokens, best_decode, args.tokens / best_decode, args.reps))


if __name__ == "__main__":
    main()
