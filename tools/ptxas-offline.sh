#!/bin/bash
# ptxas-offline.sh: registers and spills of a tensor-core kernel without a GPU or NVIDIA's OpenCL
# driver: clang's nvptx64-nvidia-nvcl PTX of the kernel, with the OpenCL builtins the driver would
# link (get_local_id, barrier, fma, exp2, vload2, ...) defined here and inlined, then ptxas -v of
# CUDA's toolkit. The driver's own compiler may allocate differently: a first look, not a
# substitute for -cl-nv-verbose on the device (tests/test_tensor_cores.c prints that there).
#
#   tools/ptxas-offline.sh cl/flash_backward_tf32.cl sm_90 -DHEAD_DIM=128 -DBLOCK_M=64 -DBLOCK_N=64 \
#       -DWARPS=4 -DWG=128 -DCAUSAL=1 -DPASSES=3
#
# Prints one line a kernel: registers, spill stores and loads, then ptxas's warnings and its wgmma
# notes (C75xx: an injected wait, serialised wgmma). ptxas's "too much shared data" errors (static
# __local past 48 KB, which the OpenCL driver allows) are left out.
#   SM90A=1       the sm_90a route's patch first (src/program.c's fcl_sm90a_patch: the marked wgmma
#                 comments become code, the target sm_90a), for -DWGMMA=1 kernels; give arch sm_90a
#   PTXAS_FLAGS   more ptxas options, e.g. "--maxrregcount 168" (the cap 12 warps leave a thread)
#   KEEP_PTX=F    the PTX given to ptxas also written to F (for nvdisasm of a ptxas -o cubin)
# Needs clang, llvm-link, opt and llc of one LLVM (LLVM_BIN, default llvm-config --bindir) and
# ptxas (PTXAS, default ptxas on PATH or /usr/local/cuda/bin/ptxas).
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,13p' "$0"; exit 2; }
src=$1 arch=$2
shift 2
LLVM_BIN=${LLVM_BIN:-$(llvm-config --bindir)}
PTXAS=${PTXAS:-$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cl=(-x cl -cl-std=CL1.2 -target nvptx64-nvidia-nvcl -Xclang -finclude-default-header -O2 -emit-llvm -c)

cat > "$tmp/builtins.cl" <<'EOF'
#define SREG(r, d) ((d) == 0 ? __nvvm_read_ptx_sreg_##r##_x() : (d) == 1 ? __nvvm_read_ptx_sreg_##r##_y() \
                                                                      : __nvvm_read_ptx_sreg_##r##_z())
#define OVL __attribute__((overloadable))
size_t OVL get_local_id(uint d) { return (size_t)SREG(tid, d); }
size_t OVL get_local_size(uint d) { return (size_t)SREG(ntid, d); }
size_t OVL get_group_id(uint d) { return (size_t)SREG(ctaid, d); }
size_t OVL get_num_groups(uint d) { return (size_t)SREG(nctaid, d); }
size_t OVL get_global_id(uint d) { return (size_t)SREG(ctaid, d) * SREG(ntid, d) + SREG(tid, d); }
void OVL barrier(cl_mem_fence_flags f) { __nvvm_bar_sync(0); }
float OVL fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
float OVL fmax(float a, float b) { return __builtin_fmaxf(a, b); }
float OVL fmin(float a, float b) { return __builtin_fminf(a, b); }
int OVL max(int a, int b) { return a > b ? a : b; }
int OVL min(int a, int b) { return a < b ? a : b; }
int OVL clamp(int x, int lo, int hi) { return x < lo ? lo : x > hi ? hi : x; }
float OVL native_exp2(float x) { return __nvvm_ex2_approx_f(x); }  /* NVIDIA's OpenCL: not ftz (docs/perf-history.md, 2026-12-01) */
float OVL exp2(float x) { return __nvvm_ex2_approx_f(x); }
float OVL log2(float x) { return __nvvm_lg2_approx_f(x); }
float OVL exp(float x) { return __nvvm_ex2_approx_f(x * 1.44269504f); }  /* a first look: the approximation is enough for a register count */
float OVL log(float x) { return __nvvm_lg2_approx_f(x) * 0.69314718f; }
float OVL tanh(float x) { return 1.0f - 2.0f / (__nvvm_ex2_approx_f(x * 2.88539008f) + 1.0f); }  /* likewise */
uint OVL abs(int x) { return (uint)(x < 0 ? -x : x); }
float OVL fabs(float x) { return __builtin_fabsf(x); }
float OVL native_recip(float x) { float r; __asm__("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x)); return r; }
int OVL atomic_inc(volatile __global int *p) { int r; __asm__ volatile("atom.global.add.u32 %0, [%1], 1;" : "=r"(r) : "l"(p) : "memory"); return r; }
int OVL atomic_xchg(volatile __global int *p, int v) { int r; __asm__ volatile("atom.global.exch.b32 %0, [%1], %2;" : "=r"(r) : "l"(p), "r"(v) : "memory"); return r; }
float2 OVL vload2(size_t i, const __local float *p) { return (float2)(p[2 * i], p[2 * i + 1]); }
float2 OVL vload2(size_t i, const __global float *p) { return (float2)(p[2 * i], p[2 * i + 1]); }
void OVL vstore2(float2 v, size_t i, __global float *p) { p[2 * i] = v.x; p[2 * i + 1] = v.y; }
void OVL vstore2(float2 v, size_t i, __local float *p) { p[2 * i] = v.x; p[2 * i + 1] = v.y; }
#define HALF_LOAD_STORE(AS)                                                                                         \
    float OVL vload_half(size_t i, const AS half *p)                                                                \
    {                                                                                                               \
        float r;                                                                                                    \
        __asm__("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(((const AS ushort *)p)[i]));                                  \
        return r;                                                                                                   \
    }                                                                                                               \
    void OVL vstore_half_rte(float x, size_t i, AS half *p)                                                         \
    {                                                                                                               \
        ushort h;                                                                                                   \
        __asm__("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));                                                       \
        ((AS ushort *)p)[i] = h;                                                                                    \
    }
HALF_LOAD_STORE(__global)
HALF_LOAD_STORE(__local)
HALF_LOAD_STORE(__private)
EOF
# clang's nvptx OpenCL header leaves out the half loads and stores (core OpenCL 1.2): declared for the kernel here.
cat > "$tmp/decls.h" <<'EOF'
#define FCL_HALF_DECLS(AS)                                                                                          \
    float __attribute__((overloadable)) vload_half(size_t i, const AS half *p);                                     \
    void __attribute__((overloadable)) vstore_half_rte(float x, size_t i, AS half *p);
FCL_HALF_DECLS(__global)
FCL_HALF_DECLS(__local)
FCL_HALF_DECLS(__private)
EOF
"$LLVM_BIN/clang" "${cl[@]}" -o "$tmp/builtins.bc" "$tmp/builtins.cl"
"$LLVM_BIN/clang" "${cl[@]}" -include "$tmp/decls.h" -I"$(dirname "$src")" "$@" -o "$tmp/kernel.bc" "$src"
"$LLVM_BIN/llvm-link" "$tmp/kernel.bc" "$tmp/builtins.bc" -o "$tmp/linked.bc"
"$LLVM_BIN/opt" -O3 "$tmp/linked.bc" -o "$tmp/opt.bc"
"$LLVM_BIN/llc" -mcpu=sm_80 -mattr=+ptx70 "$tmp/opt.bc" -o "$tmp/kernel.ptx"
if grep -q "^\.extern" "$tmp/kernel.ptx"; then
    echo "builtins left undefined (add them above):" >&2
    grep "^\.extern" "$tmp/kernel.ptx" >&2
    exit 1
fi
if [ -n "${SM90A:-}" ]; then
    sed -i -e 's/^\.target sm_80/.target sm_90a/' -e 's/^\.version 7\.0/.version 8.0/' -e 's|// @fcl-sm90a ||' "$tmp/kernel.ptx"
fi
[ -z "${KEEP_PTX:-}" ] || cp "$tmp/kernel.ptx" "$KEEP_PTX"
# shellcheck disable=SC2086  # PTXAS_FLAGS: words on purpose
"$PTXAS" ${PTXAS_FLAGS:-} -arch="$arch" -v "$tmp/kernel.ptx" -o /dev/null > "$tmp/ptxas.log" 2>&1 || true  # the shared-data errors
awk '
/Compiling entry function/ { k = $0; sub(/.*function \047/, "", k); sub(/\047.*/, "", k) }
/spill stores/ { st = $5; ld = $9 }
/Used [0-9]+ registers/ { for (i = 1; i <= NF; i++) if ($i == "Used") r = $(i + 1)
                          printf "%-32s %3d registers, %s bytes spill stores, %s bytes spill loads\n", k, r, st, ld }
/error|fatal/ && !/too much shared data/ { print; failed = 1 }
/[Ww]arning|\(C75[0-9][0-9]\)/ { print }
END { exit failed ? 1 : 0 }' "$tmp/ptxas.log"
