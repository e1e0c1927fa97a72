#!/usr/bin/env bash
# Checks the dependency rules of docs/design.md §1 Layout and dependency rules:
#   1. nothing under service/ includes "client/..." (the server shares protocol/ with the
#      client, never the client library itself);
#   2. nothing under storage/ includes a gRPC or protobuf header (grpcpp/, grpc/,
#      kvtier/v1/, google/protobuf/, *.pb.h);
#   3. nothing under storage/, client/ (the worker library; client/cli/ is the `kvtier`
#      tool and may), protocol/ or service/ includes "tools/...";
#   4. kvtierd and libkvtier_client.a (and libkvtier_storage.a, libkvtier_kv.a) hold no
#      symbol of the offline tools (namespace kvtier::tools, the cache simulator, replay,
#      trace parsing, the synthetic generators, attention metrics) and no hiredis symbol,
#      and kvtierd does not load libhiredis;
#   5. every lock is a common::Mutex / MutexLock / CondVar / Notification (common/mutex.h),
#      never the absl type directly, so the TSAN build (scripts/tsan.sh) sees it.
#   6. ucx/ (the bare UCX layer) includes nothing of kvtier but common/.
#   7. dataplane/ (the payload paths) includes nothing of kvtier but common/, protocol/,
#      ucx/ and the generated kvtier/v1 messages; the Put and Get reactors
#      (service/*reactor*) name no payload path (no shm_session / ucx_session, no
#      ShmRegion / UcxServer / UcxPut): they see a dataplane::PutSource / GetSink only
#      (docs/dataplane.md).
#   8. kv/ (pure KV semantics, the bottom layer) includes nothing of kvtier but common/.
#   9. the CLI sits above tools/: nothing under tools/ includes "client/cli/...".
#  10. inside storage/, only the TieredStore facade's own files (tiered_store*) include
#      storage/tiered_store.h; its collaborators take the vocabulary from
#      storage/store_types.h.
# Every broken rule is reported (file:line or binary: symbol) and the exit status is 1;
# 0 when all hold. Usage: scripts/check_deps.sh [SOURCE_DIR [BUILD_DIR]] (defaults: the
# repository root and SOURCE_DIR/build). Rule 4 needs kvtierd and the libraries built
# (ninja -C build kvtierd kvtier_client); a missing one is an error, not a pass.
set -uo pipefail

src="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
build="${2:-$src/build}"
failures=0

fail() {
  echo "check_deps: FAIL: $*" >&2
  failures=$((failures + 1))
}

