#!/usr/bin/env bash
# Checks the include rules of docs/architecture.md ("Modules and the
# include rules") on a source tree: a module may include only the headers
# of the modules below it, and a private header (*_int.h, *_priv.h) only
# the files of its own folder. Prints each violation as FILE: includes HEADER
# (MODULE) and exits 1 when there is one; exits 0 with "include rules: ok".
# Usage: tools/check_includes.sh [ROOT]     (default: the repository)
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2

# The headers of a module: MODULE -> the .h files of its folder(s).
headers() { # DIR...
    for d in "$@"; do
        [ -d "$d" ] && find "$d" -maxdepth 1 -name '*.h' -printf '%f\n'
    done
}

bad=0
# rule SRCS... -- FORBIDDEN_DIRS...: no file under a source folder (or
# source file) includes a header that lives in a forbidden folder.
rule() {
    local src=() forb=() seen=0
    for a in "$@"; do
        if [ "$a" = "--" ]; then seen=1; continue; fi
        if [ $seen -eq 0 ]; then src+=("$a"); else forb+=("$a"); fi
    done
    local hs
    hs=$(headers "${forb[@]}" | sort -u)
    [ -n "$hs" ] || return 0
    for d in "${src[@]}"; do
        [ -e "$d" ] || continue
        while IFS=: read -r file line; do
            local h
            h=$(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' <<<"$line")
            h=${h##*/}
            [ -n "$h" ] || continue
            if grep -qxF "$h" <<<"$hs"; then
                echo "$file: includes $h (of ${forb[*]})"
                bad=1
            fi
        done < <(grep -Hrn --include='*.c' --include='*.h' '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$d" | cut -d: -f1,3-)
    done
}

coord=$(find coordinator -mindepth 1 -maxdepth 1 -type d | sort)
# common/ and agent/ include nothing of coordinator/.
rule common agent -- $coord
# The agent's core (agent/: the actor, its work, the registry of backends,
# the sandboxes, the measurement's vocabulary) knows its backends only
# through kla_backend.h; one backend includes nothing of another.
rule $(find agent -maxdepth 1 -name '*.[ch]' | sort) -- agent/cpu agent/cuda
rule agent/cpu -- agent/cuda
rule agent/cuda -- agent/cpu
# The compiler half (ir, schedule, space, codegen) knows nothing of the
# network, the store's users or the search.
rule coordinator/ir coordinator/schedule coordinator/space \
    coordinator/codegen -- \
    coordinator/dispatch coordinator/search coordinator/tune \
    coordinator/tasksched coordinator/models coordinator/export \
    coordinator/report coordinator/metrics
# schedule (the schedule state, its primitives, traces) knows nothing of
# the design spaces above it (space: rules, postprocessors).
rule coordinator/schedule -- coordinator/space
# search proposes and observes: nothing of dispatch, the store or the
# conductor.
rule coordinator/search -- coordinator/dispatch coordinator/tune \
    coordinator/tasksched
for f in kl_store.h kl_store_priv.h; do
    if grep -rln --include='*.c' --include='*.h' "#include \"$f\"" \
        coordinator/search 2>/dev/null; then
        echo "coordinator/search: includes $f (the store)"
        bad=1
    fi
done
# export replays records through codegen (kl_codegen_replay_proto), as the
# tuner does: nothing of the search, the conductor or dispatch.
rule coordinator/export -- coordinator/search coordinator/tune \
    coordinator/dispatch coordinator/tasksched
# dispatch moves requests and results: nothing of ir, schedule, codegen,
# search or the conductor.
rule coordinator/dispatch -- coordinator/ir coordinator/schedule \
    coordinator/space coordinator/codegen coordinator/search coordinator/tune
# the head node (kiln serve) routes batches between jobs and a dispatch: it
# never proposes, compiles or records anything.
rule coordinator/serve -- coordinator/ir coordinator/schedule \
    coordinator/space coordinator/codegen coordinator/search coordinator/tune \
    coordinator/tasksched coordinator/models coordinator/export
for f in kl_store.h kl_store_priv.h; do
    if grep -rln --include='*.c' --include='*.h' "#include \"$f\"" \
        coordinator/serve 2>/dev/null; then
        echo "coordinator/serve: includes $f (the head stores no records)"
        bad=1
    fi
done
# fleet starts local agents and binds a job's side of its fleet (a dispatch
# or a head node's port): nothing of the compiler, the search, the
# scheduler's books or what lies above the conductor; and only tools (and
# tests) start a fleet: no module of the coordinator includes it.
rule coordinator/fleet -- coordinator/ir coordinator/schedule \
    coordinator/codegen coordinator/search coordinator/tasksched \
    coordinator/models coordinator/export coordinator/report \
    coordinator/metrics coordinator/serve
rule $(grep -vx coordinator/fleet <<<"$coord") -- coordinator/fleet
# the scheduler only keeps the books.
rule coordinator/tasksched -- coordinator/dispatch coordinator/search \
    coordinator/tune coordinator/ir coordinator/schedule coordinator/space \
    coordinator/codegen

# A private header (*_int.h, *_priv.h: what the files of one folder share)
# is included only by the files of its own folder; another folder reads
# the module's public header. The unit tests (tests/, not checked here)
# may read a module's internals.
private() {
    local privs
    privs=$(find common agent coordinator tools \( -name '*_int.h' -o \
        -name '*_priv.h' \) -printf '%h %f\n' 2>/dev/null | sort -u)
    [ -n "$privs" ] || return 0
    while IFS=: read -r file line; do
        local h dir own
        h=$(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' <<<"$line")
        h=${h##*/}
        [ -n "$h" ] || continue
        dir=$(dirname "$file")
        own=$(awk -v h="$h" '$2 == h { print $1 }' <<<"$privs")
        [ -n "$own" ] || continue
        if ! grep -qxF "$dir" <<<"$own"; then
            echo "$file: includes $h (private to ${own//$'\n'/ })"
            bad=1
        fi
    done < <(grep -rn --include='*.c' --include='*.h' \
        '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]*_\(int\|priv\)\.h"' \
        common agent coordinator tools 2>/dev/null | cut -d: -f1,3-)
}
private

if [ $bad -ne 0 ]; then
    echo "include rules: violated (docs/architecture.md)"
    exit 1
fi
echo "include rules: ok"
