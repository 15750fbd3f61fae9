#!/usr/bin/env bash
# Installs the Debian 12 packages Loom needs, only those that are missing.
# Idempotent and quiet when everything is already installed; runs
# `apt-get update` only when something has to be installed.
set -euo pipefail

PACKAGES=(
  # build
  cmake ninja-build make g++ pkg-config
  # the fuzzer (libFuzzer, ASan and UBSan runtimes) and `make format`
  clang libclang-rt-14-dev clang-format
  # libraries
  libopenblas-dev libhwy-dev libopenmpi-dev openmpi-bin nlohmann-json3-dev libcli11-dev libfmt-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  # shell tests read the JSON reports
  jq
  # `ip` for the bandwidth-shaped loopback testbed
  iproute2
)

installed() {
  dpkg -s "$1" 2>/dev/null | grep -q '^Status: install ok installed'
}

missing=()
for pkg in "${PACKAGES[@]}"; do
  installed "$pkg" || missing+=("$pkg")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: apt-get not found; install these packages by hand: ${missing[*]}" >&2
  exit 1
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "install-deps: not root and no sudo; install these packages as root: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
