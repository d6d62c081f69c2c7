#!/usr/bin/env bash
# The include rules hold on this tree (tools/check_includes.sh), and the
# checker catches a violation: a copy of the tree where search includes
# the store, dispatch includes the IR, export includes the search, the
# agent includes a coordinator header, the conductor includes the fleet
# and tune includes search's private header must fail, naming each.
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
check="$src/tools/check_includes.sh"
fail() { echo "FAIL: $*"; exit 1; }
out=$("$check" "$src") || fail "the tree breaks the include rules: $out"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for d in common agent coordinator; do cp -r "$src/$d" "$T/$d"; done
echo '#include "kl_store.h"' >>"$T/coordinator/search/kl_mutate.c"
echo '#include "kl_ir.h"' >>"$T/coordinator/dispatch/kl_dispatch.c"
echo '#include "kl_job.h"' >>"$T/agent/work.c"
echo '#include "kl_search.h"' >>"$T/coordinator/export/kl_export.c"
echo '#include "kl_search_priv.h"' >>"$T/coordinator/tune/kl_task.c"
echo '#include "kl_fleet.h"' >>"$T/coordinator/tune/kl_job.c"
out=$("$check" "$T")
rc=$?
[ $rc -eq 1 ] || fail "an injected violation passed (exit $rc)"
grep -q "coordinator/search: includes kl_store.h" <<<"$out" ||
    fail "search -> store not named: $out"
grep -q "coordinator/dispatch/kl_dispatch.c: includes kl_ir.h" <<<"$out" ||
    fail "dispatch -> ir not named: $out"
grep -q "coordinator/export/kl_export.c: includes kl_search.h" <<<"$out" ||
    fail "export -> search not named: $out"
grep -q "coordinator/tune/kl_job.c: includes kl_fleet.h" <<<"$out" ||
    fail "tune -> fleet not named: $out"
grep -q "agent/work.c: includes kl_job.h" <<<"$out" ||
    fail "agent -> coordinator not named: $out"
grep -q "coordinator/tune/kl_task.c: includes kl_search_priv.h (private to coordinator/search)" <<<"$out" ||
    fail "tune -> search's private header not named: $out"
echo PASS
