#!/bin/sh
# Runs tests/test_ring.c's binary on RANKS MPI ranks (meson test --suite mpi); skips (77) where
# mpirun is missing. Usage: test_ring.sh RANKS BINARY
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not found"; exit 77; }
# --oversubscribe: more ranks than cores (CI has 2); --bind-to none: oversubscribed ranks share them.
exec mpirun -n "$1" --oversubscribe --bind-to none "$2"
