#!/usr/bin/env bash
# Renders flashcl-bench's CSV as two PNG plots with gnuplot (log scales):
# time vs N and device memory vs N, flash and standard, for one head dim,
# dtype and mask. Rows the standard path could not run (out of memory) show
# as the memory it would have needed.
#
#   bench/plot.sh results.csv OUTDIR [d=64] [dtype=f32] [causal=0]
set -euo pipefail
csv=$1; out=$2; d=${3:-64}; dtype=${4:-f32}; causal=${5:-0}
mkdir -p "$out"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
device=$(awk -F'"' 'NR == 2 {print $2}' "$csv")
for path in flash standard; do
  # Columns after the quoted device: path,N,d,dtype,causal,batch,heads,status,median_ms,min_ms,tflops,device_bytes,err_ref,err_vs_flash,kernel
  awk -F, -v p="$path" -v d="$d" -v t="$dtype" -v c="$causal" '
    NR > 1 { n = split($0, f, ","); off = n - 16;
             if (f[off+2] == p && f[off+4] == d && f[off+5] == t && f[off+6] == c)
               print f[off+3], (f[off+9] == "FLASHCL_SUCCESS" ? f[off+10] : "NaN"), f[off+13] / 1048576 }' \
    "$csv" | sort -n > "$tmp/$path.dat"
done
title="d=$d $dtype $([ "$causal" = 1 ] && echo causal || echo full) on $device"
gnuplot <<GP
set terminal pngcairo size 900,600 font ",11"
set logscale xy 2
set grid
set key top left
set xlabel "sequence length N (batch·N fixed)"
set datafile missing "NaN"
set output "$out/time_vs_n.png"
set ylabel "forward time (ms, median)"
set title "Attention forward time: $title"
plot "$tmp/flash.dat" using 1:2 with linespoints lw 2 title "flashcl (flash)", \
     "$tmp/standard.dat" using 1:2 with linespoints lw 2 title "standard (CLBlast, S and P in memory)"
set output "$out/memory_vs_n.png"
set ylabel "device memory (MiB)"
set title "Device memory: $title"
plot "$tmp/flash.dat" using 1:3 with linespoints lw 2 title "flashcl: Q, K, V, O, LSE", \
     "$tmp/standard.dat" using 1:3 with linespoints lw 2 title "standard: + workspace (needed, where it did not fit)"
GP
echo "wrote $out/time_vs_n.png $out/memory_vs_n.png"
