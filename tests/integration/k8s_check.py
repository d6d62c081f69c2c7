#!/usr/bin/env python3
"""k8s_check.py FILE...: offline checks of kiln's Kubernetes manifests.

No kubectl or schema validator is in Debian 12, so this parses every
document (PyYAML, Debian's python3-yaml, with duplicate keys refused) and
checks what a cluster would reject or what would silently not work:
apiVersion and kind known and matching, metadata.name a DNS-1123 name,
unknown keys in the objects and containers used here (typos), workload
selectors matching their pod template's labels, every container with a
name, an image and resources (requests; limits memory), ports and volume
mounts resolving, Secret items and claims naming objects in the files,
Service selectors selecting a pod template and targetPorts naming its
container ports, GPU workloads asking for nvidia.com/gpu in limits with a
nodeSelector. Prints one line per problem; exit 1 when there is any.
"""
import re
import sys

import yaml


class Loader(yaml.SafeLoader):
    pass


def _no_dups(loader, node, deep=False):
    keys = set()
    for k, _ in node.value:
        key = loader.construct_object(k, deep=deep)
        if key in keys:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", k.start_mark)
        keys.add(key)
    return loader.construct_mapping(node, deep)


Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_dups)

API = {"Namespace": "v1", "Secret": "v1", "Service": "v1", "ConfigMap": "v1",
       "PersistentVolumeClaim": "v1", "Deployment": "apps/v1",
       "DaemonSet": "apps/v1", "StatefulSet": "apps/v1"}
TOP = {"apiVersion", "kind", "metadata", "spec", "data", "stringData", "type"}
META = {"name", "namespace", "labels", "annotations"}
WORKLOAD_SPEC = {"replicas", "selector", "template", "strategy",
                 "updateStrategy", "minReadySeconds", "revisionHistoryLimit"}
POD_SPEC = {"containers", "initContainers", "volumes", "nodeSelector",
            "tolerations", "affinity", "securityContext",
            "serviceAccountName", "terminationGracePeriodSeconds",
            "priorityClassName", "hostNetwork", "hostUsers", "dnsPolicy",
            "restartPolicy", "runtimeClassName"}
CONTAINER = {"name", "image", "imagePullPolicy", "command", "args", "env",
             "envFrom", "ports", "resources", "volumeMounts", "workingDir",
             "securityContext", "livenessProbe", "readinessProbe",
             "startupProbe", "lifecycle"}
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
QTY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|M|G|T)?$")

problems = []


def bad(where, what):
    problems.append(f"{where}: {what}")


def unknown(where, obj, allowed):
    if not isinstance(obj, dict):
        bad(where, "not a mapping")
        return
    for k in obj:
        if k not in allowed:
            bad(where, f"unknown key {k!r}")


def check_container(where, c, volumes):
    unknown(where, c, CONTAINER)
    if not c.get("name") or not DNS1123.match(str(c.get("name"))):
        bad(where, "no valid name")
    if not isinstance(c.get("image"), str) or not c["image"]:
        bad(where, "no image")
    res = c.get("resources") or {}
    unknown(where + ".resources", res, {"requests", "limits"})
    if not res.get("requests"):
        bad(where, "no resources.requests")
    if "memory" not in (res.get("limits") or {}):
        bad(where, "no memory limit")
    for part in ("requests", "limits"):
        for k, v in (res.get(part) or {}).items():
            if not QTY.match(str(v)):
                bad(where, f"resources.{part}.{k}: bad quantity {v!r}")
    ports = set()
    for p in c.get("ports") or []:
        unknown(where + ".ports", p, {"name", "containerPort", "protocol"})
        if not isinstance(p.get("containerPort"), int):
            bad(where, f"port {p} without an integer containerPort")
        if p.get("name"):
            ports.add(p["name"])
            ports.add(p["containerPort"])
    for m in c.get("volumeMounts") or []:
        unknown(where + ".volumeMounts", m,
                {"name", "mountPath", "readOnly", "subPath"})
        if m.get("name") not in volumes:
            bad(where, f"mounts volume {m.get('name')!r}, not in the pod")
        if not str(m.get("mountPath", "")).startswith("/"):
            bad(where, f"mount {m.get('name')}: mountPath not absolute")
    for e in c.get("env") or []:
        if not e.get("name") or ("value" in e) == ("valueFrom" in e):
            bad(where, f"env {e}: a name and one of value/valueFrom")
    return ports, res


