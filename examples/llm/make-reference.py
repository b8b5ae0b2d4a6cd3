#!/usr/bin/env python3
"""Reference data for flashcl-llm from llama.cpp (PyPI llama-cpp-python, CPU).

    pip install llama-cpp-python numpy
    make-reference.py MODEL.gguf tests/data/llm-text OUT.txt [--full-logits FULL.npz]
    (tests/data/llm-reference.txt: the Q4_1 file as published;
     tests/data/llm-reference-f32.txt: make-f32-gguf.py's F32 copy, with
     --kv-f32 --top-k 2 --no-tokenizer)

Writes OUT.txt in the format examples/llm/check.c reads:
  - tokenizer: llama.cpp's ids for each text below (with and without special tokens);
  - teacher-forced: each public-domain text of tests/data/llm-text (the files in
    FORCED), run through the model, with llama.cpp's top-4 logits after every position;
  - greedy generation: 32 tokens for each prompt of GENERATE, with the top-4 at each step.
--full-logits also saves llama.cpp's full logit rows of the forced texts (large:
not for the repository) for compare-logits.py.
"""
import argparse
import os
import sys

import llama_cpp.llama_cpp as llama_c
import numpy as np
from llama_cpp import Llama

# No repacked weight buffers: ggml's AMX path (chosen where the CPU reports
# AMX) raised SIGILL on a VM that reports AMX without enabling it; the plain
# CPU matmuls are the reference anyway.
_default_model_params = llama_c.llama_model_default_params


def _model_params_without_repack():
    params = _default_model_params()
    params.use_extra_bufts = False
    return params


llama_c.llama_model_default_params = _model_params_without_repack

TOP_K = 4
GEN_TOKENS = 32
FORCED = ["declaration.txt", "pride-and-prejudice-1.txt", "gettysburg.txt"]
CHAT_HEAD = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
             "<|im_start|>user\n")
CHAT_TAIL = "<|im_end|>\n<|im_start|>assistant\n"

TOKENIZER_TEXTS = [
    "Hello world",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "It's a truth universally acknowledged; isn't it? We'll see, they'd say, you're right, I've done it.",
    "IT'S UPPER CASE: DON'T, WON'T, 'S 'T",
    "1234567890",
    "In 1776, 13 colonies; 3.14159 and 2,718,281 and 0x1F and 1e-5.",
    "Phone: +1 (555) 010-9999, at 10:30am.",
    "   leading spaces",
    "trailing spaces   ",
    "double  space   triple    quad",
    "tabs\tand\t\ttabs",
    "new\nline\n\nparagraph\n\n\n",
    "\r\nwindows\r\nline endings",
    "mixed \t \n whitespace \u00a0 nbsp \u3000 ideographic",
    "punctuation!!! ??? ... --- *** ### @@@ $$$ %%%",
    "brackets (round) [square] {curly} <angle>",
    "code: def f(x):\n    return x ** 2  # square\n",
    "if (a && b || !c) { return a->b[i]; }",
    "https://example.com/path?query=1&b=2#frag",
    "email@example.org, user.name+tag@domain.co.uk",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe",
    "\u00bfQu\u00e9 tal? \u00a1Muy bien! \u00d1and\u00fa",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u041a\u0430\u043a \u0434\u0435\u043b\u0430?",
    "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002\u30ab\u30bf\u30ab\u30ca",
    "\ud55c\uad6d\uc5b4 \ud14c\uc2a4\ud2b8",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "emoji \U0001F600 \U0001F44D\U0001F3FD \U0001F1EB\U0001F1F7 \u2764\ufe0f family \U0001F468\u200d\U0001F469\u200d\U0001F467",
    "math \u2211 \u222b \u221a \u03c0 \u2248 \u2260 \u2264 \u00b1 \u00d7 \u00f7 \u00b2 \u00bd \u2153",
    "full-width \uff21\uff22\uff23 \uff11\uff12\uff13 and roman \u2160 \u2161 \u2162",
    "a" * 40 + " " + "ab" * 20,
    "!" * 30,
    " " * 17 + "x",
    "\u2028line separator\u2029paragraph separator\u0085next line",
    "<|im_start|> written in plain text <|im_end|>",
    "",
]
TOKENIZER_SPECIAL = [
    CHAT_HEAD + "What is the capital of France?" + CHAT_TAIL,
    CHAT_HEAD + "Write a haiku about the sea.\n\nPlease." + CHAT_TAIL,
    "<|im_start|>user\n  spaced<|im_end|>\n<|endoftext|>",
    "<|endoftext|><|endoftext|>text<|im_start|>",
]
GENERATE = [
    CHAT_HEAD + "What is the capital of France?" + CHAT_TAIL,
    CHAT_HEAD + "Give me three tips for staying healthy." + CHAT_TAIL,
    CHAT_HEAD + "Explain what a prime number is." + CHAT_TAIL,
    "Once upon a time, in a small village by the sea,",
    "The Declaration of Independence was signed in",
    "def fibonacci(n):\n",
]


