#!/usr/bin/env bash
# kiln db end to end: import a JSON lines file into a fresh store, ls,
# best (text and JSON), export -> import -> export is identical, and the
# exit codes of the error cases. Usage: db_cli_test.sh PATH/TO/kiln
set -u
KILN=$1
T=$(mktemp -d "${TMPDIR:-/tmp}/kiln-dbcli-XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

KEY=00112233445566778899aabbccddeeff
# Trace{insts: [split, sample_perfect_tile(decided)], space: "x"}
TRACE=0a070a0573706c69740a170a1373616d706c655f706572666563745f74696c653801120178
CPU=cpu/x86_64-avx512
cat >"$T/in.jsonl" <<EOF
{"type":"workload","key":"$KEY","name":"matmul_64","op_kind":"matmul","flop":524288.0}
{"type":"record","workload_key":"$KEY","target":"$CPU","seq":1,"status":"STATUS_OK","median_s":4e-5,"samples":[4e-5,4.1e-5],"number":3,"agent":"a1","trace":"$TRACE"}
{"type":"record","workload_key":"$KEY","target":"$CPU","seq":2,"status":"STATUS_OK","median_s":2e-5,"samples":[2e-5],"agent":"a2","device_name":"Xeon","trace":"$TRACE","trace_hash":"$KEY"}

{"type":"record","workload_key":"$KEY","target":"$CPU","seq":3,"status":"STATUS_WRONG_RESULT","median_s":1e-6}
{"type":"record","workload_key":"$KEY","target":"cuda/sm_90","seq":1,"status":"STATUS_TIMEOUT"}
EOF

"$KILN" db import --db "$T/db" "$T/in.jsonl" || fail "import"
out=$("$KILN" db ls --db "$T/db") || fail "ls"
echo "$out" | grep -q "matmul_64 .*matmul .*$CPU .* 3 .* 2 .*20.00 .*26.2" ||
    fail "ls row for $CPU: $out"
echo "$out" | grep -q "cuda/sm_90 .* 1 .* 0 .* - " || fail "ls row for GPU: $out"

out=$("$KILN" db best --db "$T/db" --name matmul_64 --target "$CPU") ||
    fail "best"
echo "$out" | grep -q "^seq  *2$" || fail "best seq: $out"
echo "$out" | grep -q "agent  *a2 (Xeon)" || fail "best agent: $out"
# The trace's text form (its exact layout belongs to the schedule module).
echo "$out" | grep -q "split" || fail "trace split: $out"
echo "$out" | grep -q "sample_perfect_tile" || fail "trace sampling: $out"
out=$("$KILN" db best --db "$T/db" --key "$KEY" --json) || fail "best --json"
[ "$(echo "$out" | wc -l)" -eq 1 ] || fail "one best line (GPU has none): $out"
echo "$out" | grep -q '"type":"record".*"seq":2' || fail "best json: $out"

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
[ "$(wc -l <"$T/a.jsonl")" -eq 5 ] || fail "export has 5 lines"

printf '%s\n{"type":"record",,}\n' "$(head -1 "$T/in.jsonl")" >"$T/bad.jsonl"
"$KILN" db import --db "$T/db3" "$T/bad.jsonl" 2>"$T/err"
[ $? -eq 1 ] || fail "malformed import must exit 1"
grep -q "line 2" "$T/err" || fail "message names line 2: $(cat "$T/err")"
echo "ok"
