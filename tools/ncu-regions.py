#!/usr/bin/env python3
"""ncu-regions.py: a kernel's key loop from Nsight Compute's source page (tools/ncu-of-cache.sh's
OUT.source.csv: SASS with execution counts and stall samples), cut at its barriers and waits
(BAR.SYNC / BAR.ARV / DEPBAR / WARPGROUP.DEPBAR / LDGDEPBAR): instructions a warp a trip of the loop
(the most executed instruction's count is the trips) and stall samples in each piece, then the loop's
opcode mix a trip.

    tools/ncu-regions.py OUT.source.csv

The trips are read as the most executed instruction's count: right for the key loop of the kernels here,
whose inner loops are unrolled, wrong where an inner loop is not (it then reports that loop).
"""
import collections
import csv
import re
import sys

rows = list(csv.reader(open(sys.argv[1])))
header, data = rows[1], rows[2:]
at_exec, at_src = header.index("Instructions Executed"), header.index("Source")
at_samples = header.index("Warp Stall Sampling (All Samples)")


def executed(r):
    return int(r[at_exec] or 0)


trips = max(executed(r) for r in data)
hot = [i for i, r in enumerate(data) if executed(r) >= 0.95 * trips]
first, last = min(hot), max(hot)
cuts = [i for i in range(first, last + 1)
        if re.search(r"BAR\.SYNC|BAR\.ARV|DEPBAR", data[i][at_src]) and executed(data[i]) >= 0.3 * trips]
prev, total = first, 0.0
for cut in cuts + [last + 1]:
    n = sum(executed(data[i]) for i in range(prev, cut)) / trips
    s = sum(int(data[i][at_samples] or 0) for i in range(prev, cut))
    total += n
    end = data[cut][at_src].strip()[:44] if cut < len(data) else "(loop end)"
    print(f"{prev:5d}..{cut:5d} {n:7.1f} instructions a trip {s:8d} samples, up to {end}")
    prev = cut
print(f"loop: {total:.0f} instructions a warp a trip ({trips} trips); "
      f"all samples {sum(int(r[at_samples] or 0) for r in data)}")
mix = collections.Counter()
for i in range(first, last + 1):
    m = re.match(r"(@!?U?P\w+\s+)?([A-Z0-9_]+)", data[i][at_src].strip())
    mix[m.group(2) if m else "?"] += executed(data[i]) / trips
print(" ".join(f"{op} {n:.0f}" for op, n in mix.most_common(24)))
