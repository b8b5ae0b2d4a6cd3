#!/usr/bin/env python3
"""ptx-of-cache.py: the PTX NVIDIA's OpenCL driver produced, out of a flashcl program-cache entry
(FLASHCL_CACHE_DIR), made fit for CUDA's own tools, which take at most 48 KB of static shared memory.

    tools/ptx-of-cache.py ENTRY.bin OUT.ptx --shrink-shared
        the static __local arrays shrunk to share 48 KB (their sizes change no instruction), for ptxas
        and nvdisasm (tools/sass-of-cache.sh)
    tools/ptx-of-cache.py ENTRY.bin OUT.ptx --dynamic-shared
        the arrays made one block of dynamic shared memory (fcl_dyn_smem, their offsets kept), and the
        work-group offsets %envreg0..2 that NVIDIA OpenCL's get_group_id adds (zero for flashcl's
        launches; CUDA does not set them) made zeros, so CUDA's driver API can launch it
        (tools/ncu-of-cache.sh); prints the dynamic shared-memory bytes the launch needs
"""
import re
import sys

if len(sys.argv) != 4 or sys.argv[3] not in ("--shrink-shared", "--dynamic-shared"):
    sys.exit(__doc__)
entry, out, mode = sys.argv[1:]
data = open(entry, "rb").read()
start = data.find(b"//\n// Generated")
if start < 0:
    start = data.find(b".version")
if start < 0:
    sys.exit(f"{entry}: no PTX in this cache entry (not NVIDIA's OpenCL?)")
ptx = data[start:].split(b"\0", 1)[0].decode("ascii", "replace")

if mode == "--shrink-shared":
    arrays = re.findall(r"\.shared \.align \d+ \.b8 [^\[\s]+\[\d+\]", ptx)
    cap = 48 * 1024 // max(1, len(arrays)) // 1024 * 1024
    ptx = re.sub(r"(\.shared \.align \d+ \.b8 [^\[\s]+)\[(\d+)\]",
                 lambda m: f"{m.group(1)}[{min(int(m.group(2)), cap)}]", ptx)
else:
    decl = re.compile(r"^\s*\.shared \.align (\d+) \.b8 ([^\[\s]+)\[(\d+)\];\s*$", re.M)
    offset, places = 0, []
    for align, name, size in decl.findall(ptx):
        align = int(align)
        offset = (offset + align - 1) // align * align
        places.append((name, offset))
        offset += int(size)
    ptx = decl.sub("", ptx)
    for name, at in places:
        ptx = re.sub(r"(?<![\w$])" + re.escape(name) + r"(?![\w$])",
                     f"fcl_dyn_smem+{at}" if at else "fcl_dyn_smem", ptx)
    used = sorted(set(re.findall(r"%envreg\d+", ptx)))
    if [r for r in used if r not in ("%envreg0", "%envreg1", "%envreg2")]:
        sys.exit(f"{entry}: reads {used}; only the work-group offsets %envreg0..2 are known here")
    ptx = re.sub(r"%envreg[0-2]\b", "0", ptx)
    entry_at = re.search(r"^(\.visible\s+)?\.entry", ptx, re.M)
    ptx = ptx[:entry_at.start()] + ".extern .shared .align 1024 .b8 fcl_dyn_smem[];\n" + ptx[entry_at.start():]
    print(offset)
open(out, "w").write(ptx)
