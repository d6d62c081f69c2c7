#!/usr/bin/env bash
# kiln db end to end: import a JSON lines file into a fresh store, ls,
# best (text and JSON), export -> import -> export is identical, and the
# exit codes of the error cases. Simulated and unverified (skip_verify)
# records are listed apart and never valid or best, in kiln db and kiln
# report; warm and cold records (kl_record.h) never compete for best.
# Usage: db_cli_test.sh PATH/TO/kiln
set -u
KILN=$1
T=$(mktemp -d "${TMPDIR:-/tmp}/kiln-dbcli-XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

KEY=00112233445566778899aabbccddeeff
KEY2=ffeeddccbbaa99887766554433221100
# Trace{insts: [split, sample_perfect_tile(decided)], space: "x"}
TRACE=0a070a0573706c69740a170a1373616d706c655f706572666563745f74696c653801120178
CPU=cpu/x86_64-avx512
cat >"$T/in.jsonl" <<EOF
{"type":"workload","key":"$KEY","name":"matmul_64","op_kind":"matmul","flop":524288.0}
{"type":"record","workload_key":"$KEY","target":"$CPU","seq":1,"status":"STATUS_OK","median_s":4e-5,"samples":[4e-5,4.1e-5],"number":3,"agent":"a1","trace":"$TRACE"}
{"type":"record","workload_key":"$KEY","target":"$CPU","seq":2,"status":"STATUS_OK","median_s":2e-5,"samples":[2e-5],"agent":"a2","device_name":"Xeon","trace":"$TRACE","trace_hash":"$KEY"}

{"type":"record","workload_key":"$KEY","target":"$CPU","seq":3,"status":"STATUS_WRONG_RESULT","median_s":1e-6}
{"type":"record","workload_key":"$KEY","target":"cuda/sm_90","seq":1,"status":"STATUS_TIMEOUT"}
{"type":"record","workload_key":"$KEY","target":"$CPU","seq":4,"status":"STATUS_OK","median_s":1e-6,"simulated":true,"agent":"sim"}
{"type":"record","workload_key":"$KEY","target":"$CPU","seq":5,"status":"STATUS_OK","median_s":3e-5,"agent":"a3","evaluator":{"number":1,"repeat":5,"min_repeat_ms":50,"flush_cache":true}}
{"type":"record","workload_key":"$KEY","target":"$CPU","seq":6,"status":"STATUS_OK","median_s":1e-5,"agent":"a4","evaluator":{"number":1,"repeat":3,"min_repeat_ms":0,"flush_cache":true}}
{"type":"record","workload_key":"$KEY","target":"$CPU","seq":7,"status":"STATUS_OK","median_s":1e-7,"agent":"a5","evaluator":{"number":1,"min_repeat_ms":0,"flush_cache":true,"skip_verify":true}}
{"type":"workload","key":"$KEY2","name":"only_sim","op_kind":"matmul","flop":524288.0}
{"type":"record","workload_key":"$KEY2","target":"$CPU","seq":1,"status":"STATUS_OK","median_s":5e-6,"simulated":true}
EOF

"$KILN" db import --db "$T/db" "$T/in.jsonl" || fail "import"
out=$("$KILN" db ls --db "$T/db") || fail "ls"
# One row per condition; simulated and unverified records on rows of their
# own, never valid, never best.
echo "$out" | grep -q "matmul_64 .*matmul .*$CPU  *warm  *4  *3  *20.00 .*26.2" ||
    fail "ls warm row for $CPU: $out"
echo "$out" | grep -q "matmul_64 .*$CPU  *cold  *1  *1  *10.00 " ||
    fail "ls cold row for $CPU: $out"
echo "$out" | grep -q "matmul_64 .*$CPU  *simulated  *1  *-  *- " ||
    fail "ls simulated row for $CPU: $out"
echo "$out" | grep -q "matmul_64 .*$CPU  *unverified  *1  *-  *- " ||
    fail "ls unverified row for $CPU: $out"
echo "$out" | grep -q "only_sim .*$CPU  *simulated  *1  *-  *- " ||
    fail "ls row of a simulated-only workload: $out"
echo "$out" | grep -q "cuda/sm_90  *warm  *1  *0  *- " || fail "ls row for GPU: $out"

out=$("$KILN" db best --db "$T/db" --name matmul_64 --target "$CPU") ||
    fail "best"
echo "$out" | grep -q "^seq  *2$" || fail "best seq: $out"
echo "$out" | grep -q "agent  *a2 (Xeon)" || fail "best agent: $out"
echo "$out" | grep -q "^evaluator  *warm: .*min_repeat_ms 50, flush on.*not recorded" ||
    fail "best evaluator: $out"
# The trace's text form (its exact layout belongs to the schedule module).
echo "$out" | grep -q "split" || fail "trace split: $out"
echo "$out" | grep -q "sample_perfect_tile" || fail "trace sampling: $out"
out=$("$KILN" db best --db "$T/db" --key "$KEY" --json) || fail "best --json"
[ "$(echo "$out" | wc -l)" -eq 1 ] || fail "one best line (GPU has none): $out"
echo "$out" | grep -q '"type":"record".*"seq":2' || fail "best json: $out"
# Cold records compete among themselves only; the faster unverified one
# never.
out=$("$KILN" db best --db "$T/db" --key "$KEY" --condition cold --json) ||
    fail "best --condition cold"
echo "$out" | grep -q '"seq":6.*"evaluator":{.*"min_repeat_ms":0' ||
    fail "best cold: $out"
out=$("$KILN" db best --db "$T/db" --key "$KEY" --condition cold) ||
    fail "best --condition cold (text)"
echo "$out" | grep -q "^evaluator  *cold: number 1, repeat 3, min_repeat_ms 0, flush on" ||
    fail "best cold evaluator: $out"
"$KILN" db best --db "$T/db" --key "$KEY" --condition hot 2>/dev/null
[ $? -eq 2 ] || fail "a bad --condition is a usage error"
# Only simulated records: no valid record.
"$KILN" db best --db "$T/db" --name only_sim 2>"$T/err"
[ $? -eq 3 ] || fail "best of simulated records only must exit 3"
grep -q "no valid warm record" "$T/err" || fail "only_sim: $(cat "$T/err")"

"$KILN" db best --db "$T/db" --key "$KEY" --target cuda/sm_90 2>/dev/null
[ $? -eq 3 ] || fail "best without a valid record must exit 3"
"$KILN" db best --db "$T/db" --name nope 2>/dev/null
[ $? -eq 1 ] || fail "best of an unknown name must exit 1"
"$KILN" db best --db "$T/db" --key ffffffffffffffffffffffffffffffff 2>/dev/null
[ $? -eq 1 ] || fail "best of an unknown key must exit 1"
"$KILN" db best --db "$T/db" --key xyz 2>/dev/null
[ $? -eq 2 ] || fail "a bad --key is a usage error"
"$KILN" db ls --db "$T/missing" 2>"$T/err"
[ $? -eq 1 ] || fail "missing DIR must exit 1"
grep -q "$T/missing" "$T/err" || fail "missing DIR message: $(cat "$T/err")"
"$KILN" db ls 2>/dev/null
[ $? -eq 2 ] || fail "no --db is a usage error"

"$KILN" db export --db "$T/db" --out "$T/a.jsonl" || fail "export"
"$KILN" db import --db "$T/db2" "$T/a.jsonl" 2>/dev/null || fail "re-import"
"$KILN" db export --db "$T/db2" >"$T/b.jsonl" || fail "export 2"
cmp -s "$T/a.jsonl" "$T/b.jsonl" || fail "export -> import -> export differs"
[ "$(wc -l <"$T/a.jsonl")" -eq 11 ] || fail "export has 11 lines"
grep -q '"seq":6,.*"evaluator":{"number":1,"repeat":3' "$T/a.jsonl" ||
    fail "export lost the evaluator"

# kiln report counts measurements of its condition only and says what it
# left out.
"$KILN" report --db "$T/db" --target "$CPU" --html "$T/r.html" 2>"$T/r.log" ||
    fail "report exited $?: $(cat "$T/r.log")"
grep -q '<td class="l">Total</td><td></td><td></td><td>4</td>' "$T/r.html" ||
    fail "report: 4 warm trials expected: $(grep Total "$T/r.html")"
grep -q "Not counted: 2 simulated record(s), 1 unverified record(s) (skip_verify), 1 record(s) measured cold" "$T/r.html" ||
    fail "report: no note of what it left out"
"$KILN" report --db "$T/db" --target "$CPU" --condition cold \
    --html "$T/c.html" 2>"$T/c.log" || fail "report --condition cold"
grep -q '<td class="l">Total</td><td></td><td></td><td>1</td>' "$T/c.html" ||
    fail "report cold: 1 trial expected: $(grep Total "$T/c.html")"
"$KILN" db upgrade --db "$T/db" >"$T/up.txt" || fail "upgrade exited $?"
grep -q "schema 2 already" "$T/up.txt" || fail "upgrade: $(cat "$T/up.txt")"
"$KILN" db upgrade --db "$T/nothing" 2>/dev/null
[ $? -eq 1 ] || fail "upgrade of a missing store must exit 1"
[ -e "$T/nothing" ] && fail "upgrade created a store"
mkdir "$T/empty"
"$KILN" db upgrade --db "$T/empty" 2>/dev/null
[ $? -eq 1 ] || fail "upgrade of an empty directory must exit 1"
[ -e "$T/empty/data.mdb" ] && fail "upgrade created a store in an empty directory"

printf '%s\n{"type":"record",,}\n' "$(head -1 "$T/in.jsonl")" >"$T/bad.jsonl"
"$KILN" db import --db "$T/db3" "$T/bad.jsonl" 2>"$T/err"
[ $? -eq 1 ] || fail "malformed import must exit 1"
grep -q "line 2" "$T/err" || fail "message names line 2: $(cat "$T/err")"
echo "ok"
