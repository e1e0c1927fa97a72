#!/usr/bin/env bash
# Installs kvtier's build and test dependencies from Debian bookworm packages (only what
# is missing). Safe to re-run.
set -euo pipefail
pkgs=(build-essential cmake ninja-build ccache pkg-config clang-14
      libgrpc++-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libabsl-dev
      librocksdb-dev libzstd-dev libxxhash-dev libssl-dev libhiredis-dev prometheus-cpp-dev
      libgtest-dev libgmock-dev libbenchmark-dev redis-server kubectl
      libzmq3-dev cppzmq-dev libmsgpack-cxx-dev openssl libucx-dev ucx-utils
      python3 python3-dev python3-grpcio python3-protobuf python3-numpy python3-pytest python3-zmq python3-msgpack)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  # kubectl is not a bookworm package everywhere: install it when available, never fail on it.
  avail=()
  for p in "${missing[@]}"; do
    if apt-cache show "$p" >/dev/null 2>&1; then avail+=("$p"); else echo "skipping unavailable package $p"; fi
  done
  [ ${#avail[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${avail[@]}"
fi