def top_k(row, k):
    ids = np.argsort(-row, kind="stable")[:k]
    return "top %d %s" % (k, " ".join("%d %.4f" % (int(i), float(row[i])) for i in ids))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("text_dir")
    ap.add_argument("out")
    ap.add_argument("--full-logits")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--top-k", type=int, default=TOP_K, help="logits kept per position")
    ap.add_argument("--kv-f32", action="store_true", help="an f32 KV cache (llama.cpp's default is f16)")
    ap.add_argument("--no-tokenizer", action="store_true", help="leave out the tokenizer texts")
    args = ap.parse_args()

    kv = {"type_k": 0, "type_v": 0} if args.kv_f32 else {}  # GGML_TYPE_F32
    llm = Llama(model_path=args.model, n_ctx=4096, n_batch=512, logits_all=True, n_threads=args.threads,
                verbose=False, **kv)
    lines = ["# llama.cpp (llama-cpp-python %s) on %s%s" % (__import__("llama_cpp").__version__,
                                                            os.path.basename(args.model),
                                                            ", f32 KV cache" if args.kv_f32 else "")]
    for special, texts in () if args.no_tokenizer else ((0, TOKENIZER_TEXTS), (1, TOKENIZER_SPECIAL)):
        for text in texts:
            ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=bool(special))
            lines.append("tokenize %d %s %d %s" % (special, text.encode("utf-8").hex() or "-", len(ids),
                                                   " ".join(map(str, ids))))
    full = {}
    for name in FORCED:
        with open(os.path.join(args.text_dir, name), encoding="utf-8") as f:
            ids = llm.tokenize(f.read().encode("utf-8"), add_bos=False, special=False)
        llm.reset()
        llm.eval(ids)
        scores = np.array(llm.scores[:len(ids)], dtype=np.float32)
        full[name] = scores
        lines.append("forced %s %d %s" % (os.path.splitext(name)[0], len(ids), " ".join(map(str, ids))))
        lines.extend(top_k(row, args.top_k) for row in scores)
        print("forced %s: %d positions" % (name, len(ids)), file=sys.stderr)
    for prompt in GENERATE:
        ids = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        llm.reset()
        llm.eval(ids)
        out, tops = [], []
        for _ in range(GEN_TOKENS):
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            tok = int(np.argmax(row))
            out.append(tok)
            tops.append(top_k(row, args.top_k))
            llm.eval([tok])
        lines.append("generate %d %s %d %s" % (len(ids), " ".join(map(str, ids)), len(out), " ".join(map(str, out))))
        lines.extend(tops)
        print("generate: %r -> %r" % (prompt[-40:], llm.detokenize(out).decode("utf-8", "replace")), file=sys.stderr)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    if args.full_logits:
        np.savez_compressed(args.full_logits, **{os.path.splitext(k)[0]: v for k, v in full.items()})


if __name__ == "__main__":
    main()
