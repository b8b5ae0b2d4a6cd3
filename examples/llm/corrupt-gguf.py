#!/usr/bin/env python3
"""Writes a damaged copy of a GGUF file, for flashcl-llm's bad-input test.

    corrupt-gguf.py KIND IN.gguf OUT.gguf

KIND: truncated (the first 60% of the bytes), magic (not "GGUF"), arch
(general.architecture "llama" becomes "gemma"), tensor-type (the first
tensor's type becomes 99), tensor-offset (the first tensor's offset points
past the end), huge-string (a key's length becomes 2^60)."""
import struct
import sys


def read_str(b, at):
    n = struct.unpack_from("<Q", b, at)[0]
    return b[at + 8:at + 8 + n], at + 8 + n


def skip_value(b, at, t):
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    if t == 8:
        return read_str(b, at)[1]
    if t == 9:
        et, n = struct.unpack_from("<IQ", b, at)
        at += 12
        for _ in range(n):
            at = skip_value(b, at, et)
        return at
    return at + sizes[t]


def main():
    kind, src, dst = sys.argv[1:4]
    b = bytearray(open(src, "rb").read())
    n_tensors, n_kv = struct.unpack_from("<QQ", b, 8)
    at = 24
    first_key = at
    for _ in range(n_kv):
        key, at = read_str(b, at)
        t = struct.unpack_from("<I", b, at)[0]
        if key == b"general.architecture" and kind == "arch":
            assert b[at + 12:at + 17] == b"llama"
            b[at + 12:at + 17] = b"gemma"
        at = skip_value(b, at + 4, t)
    name, at = read_str(b, at)  # the first tensor
    n_dims = struct.unpack_from("<I", b, at)[0]
    type_at = at + 4 + 8 * n_dims
    if kind == "truncated":
        b = b[:len(b) * 6 // 10]
    elif kind == "magic":
        b[0:4] = b"GGML"
    elif kind == "tensor-type":
        struct.pack_into("<I", b, type_at, 99)
    elif kind == "tensor-offset":
        struct.pack_into("<Q", b, type_at + 4, (len(b) + 4096) // 32 * 32)
    elif kind == "huge-string":
        struct.pack_into("<Q", b, first_key, 1 << 60)
    elif kind != "arch":
        sys.exit("unknown kind " + kind)
    open(dst, "wb").write(b)


if __name__ == "__main__":
    main()
