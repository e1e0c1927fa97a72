#!/usr/bin/env bash
# README command 1: install dependencies, build, and run kvtierd on its embedded defaults
# (127.0.0.1:50051, RocksDB under ./kvtier-data). Extra arguments go to kvtierd.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
exec build/service/kvtierd "$@"
