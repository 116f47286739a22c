#!/usr/bin/env bash
# The system packages pimloader's build, tests and benchmarks need, installed with apt when
# missing and we are root (as CI is); otherwise a clear message.
#   required: the libjpeg(-turbo) headers and library (the native build)
#   optional: espeak-ng and sox, which synthesise the speech dataset of the audio tests and
#             benchmarks (benchmarks/make_speech_dataset.py); without them those tests skip
#   optional: nginx (Debian's), the HTTP server the shard tests and benchmarks start on a
#             loopback port; without it they fall back to python -m http.server
#   optional, best effort: the RV32 cross compiler with which the DPU kernels' instructions
#             are counted (pimloader.costmodel.proxy; its tests skip without it)
set -euo pipefail
if ! command -v riscv64-unknown-elf-gcc >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get install -y -qq gcc-riscv64-unknown-elf >/dev/null 2>&1 ||
     (apt-get update -qq && apt-get install -y -qq gcc-riscv64-unknown-elf >/dev/null 2>&1)) ||
        echo "note: gcc-riscv64-unknown-elf not installed: instruction counts skipped" >&2
fi

missing_required=()
missing_optional=()
if ! echo '#include <stdio.h>
#include <jpeglib.h>' | cc -E -x c - >/dev/null 2>&1; then
    missing_required+=(libjpeg)
fi
for tool in espeak-ng sox; do
    command -v "$tool" >/dev/null || missing_optional+=("$tool")
done
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing_optional+=(nginx)
[ ${#missing_required[@]} -eq 0 ] && [ ${#missing_optional[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    if [ ${#missing_required[@]} -ne 0 ]; then
        apt-get install -y -qq libjpeg62-turbo-dev || apt-get install -y -qq libjpeg-dev
    fi
    if [ ${#missing_optional[@]} -ne 0 ]; then
        apt-get install -y -qq "${missing_optional[@]}"
    fi
    exit 0
fi
if [ ${#missing_optional[@]} -ne 0 ]; then
    echo "note: ${missing_optional[*]} missing (apt-get install espeak-ng sox nginx): without" \
         "espeak-ng and sox the speech dataset cannot be made and the tests that need it" \
         "skip; without nginx the shard tests serve over python -m http.server" >&2
fi
if [ ${#missing_required[@]} -ne 0 ]; then
    echo "pimloader needs the libjpeg headers: install libjpeg62-turbo-dev (Debian) or libjpeg-turbo-devel" >&2
    exit 1
fi
