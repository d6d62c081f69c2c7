#!/usr/bin/env bash
# The include rules hold on this tree (tools/check_includes.sh), and the
# checker catches a violation: a copy of the tree where search includes
# the store, dispatch includes the IR, export includes the search, the
# agent includes a coordinator header, the conductor includes the fleet,
# tune includes search's private header, schedule includes the design
# spaces, a design space reads schedule's private header, the agent's
# core includes a backend's header and one backend another's must fail,
# naming each.
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
echo '#include "kl_space.h"' >>"$T/coordinator/schedule/kl_trace.c"
echo '#include "kl_sched_priv.h"' >>"$T/coordinator/space/rules_cpu.c"
echo '#include "kla_runner.h"' >>"$T/agent/agent.c"
echo '#include "kla_builder.h"' >>"$T/agent/cuda/cuda_build.c"
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
grep -q "coordinator/schedule/kl_trace.c: includes kl_space.h" <<<"$out" ||
    fail "schedule -> space not named: $out"
grep -q "coordinator/space/rules_cpu.c: includes kl_sched_priv.h" <<<"$out" ||
    fail "space -> schedule's private header not named: $out"
grep -q "agent/agent.c: includes kla_runner.h" <<<"$out" ||
    fail "agent core -> cpu backend not named: $out"
grep -q "agent/cuda/cuda_build.c: includes kla_builder.h" <<<"$out" ||
    fail "cuda backend -> cpu backend not named: $out"
echo PASS
