#!/usr/bin/env bash
# tools/deploy/systemd: systemd-analyze verify (offline, no running systemd
# needed) on kiln-serve.service and the kiln-agent@0 / kiln-agent@cpu
# instances, with the ExecStart paths pointed at this build (verify needs
# them to exist): no error and no warning at all. A unit with a misspelled
# directive is caught (the check can fail). The wrapper kiln-agent-instance
# maps 0 -> --device cuda:0, cpu -> --device cpu, names the agent
# <host>-<instance> and refuses any other instance.
. "$(dirname "$0")/lib.sh"
src=$(cd "$(dirname "$0")/../../tools/deploy/systemd" && pwd)
command -v systemd-analyze >/dev/null ||
    { echo "SKIP: no systemd-analyze (tools/setup.sh installs systemd)"; exit 77; }

u=$T/units
mkdir -p "$u"
inst=$T/kiln-agent-instance
cp "$src/kiln-agent-instance" "$inst"
sed -e "s#^ExecStart=/usr/local/bin/kiln #ExecStart=$KILN #" \
    "$src/kiln-serve.service" >"$u/kiln-serve.service"
sed -e "s#^ExecStart=/usr/local/libexec/kiln/kiln-agent-instance #ExecStart=$inst #" \
    "$src/kiln-agent@.service" >"$u/kiln-agent@.service"
grep -q "^ExecStart=$KILN serve --agents tcp://0.0.0.0:7070 --clients tcp://0.0.0.0:7071 --keys /etc/kiln/keys$" \
    "$u/kiln-serve.service" || fail "kiln-serve.service: not the kiln serve command line"
grep -q "^ExecStart=$inst %i$" "$u/kiln-agent@.service" ||
    fail "kiln-agent@.service: ExecStart is not the wrapper with the instance"

verify() { # UNIT...: verify must exit 0 and say nothing
    (cd "$T" && SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --man=no "$@") \
        >"$T/verify.out" 2>&1
    local rc=$?
    cat "$T/verify.out"
    [ "$rc" -eq 0 ] && [ ! -s "$T/verify.out" ]
}
verify "$u/kiln-serve.service" || fail "kiln-serve.service does not verify cleanly"
verify "$u/kiln-agent@0.service" "$u/kiln-agent@cpu.service" ||
    fail "kiln-agent@.service does not verify cleanly"

# The hardening the units promise is there.
for k in NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes \
    Restart=on-failure User=kiln; do
    grep -q "^$k" "$u/kiln-serve.service" || fail "kiln-serve.service lacks $k"
    grep -q "^$k" "$u/kiln-agent@.service" || fail "kiln-agent@.service lacks $k"
done
grep -q "^DeviceAllow=char-nvidia-frontend rw" "$u/kiln-agent@.service" ||
    fail "kiln-agent@.service does not allow the NVIDIA devices"
grep -q "^CacheDirectory=kiln-agent/%i" "$u/kiln-agent@.service" ||
    fail "kiln-agent@.service has no writable cache for the builds"

# The check catches a bad unit.
cp "$u/kiln-serve.service" "$u/bad.service"
sed -i 's/^NoNewPrivileges=yes/NoNewPrivilegs=yes/' "$u/bad.service"
verify "$u/bad.service" >/dev/null && fail "a misspelled directive verified cleanly"

# The wrapper, with echo for the agent.
run_inst() { env -i PATH="$PATH" KILN_HEAD=tcp://head:7070 KILN_AGENT=echo \
    CACHE_DIRECTORY=/var/cache/kiln-agent/x "$@"; }
out=$(run_inst "$inst" 0) || fail "wrapper: instance 0 failed"
h=$(hostname -s)
[ "$out" = "--connect tcp://head:7070 --keys /etc/kiln/keys --name $h-0 --coordinator-key /etc/kiln/keys/coordinator.pub --device cuda:0 --workdir /var/cache/kiln-agent/x" ] ||
    fail "wrapper, instance 0: $out"
out=$(run_inst KILN_KEYS=/k KILN_AGENT_ARGS="--build-slots 2" "$inst" cpu) ||
    fail "wrapper: instance cpu failed"
[ "$out" = "--connect tcp://head:7070 --keys /k --name $h-cpu --coordinator-key /k/coordinator.pub --device cpu --workdir /var/cache/kiln-agent/x --build-slots 2" ] ||
    fail "wrapper, instance cpu: $out"
run_inst "$inst" gpu0 >/dev/null 2>&1
[ $? -eq 64 ] || fail "wrapper accepts instance gpu0"
env -i PATH="$PATH" KILN_AGENT=echo "$inst" 0 >/dev/null 2>&1 &&
    fail "wrapper runs without KILN_HEAD"
echo PASS
