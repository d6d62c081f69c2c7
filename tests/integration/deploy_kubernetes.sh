#!/usr/bin/env bash
# tools/deploy/kubernetes: every manifest passes yamllint (strict, the
# folder's .yamllint) and k8s_check.py (parsed with python3-yaml: kinds and
# apiVersions, names, unknown keys, selectors matching labels, images,
# resources, volumes, Secret items, Service ports, GPU limits and
# nodeSelector; no kubectl or schema validator is in Debian 12). Each
# check catches a broken copy. The Containerfile builds on Debian 12
# through tools/setup.sh. Needs yamllint and python3-yaml (tools/setup.sh
# installs both).
. "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
k8s=$here/../../tools/deploy/kubernetes
cf=$here/../../tools/deploy/Containerfile
py=""
for p in python3 /usr/bin/python3; do
    "$p" -c 'import yaml' 2>/dev/null && { py=$p; break; }
done
[ -n "$py" ] || fail "no python3 with yaml (tools/setup.sh installs python3-yaml)"
command -v yamllint >/dev/null || fail "no yamllint (tools/setup.sh installs it)"

lint() { yamllint -s -c "$k8s/.yamllint" "$@"; }
check() { "$py" "$here/k8s_check.py" "$@"; }
files=("$k8s"/*.yaml)
[ ${#files[@]} -ge 4 ] || fail "expected the namespace, secret, head and agents manifests"
lint "${files[@]}" || fail "yamllint"
check "${files[@]}" | tee "$T/check.txt" || fail "k8s_check"
grep -q "^k8s_check: 7 documents, 0 problem" "$T/check.txt" || fail "not the 7 documents"
for k in "kind: Deployment" "kind: Service" "kind: Secret" "name: kiln-agent-cpu" \
    "name: kiln-agent-gpu" "nvidia.com/gpu: 1" \
    'args: [serve, --agents, "tcp://0.0.0.0:7070", --clients, "tcp://0.0.0.0:7071"'; do
    cat "${files[@]}" | grep -qF -- "$k" || fail "no '$k' in the manifests"
done

# Broken copies: each must be caught.
broken() { # WHAT SED-EXPR FILE CHECKER: the checker must fail on the copy
    local what=$1 expr=$2 f=$3 chk=$4 d=$T/broken
    rm -rf "$d" && mkdir -p "$d" && cp "${files[@]}" "$d/"
    sed -i "$expr" "$d/$f"
    cmp -s "$d/$f" "$k8s/$f" && fail "$what: the edit changed nothing"
    if $chk "$d"/*.yaml >"$T/broken.txt" 2>&1; then
        cat "$T/broken.txt"
        fail "$chk accepts $what"
    fi
    echo "caught ($chk): $what: $(grep -v '^k8s_check:' "$T/broken.txt" | head -1)"
}
broken "a selector matching no label" \
    '0,/      app.kubernetes.io\/name: kiln-head$/s//      app.kubernetes.io\/name: kiln-hed/' head.yaml check
broken "a container without an image" '/image: kiln:latest/d' agents.yaml check
broken "a GPU agent without a GPU limit" '/nvidia.com\/gpu: 1/d' agents.yaml check
broken "a misspelled key" 's/nodeSelector:/nodeSelektor:/' agents.yaml check
broken "a Secret item that does not exist" 's/key: agent-gpu.key/key: agent-gpu.secret/' agents.yaml check
broken "a Service port naming no container port" 's/targetPort: clients/targetPort: client/' head.yaml check
broken "a duplicate key" 's/^  replicas: 1$/  replicas: 1\n  replicas: 2/' head.yaml check
broken "a bad indentation" 's/^  selector:$/   selector:/' head.yaml lint

grep -q "^FROM docker.io/library/debian:12$" "$cf" || fail "the Containerfile is not on Debian 12"
grep -q "bash tools/setup.sh" "$cf" || fail "the Containerfile does not use tools/setup.sh"
grep -q "meson install" "$cf" || fail "the Containerfile does not install kiln"
echo PASS
