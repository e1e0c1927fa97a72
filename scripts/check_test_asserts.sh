#!/usr/bin/env bash
# Tests assert statuses with the matchers of tests/testing/status_matchers.h (ASSERT_OK,
# EXPECT_OK, StatusIs), which print the status they got, never with
# ASSERT_TRUE(x.ok()) / EXPECT_TRUE(x.ok()), which print only "false". Lists every
# offending line (file:line) and exits 1; 0 when there is none.
# Usage: scripts/check_test_asserts.sh [SOURCE_DIR] (default: the repository root).
set -uo pipefail
src="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
hits=$(grep -rnE --include='*.cc' --include='*.h' \
         '\b(ASSERT|EXPECT)_TRUE\([^;]*\.ok\(\)\)' "$src/tests" | sed "s#^$src/##" |
       grep -vE '&&|\|\|')
if [[ -n "$hits" ]]; then
  echo "check_test_asserts: use ASSERT_OK / EXPECT_OK (tests/testing/status_matchers.h):" >&2
  echo "$hits" | sed 's/^/    /' >&2
  exit 1
fi
echo "check_test_asserts: every status assertion prints its status"
