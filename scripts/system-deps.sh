#!/usr/bin/env bash
# The system packages the native build needs: the libjpeg(-turbo) headers and library.
# Installed with apt when missing and we are root; otherwise a clear message.
set -euo pipefail
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
