#!/usr/bin/env bash
# Creates the Python environment for kvtier's real-model tests and `kvtier eval model`: a venv on
# Debian's /usr/bin/python3 with --system-site-packages, so the client's Debian packages
# (python3-grpcio, python3-protobuf, python3-numpy) stay the ones it imports, plus exact pins of
# torch / transformers / gguf / accelerate from PyPI (the CUDA build of torch, run on CPU).
# Installs Debian's libopenblas0-pthread (numpy's reference BLAS is ~10x slower) and fetches the
# model with scripts/model.sh. Safe to re-run: an existing venv whose pins import is reused.
# Prints the venv's interpreter on its last line.
# Folder: ${KVTIER_CACHE:-$HOME/.cache/kvtier}/venv-model.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${KVTIER_CACHE:-$HOME/.cache/kvtier}/venv-model"
pins=(torch==2.15.0 transformers==5.23.0 gguf==0.19.0 accelerate==1.16.0)
if ! dpkg-query -W -f='${Status}' libopenblas0-pthread 2>/dev/null | grep -q "ok installed"; then
  sudo_cmd=(); [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q libopenblas0-pthread >/dev/null \
    || { "${sudo_cmd[@]}" apt-get update -q >/dev/null &&
         "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q libopenblas0-pthread >/dev/null; }
fi
stamp="$venv/.kvtier-pins"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "${pins[*]} $(cat scripts/model-requirements.txt)" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  # model-requirements.txt pins every package the four pull in (pip freeze of a working install).
  "$venv/bin/python" -m pip install -q --no-input -c scripts/model-requirements.txt ${pins[@]}
  "$venv/bin/python" -c "import torch, transformers, gguf, accelerate" 
  echo "${pins[*]} $(cat scripts/model-requirements.txt)" > "$stamp"
fi
scripts/model.sh >/dev/null
echo "$venv/bin/python"
