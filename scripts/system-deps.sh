#!/usr/bin/env bash
# The system packages the native build needs: the libjpeg(-turbo) headers and library.
# Installed with apt when missing and we are root; otherwise a clear message.
# Optional, best effort: the RV32 cross compiler with which the DPU kernels' instructions are
# counted (pimloader.costmodel.proxy; its tests skip without it).
set -euo pipefail
if ! command -v riscv64-unknown-elf-gcc >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get install -y -qq gcc-riscv64-unknown-elf >/dev/null 2>&1 ||
     (apt-get update -qq && apt-get install -y -qq gcc-riscv64-unknown-elf >/dev/null 2>&1)) ||
        echo "note: gcc-riscv64-unknown-elf not installed: instruction counts skipped" >&2
fi
if echo '#include <stdio.h>
#include <jpeglib.h>' | cc -E -x c - >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && apt-get install -y -qq libjpeg62-turbo-dev || apt-get install -y -qq libjpeg-dev
else
    echo "pimloader needs the libjpeg headers: install libjpeg62-turbo-dev (Debian) or libjpeg-turbo-devel" >&2
    exit 1
fi
