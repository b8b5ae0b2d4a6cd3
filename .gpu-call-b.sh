#!/usr/bin/env bash
# call B (warm machine: the build is there): the decode table, dense [B, Nk, Hkv, d] on both sides
set -u
R=$OUT; mkdir -p $R/x
pack() { tar czf $R/all.tgz -C $R x; }
OUT=$R/x timeout 150 bash bench/gpu-run.sh none >/dev/null 2>&1; tail -1 $R/x/build.log; echo "built at $SECONDS s"
DT_LAYOUTS=bnhd DT_STEP_TIMEOUT=150 OUT=$R/x/dt timeout 560 bash bench/gpu-run.sh decode-table > $R/x/dt.txt 2>&1
tail -75 $R/x/dt/decode-table.md 2>/dev/null | cut -c1-220; pack; echo "all done at $SECONDS s"
