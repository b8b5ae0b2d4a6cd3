#!/usr/bin/env python3
"""Writes a copy of a GGUF with every tensor dequantised to F32 (the same
metadata, the same values: Q4_1 and Q8_0 dequantise exactly to f32). Run on
it, llama.cpp multiplies f32 weights by f32 activations instead of
quantising activations to 8 bits for its Q4_1/Q8_0 dot products, which
makes it a second oracle for flashcl-llm, whose weights are these f32 values.

    make-f32-gguf.py IN.gguf OUT.gguf        (needs numpy and gguf from PyPI)
"""
import sys

import gguf
import numpy as np


def main():
    src, dst = sys.argv[1:3]
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch)
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.alignment"):
            continue  # the writer adds these itself
        vtype = field.types[0]
        if key == "general.file_type":
            w.add_key_value(key, int(gguf.LlamaFileType.ALL_F32), vtype)
            continue
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, field.contents(), vtype, sub_type=sub)
    for t in r.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w.add_tensor(t.name, data.reshape([int(x) for x in reversed(t.shape)]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
