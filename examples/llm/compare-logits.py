#!/usr/bin/env python3
"""Full logit vectors: flashcl-llm (f32 on the device) against llama.cpp, and
both against a float64 NumPy forward of the same dequantised weights.

    flashcl-llm --check tests/data/llm-reference.txt --dump-logits OURS.f32 MODEL.gguf
    make-reference.py MODEL.gguf tests/data/llm-text REF.txt --full-logits LLAMA.npz
    compare-logits.py MODEL.gguf tests/data/llm-reference.txt OURS.f32 LLAMA.npz [--f64-positions 24]

Needs numpy and gguf (PyPI). The f64 forward runs the first --f64-positions
tokens of the first forced text (causal: those positions' logits do not
depend on later tokens, so the full runs' rows compare directly)."""
import argparse

import numpy as np


def forced_sequences(path):
    seqs = []
    for line in open(path):
        if line.startswith("forced "):
            parts = line.split()
            n = int(parts[2])
            seqs.append((parts[1], [int(x) for x in parts[3:3 + n]]))
    return seqs


def load_weights(model_path):
    import gguf
    r = gguf.GGUFReader(model_path)
    w = {}
    for t in r.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        w[t.name] = a.reshape([int(x) for x in reversed(t.shape)])  # ggml ne0 is the last axis
    meta = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.ggml")}
    return w, meta


def forward_f64(w, meta, ids):
    """SmolLM2's forward in float64: RMSNorm, RoPE (ggml's NORM mode: adjacent pairs), GQA, SwiGLU, tied output."""
    n_layers = int(meta["llama.block_count"])
    n_head = int(meta["llama.attention.head_count"])
    n_kv = int(meta["llama.attention.head_count_kv"])
    eps = float(meta["llama.attention.layer_norm_rms_epsilon"])
    base = float(meta["llama.rope.freq_base"])
    emb = w["token_embd.weight"]
    d = emb.shape[1] // n_head
    n = len(ids)
    x = emb[ids]

    def rms(v, g):
        return v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + eps) * g

    pos = np.arange(n)[:, None]
    theta = pos * base ** (-2.0 * np.arange(d // 2) / d)
    cos, sin = np.cos(theta), np.sin(theta)

    def rope(t):  # t [n, heads, d]
        x0, x1 = t[..., 0::2], t[..., 1::2]
        out = np.empty_like(t)
        out[..., 0::2] = x0 * cos[:, None, :] - x1 * sin[:, None, :]
        out[..., 1::2] = x0 * sin[:, None, :] + x1 * cos[:, None, :]
        return out

    mask = np.triu(np.full((n, n), -np.inf), 1)
    for l in range(n_layers):
        p = "blk.%d." % l
        h = rms(x, w[p + "attn_norm.weight"])
        q = rope((h @ w[p + "attn_q.weight"].T).reshape(n, n_head, d))
        k = rope((h @ w[p + "attn_k.weight"].T).reshape(n, n_kv, d))
        v = (h @ w[p + "attn_v.weight"].T).reshape(n, n_kv, d)
        o = np.empty((n, n_head, d))
        for hq in range(n_head):
            g = hq // (n_head // n_kv)
            s = q[:, hq] @ k[:, g].T / np.sqrt(d) + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            o[:, hq] = (s / s.sum(axis=1, keepdims=True)) @ v[:, g]
        x = x + o.reshape(n, -1) @ w[p + "attn_output.weight"].T
        h = rms(x, w[p + "ffn_norm.weight"])
        gate, up = h @ w[p + "ffn_gate.weight"].T, h @ w[p + "ffn_up.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w[p + "ffn_down.weight"].T
    out = w.get("output.weight", emb)
    return rms(x, w["output_norm.weight"]) @ out.T


def stats(a, b):
    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    return "max %.4f, mean %.5f" % (d.max(), d.mean())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("reference")
    ap.add_argument("ours")
    ap.add_argument("llama", nargs="+", help="full logits from make-reference.py --full-logits (one or more runs)")
    ap.add_argument("--f64-positions", type=int, default=24)
    ap.add_argument("--f64-text", help="the forced text the f64 forward runs (default: the first)")
    args = ap.parse_args()
    seqs = forced_sequences(args.reference)
    runs = [(path, np.load(path)) for path in args.llama]
    ours_all = np.fromfile(args.ours, dtype=np.float32)
    vocab = runs[0][1][seqs[0][0]].shape[1]
    at = 0
    ours = {}
    for name, ids in seqs:  # a dump cut by --max-positions holds the first rows only
        n = min(len(ids), (ours_all.size - at) // vocab)
        if n <= 0:
            break
        ours[name] = ours_all[at:at + n * vocab].reshape(n, vocab)
        at += n * vocab
    for path, llama in runs:
        total = agree = 0
        print("flashcl-llm against %s:" % path)
        for name, o in ours.items():
            l = llama[name][:len(o)]
            a = int((o.argmax(1) == l.argmax(1)).sum())
            agree += a
            total += len(o)
            print("  %s: %d positions, top-1 agreement %d; |ours - llama.cpp| over all %d logits: %s"
                  % (name, len(o), a, vocab, stats(o, l)))
        print("  all: %d positions, top-1 agreement %.2f%%" % (total, 100.0 * agree / total))
    if args.f64_positions > 0:
        name, ids = next((n, i) for n, i in seqs if args.f64_text in (None, n))
        k = min(args.f64_positions, len(ours[name]))
        w, meta = load_weights(args.model)
        ref = forward_f64(w, meta, ids[:k])
        print("float64 NumPy forward of the first %d positions of %s, |logits - f64| over all %d, top-1 equal to f64's:"
              % (k, name, vocab))
        print("  flashcl-llm (f32): %s; top-1 %d/%d" % (stats(ours[name][:k], ref),
                                                        int((ours[name][:k].argmax(1) == ref.argmax(1)).sum()), k))
        for path, llama in runs:
            print("  %s: %s; top-1 %d/%d" % (path, stats(llama[name][:k], ref),
                                             int((llama[name][:k].argmax(1) == ref.argmax(1)).sum()), k))


if __name__ == "__main__":
    main()
