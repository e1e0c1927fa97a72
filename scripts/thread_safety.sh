#!/usr/bin/env bash
# Clang's thread-safety analysis over every production source file: the ABSL_GUARDED_BY /
# ABSL_EXCLUSIVE_LOCKS_REQUIRED annotations on kvtier's locks (common/mutex.h) are checked
# by a compiler, as leveldb does, instead of being comments. Syntax-only (no code is
# generated), with each file's flags from the build's compile_commands.json; any
# -Wthread-safety finding fails the run. Run by scripts/test.sh after the Release build.
# Usage: scripts/thread_safety.sh [build dir, default build]
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
clang="$(command -v clang++-14 || command -v clang++ || true)"
[ -n "$clang" ] || { echo "scripts/thread_safety.sh: clang++ not found (scripts/deps.sh installs clang-14)" >&2; exit 1; }
[ -f "$build/compile_commands.json" ] || { echo "scripts/thread_safety.sh: no $build/compile_commands.json (run scripts/build.sh)" >&2; exit 1; }
# One line per production file: the compile command, with gcc's output flags dropped and
# clang's analysis added. Tests, tools, generated code and kv/ (pure functions, no
# locks; its CPU-feature probes use gcc-only builtins) are not analysed.
/usr/bin/python3 - "$build/compile_commands.json" "$PWD" "$clang" > "$build/thread_safety.cmds" <<'PY'
import json, shlex, sys
db, root, clang = sys.argv[1:]
dirs = ("common/", "storage/", "protocol/", "client/", "service/", "events/", "ucx/",
        "dataplane/")
for entry in json.load(open(db)):
    src = entry["file"]
    rel = src[len(root) + 1:] if src.startswith(root + "/") else src
    if not rel.startswith(dirs) or rel.startswith("kv/") or "/python/" in rel \
            or "/cli/" in rel:
        continue
    args = shlex.split(entry["command"])[1:]
    kept, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-c"):
            skip = a == "-o"
            continue
        if a.startswith("-W") or a.startswith("-O") or a == src:
            continue
        kept.append(a)
    cmd = [clang, "-fsyntax-only", "-w", "-Wthread-safety", "-Wthread-safety-beta",
           "-Werror=thread-safety", "-Werror=thread-safety-beta"] + kept + [src]
    print("cd " + shlex.quote(entry["directory"]) + " && " + " ".join(map(shlex.quote, cmd)))
PY
n=$(wc -l < "$build/thread_safety.cmds")
echo "thread-safety analysis: $n files ($clang)"
rc=0
tr '\n' '\0' < "$build/thread_safety.cmds" | xargs -0 -P "$(nproc)" -n 1 bash -c || rc=$?
if [ "$rc" -ne 0 ]; then echo "scripts/thread_safety.sh: thread-safety findings (above)" >&2; exit 1; fi
echo "thread-safety analysis: clean"