# include_rule <rule text> <extended regex on the include target> <dir>... [-- <excluded
# path prefix>...]: every #include in *.h, *.cc, *.inc, *.cu under the dirs whose target
# matches, except in files under an excluded prefix (relative to the source root).
include_rule() {
  local rule="$1" pattern="$2"
  shift 2
  local dirs=() exclude='^$'
  while [[ $# -gt 0 && "$1" != "--" ]]; do
    [[ -d "$src/$1" ]] && dirs+=("$src/$1")
    shift
  done
  [[ $# -gt 0 ]] && shift
  while [[ $# -gt 0 ]]; do exclude+="|^$1"; shift; done
  [[ ${#dirs[@]} -eq 0 ]] && return
  local hits
  hits=$(grep -rnE --include='*.h' --include='*.cc' --include='*.inc' --include='*.cu' \
           "^[[:space:]]*#[[:space:]]*include[[:space:]]*[<\"]($pattern)" "${dirs[@]}" |
         sed "s#^$src/##" | grep -vE "$exclude")
  if [[ -n "$hits" ]]; then
    fail "$rule:"
    echo "$hits" | sed 's/^/    /' >&2
  fi
}

include_rule 'service/ includes the client library (use protocol/)' 'client/' service
include_rule 'storage/ includes gRPC or protobuf headers' \
  'grpcpp/|grpc/|grpc\+\+/|kvtier/v1/|google/protobuf/|[^">]*\.pb\.h' storage
include_rule 'ucx/ includes more than common/ (it is the bare UCX layer)' \
  'client/|service/|storage/|protocol/|events/|tools/|dataplane/|kv/|grpcpp/|grpc/|kvtier/v1/|[^">]*\.pb\.h' ucx
include_rule 'dataplane/ includes client/, service/, storage/, events/ or tools/ (it sits below both ends)' \
  'client/|service/|storage/|events/|tools/' dataplane
include_rule 'production code includes the offline tools (tools/)' 'tools/' \
  storage client protocol service -- client/cli/
include_rule 'kv/ includes more than common/ (it is the bottom layer)' \
  'client/|service/|storage/|protocol/|events/|tools/|dataplane/|ucx/|grpcpp/|grpc/|kvtier/v1/|[^">]*\.pb\.h' kv
include_rule 'tools/ includes the CLI (client/cli/ sits above tools/)' 'client/cli/' tools
include_rule 'a storage/ collaborator includes the TieredStore facade (use storage/store_types.h)' \
  'storage/tiered_store\.h' storage -- storage/tiered_store

# The reactors take a transport-neutral source and sink (dataplane/path.h).
reactor_paths=$(grep -nE 'shm_session|ucx_session|ShmRegion|UcxServer|UcxPut|ShmServer' \
                  "$src"/service/*reactor* 2>/dev/null | sed "s#^$src/##")
if [[ -n "$reactor_paths" ]]; then
  fail 'the Put / Get reactors name a payload path (use dataplane::PutSource / GetSink):'
  echo "$reactor_paths" | sed 's/^/    /' >&2
fi

# Every lock is common::Mutex (common/mutex.h), so scripts/tsan.sh sees it; absl::Mutex
# directly is invisible to TSAN (Debian's Abseil is not instrumented).
direct_locks=$(grep -rnE --include='*.h' --include='*.cc' \
                 'absl::(Mutex|MutexLock|ReaderMutexLock|WriterMutexLock|CondVar|Notification)\b' \
                 "$src"/{common,kv,storage,protocol,ucx,dataplane,client,service,events,tools,tests} 2>/dev/null |
               sed "s#^$src/##" | grep -v '^common/mutex.h:')
if [[ -n "$direct_locks" ]]; then
  fail 'locks must be common::Mutex & co. (common/mutex.h), not absl:: directly:'
  echo "$direct_locks" | sed 's/^/    /' >&2
fi

# Symbols of the offline tools and of hiredis, as `nm -C` prints them.
tool_symbols='kvtier::tools::|CacheSim|ReplayTrace|SyntheticKv|SyntheticRawBlock|SyntheticTokens'
tool_symbols+='|SyntheticParams|ParseTrace|ComputeReuseStats|[Rr]edis'
tool_symbols+='|kvtier::(kv|storage)::(Simulate|ReadTrace|ComputeStats|TopKRecall|KlDivergence)\b'
tool_symbols+='|kvtier::(kv|storage)::AttentionWeights\b'

symbol_rule() {
  local what="$1" path="$2"
  if [[ ! -e "$path" ]]; then
    local target
    target=$(basename "$path" | sed -E 's/^lib(.*)\.a$/\1/')
    fail "$what not found at $path (build it first: ninja -C $build $target)"
    return
  fi
  local hits
  hits=$(nm -C "$path" 2>/dev/null | grep -E "$tool_symbols" | sort -u)
  if [[ -n "$hits" ]]; then
    fail "$what links offline tool or hiredis code ($(echo "$hits" | wc -l) symbols):"
    echo "$hits" | head -20 | sed 's/^/    /' >&2
  fi
}

symbol_rule kvtierd "$build/service/kvtierd"
symbol_rule 'the worker client library' "$build/client/libkvtier_client.a"
symbol_rule 'the storage library' "$build/storage/libkvtier_storage.a"
symbol_rule 'the KV library' "$build/kv/libkvtier_kv.a"
if [[ -e "$build/service/kvtierd" ]] &&
   readelf -d "$build/service/kvtierd" 2>/dev/null | grep -q 'NEEDED.*hiredis'; then
  fail "kvtierd loads libhiredis (readelf -d build/service/kvtierd)"
fi

if [[ $failures -gt 0 ]]; then
  echo "check_deps: $failures rule(s) broken;" \
    "see docs/design.md §1 Layout and dependency rules" >&2
  exit 1
fi
echo "check_deps: all dependency rules hold"
