#!/usr/bin/env bash
# Installs everything cairn needs to build and test on Debian 12 (run as root, or with sudo).
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
# clang and libclang-rt-14-dev (its runtimes, libFuzzer among them: clang alone compiles a
# -fsanitize=fuzzer program and fails at the link) build the libFuzzer targets that suite 'fuzz'
# runs; without them meson configures those off and only the deterministic drivers run.
# libxapian-dev: the peer bench-retrieve measures cairn against (optional: built when found).
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential meson ninja-build pkg-config python3 \
  liblmdb-dev lmdb-utils libmsgpack-dev libssl-dev libjansson-dev libcurl4-openssl-dev \
  libopenblas-dev libsqlite3-dev libxxhash-dev libmicrohttpd-dev libxapian-dev \
  python3-aiosmtpd clang libclang-rt-14-dev clang-format >/dev/null
echo "install-deps: done"
