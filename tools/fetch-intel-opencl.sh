#!/bin/sh
# Fetches a second OpenCL implementation of the CPU, Intel's oneAPI OpenCL
# CPU runtime, from PyPI, unpacked into a folder (no install, no root), and
# writes there intel.env, to source before running flashcl on it
# (OCL_ICD_FILENAMES, LD_LIBRARY_PATH, FLASHCL_DEVICE). A second run reuses
# what is there. Exit 1 with a message when pip or the registry cannot be
# reached.
#
#     tools/fetch-intel-opencl.sh ~/.cache/flashcl/intel-opencl
#     . ~/.cache/flashcl/intel-opencl/intel.env && meson test -C build
set -eu
dir="${1:?usage: $0 FOLDER}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
# Pinned: a changed runtime is a change to notice, not a surprise in CI.
wheels="intel-opencl-rt==2026.2.0 intel-cmplr-lib-rt==2026.2.0 tbb==2023.2.0"

if [ ! -f "$dir/intel.env" ]; then
    if ! python3 -m pip --version >/dev/null 2>&1; then
        echo "fetch-intel-opencl.sh: python3 -m pip is not available" >&2
        exit 1
    fi
    # shellcheck disable=SC2086  # the list is split on purpose
    if ! python3 -m pip download --quiet --no-deps --only-binary=:all: --disable-pip-version-check \
            -d "$dir/wheels" $wheels >&2; then
        echo "fetch-intel-opencl.sh: could not download $wheels from PyPI" >&2
        exit 1
    fi
    for wheel in "$dir"/wheels/*.whl; do
        python3 -m zipfile -e "$wheel" "$dir/unpacked/$(basename "$wheel" .whl)"
    done
    intel=$(find "$dir/unpacked" -name libintelocl.so -path '*/data/lib/*' | head -n 1)
    if [ -z "$intel" ]; then
        echo "fetch-intel-opencl.sh: the wheels do not hold libintelocl.so" >&2
        exit 1
    fi
    libs=$(find "$dir/unpacked" -type d -path '*/data/lib' | sort | tr '\n' ':')
    cat > "$dir/intel.env" <<EOF
# Intel's oneAPI OpenCL CPU runtime as one more OpenCL platform, the device flashcl picks (tools/fetch-intel-opencl.sh).
export OCL_ICD_FILENAMES="$intel"
export LD_LIBRARY_PATH="$libs\${LD_LIBRARY_PATH:-}"
export FLASHCL_DEVICE="Intel(R) OpenCL"
EOF
fi
echo "$dir"
