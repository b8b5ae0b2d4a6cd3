/*
 * Dequantisation of GGUF tensor data to f32 on the host (done once, at load):
 * F32, F16, Q4_1 and Q8_0 — the types SmolLM2's Q4_1 file uses, and F16.
 * Pure C, no OpenCL.
 */
#ifndef LLM_DEQUANT_H
#define LLM_DEQUANT_H

#include <stddef.h>
#include <stdint.h>

/* Nonzero if dequantise_tensor knows the ggml type. */
int dequant_supported(uint32_t type);

/* Writes `elements` floats from `data` of ggml type `type` (elements a whole
 * number of blocks, data holding them: the GGUF reader checked both).
 * Returns 0, or -1 for an unsupported type. */
int dequantise(uint32_t type, const uint8_t *data, uint64_t elements, float *out);

float half_to_float(uint16_t h);

#endif
