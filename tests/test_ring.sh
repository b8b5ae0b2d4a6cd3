#!/bin/sh
# Runs tests/test_ring.c's binary on RANKS MPI ranks (meson test --suite mpi); skips (77) where
# mpirun is missing. Usage: test_ring.sh RANKS BINARY
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not found"; exit 77; }
# Under ASan (CI's run), full stacks for LeakSanitizer so tests/lsan.supp can name Open MPI's own
# allocations precisely, and MPI's components kept loaded so their frames have names.
if [ -n "${ASAN_OPTIONS:-}" ]; then
  export ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0"
  export OMPI_MCA_mca_base_component_disable_dlclose=1
fi
# --oversubscribe: more ranks than cores (CI has 2); --bind-to none: oversubscribed ranks share them.
exec mpirun -n "$1" --oversubscribe --bind-to none "$2"