def main(files):
    docs = []
    for f in files:
        try:
            with open(f) as fh:
                for i, d in enumerate(yaml.load_all(fh, Loader=Loader)):
                    if d is not None:
                        docs.append((f"{f}#{i}", d))
        except yaml.YAMLError as e:
            bad(f, f"YAML: {e}")
    by_kind = {}
    for where, d in docs:
        if not isinstance(d, dict):
            bad(where, "not a mapping")
            continue
        kind = d.get("kind")
        if kind not in API:
            bad(where, f"unknown kind {kind!r}")
            continue
        if d.get("apiVersion") != API[kind]:
            bad(where, f"{kind} needs apiVersion {API[kind]}, not {d.get('apiVersion')!r}")
        unknown(where, d, TOP)
        meta = d.get("metadata") or {}
        unknown(where + ".metadata", meta, META)
        name = meta.get("name")
        if not name or not DNS1123.match(str(name)):
            bad(where, f"metadata.name {name!r} is not a DNS-1123 name")
        where = f"{where} {kind}/{name}"
        by_kind.setdefault(kind, {})[name] = (where, d)
    secrets = by_kind.get("Secret", {})
    claims = by_kind.get("PersistentVolumeClaim", {})
    templates = []  # (labels, container port names, where)
    for kind in ("Deployment", "DaemonSet", "StatefulSet"):
        for name, (where, d) in by_kind.get(kind, {}).items():
            spec = d.get("spec") or {}
            unknown(where + ".spec", spec, WORKLOAD_SPEC)
            match = ((spec.get("selector") or {}).get("matchLabels")) or {}
            tmpl = spec.get("template") or {}
            labels = (tmpl.get("metadata") or {}).get("labels") or {}
            if not match:
                bad(where, "no spec.selector.matchLabels")
            for k, v in match.items():
                if labels.get(k) != v:
                    bad(where, f"selector {k}={v} does not match the template's labels")
            pod = tmpl.get("spec") or {}
            unknown(where + ".template.spec", pod, POD_SPEC)
            volumes = {}
            for v in pod.get("volumes") or []:
                volumes[v.get("name")] = v
                if "secret" in v:
                    s = v["secret"].get("secretName")
                    if s not in secrets:
                        bad(where, f"volume {v['name']}: no Secret {s!r} in the files")
                    else:
                        sd = secrets[s][1]
                        have = set((sd.get("data") or {})) | set((sd.get("stringData") or {}))
                        for it in v["secret"].get("items") or []:
                            if it.get("key") not in have:
                                bad(where, f"volume {v['name']}: Secret {s} has no key {it.get('key')!r}")
                if "persistentVolumeClaim" in v:
                    c = v["persistentVolumeClaim"].get("claimName")
                    if c not in claims:
                        bad(where, f"volume {v['name']}: no claim {c!r} in the files")
            containers = pod.get("containers") or []
            if not containers:
                bad(where, "no containers")
            ports = set()
            gpu = False
            for i, c in enumerate(containers):
                p, res = check_container(f"{where} container {i}", c, volumes)
                ports |= p
                if "nvidia.com/gpu" in (res.get("requests") or {}) and \
                        "nvidia.com/gpu" not in (res.get("limits") or {}):
                    bad(where, "nvidia.com/gpu requested but not in limits (extended resources need limits)")
                gpu |= "nvidia.com/gpu" in (res.get("limits") or {})
            if gpu and not pod.get("nodeSelector"):
                bad(where, "a GPU workload without a nodeSelector")
            if "gpu" in name and not gpu:
                bad(where, "named gpu but asks for no nvidia.com/gpu")
            if kind == "Deployment" and spec.get("replicas", 1) < 1:
                bad(where, "replicas < 1")
            templates.append((labels, ports, where))
    for name, (where, d) in by_kind.get("Service", {}).items():
        spec = d.get("spec") or {}
        sel = spec.get("selector") or {}
        hits = [t for t in templates if sel and all(t[0].get(k) == v for k, v in sel.items())]
        if not hits:
            bad(where, f"selector {sel} selects no pod template in the files")
        for p in spec.get("ports") or []:
            if not isinstance(p.get("port"), int):
                bad(where, f"port {p} without an integer port")
            tp = p.get("targetPort", p.get("port"))
            if hits and not any(tp in t[1] for t in hits):
                bad(where, f"targetPort {tp!r} is no container port of the pods it selects")
    for name, (where, d) in secrets.items():
        if not d.get("data") and not d.get("stringData"):
            bad(where, "no data")
    for p in problems:
        print(p)
    print(f"k8s_check: {len(docs)} documents, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
