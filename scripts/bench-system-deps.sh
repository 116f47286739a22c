#!/usr/bin/env bash
# The system packages that FFCV 1.0.2 (an optional peer of `make bench`) needs to build:
# libjpeg-turbo's TurboJPEG API, OpenCV and pkg-config, which its setup.py asks for them.
# Installed with apt when missing and we are root; otherwise a message, and `make bench` goes
# on: the benchmark then reports FFCV as not installed. `make test` does not run this.
set -uo pipefail
if pkg-config --exists libturbojpeg opencv4 2>/dev/null; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        libturbojpeg0-dev libopencv-dev pkg-config >/dev/null && exit 0
fi
echo "FFCV needs libturbojpeg0-dev, libopencv-dev and pkg-config (apt) to build; without" \
     "them the benchmark runs without FFCV" >&2
exit 0
