#!/usr/bin/env python3
"""Schema and consistency check of deploy/kubernetes/ (Debian has no Kubernetes schema validator:
kubeconform/kubeval are not packaged, and kubectl's dry run needs a cluster).

1. yamllint (Debian `yamllint`) with deploy/kubernetes/.yamllint;
2. every document against a schema of the Kubernetes API objects it uses (apps/v1 Deployment,
   v1 Service, policy/v1 PodDisruptionBudget, kustomize Kustomization), transcribed from the API
   reference for the fields these files use: required fields, types, enums, and NO unknown field
   anywhere (a typo such as `readinesProbe` or `terminationGracePeriod` fails, where the API server
   would silently drop it);
3. the recipe's contract (issue "Beyond one GPU", part 2): selectors match the pod labels, the
   Service targets the named container port, readiness on /health, liveness and startup on
   /health/live, preStop present and terminationGracePeriodSeconds >= preStop sleep + --drain-delay
   + --shutdown-timeout (+ 1 s), one GPU per pod, Prometheus annotations on the pod naming the
   container port and /metrics, `--host 0.0.0.0`, `--port` = containerPort, and every flag of the
   container's args is a real `clefserve serve` flag (read from `clefserve serve --help`).

Usage: tests/deploy/check_kubernetes.py [path/to/clefserve]   (default build/clefserve)
"""

import functools
import os
import re
import shutil
import subprocess
import sys

try:
    import yaml
except ImportError:
    print("check_kubernetes: FAIL: no yaml module for %s (Debian: python3-yaml, installed by "
          "scripts/setup.sh)" % sys.executable, file=sys.stderr)
    sys.exit(1)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KDIR = os.path.join(ROOT, "deploy", "kubernetes")

errors = []


def err(where, msg):
    errors.append("%s: %s" % (where, msg))


# ---------------------------------------------------------------- a small schema language

STR, INT, BOOL = "string", "integer", "boolean"
INT_OR_STR = "int-or-string"
QUANTITY = "quantity"  # int or string such as 64Gi, 500m


def obj(props, required=(), additional=None):
    return {"type": "object", "props": props, "required": list(required), "additional": additional}


def arr(items):
    return {"type": "array", "items": items}


def enum(*values):
    return {"type": STR, "enum": list(values)}


def check(value, schema, where):
    t = schema if isinstance(schema, str) else schema["type"]
    if t == "object":
        if not isinstance(value, dict):
            return err(where, "expected an object, got %r" % (value,))
        for k in schema["required"]:
            if k not in value:
                err(where, "missing required field '%s'" % k)
        for k, v in value.items():
            if k in schema["props"]:
                check(v, schema["props"][k], where + "." + k)
            elif schema["additional"] is not None:
                check(v, schema["additional"], where + "." + k)
            else:
                err(where, "unknown field '%s'" % k)
    elif t == "array":
        if not isinstance(value, list):
            return err(where, "expected a list")
        for i, v in enumerate(value):
            check(v, schema["items"], "%s[%d]" % (where, i))
    elif t == STR:
        if not isinstance(value, str):
            return err(where, "expected a string, got %r" % (value,))
        if "enum" in schema and value not in schema["enum"]:
            err(where, "%r not one of %s" % (value, schema["enum"]))
    elif t == INT:
        if not isinstance(value, int) or isinstance(value, bool):
            err(where, "expected an integer, got %r" % (value,))
    elif t == BOOL:
        if not isinstance(value, bool):
            err(where, "expected a boolean, got %r" % (value,))
    elif t == INT_OR_STR:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            err(where, "expected an integer or a string, got %r" % (value,))
    elif t == QUANTITY:
        if isinstance(value, bool) or not (isinstance(value, int) or (
                isinstance(value, str) and re.fullmatch(r"[0-9.]+([numkMGTPE]|[KMGTPE]i)?", value))):
            err(where, "not a Kubernetes quantity: %r" % (value,))
    else:
        raise AssertionError(t)


LABELS = obj({}, additional=STR)
META = obj({"name": STR, "namespace": STR, "labels": LABELS, "annotations": LABELS})
SELECTOR = obj({"matchLabels": LABELS, "matchExpressions": arr(obj(
    {"key": STR, "operator": enum("In", "NotIn", "Exists", "DoesNotExist"), "values": arr(STR)},
    ["key", "operator"]))})
HTTP_GET = obj({"path": STR, "port": INT_OR_STR, "host": STR, "scheme": enum("HTTP", "HTTPS"),
                "httpHeaders": arr(obj({"name": STR, "value": STR}, ["name", "value"]))},
               ["port"])
PROBE = obj({"httpGet": HTTP_GET, "initialDelaySeconds": INT, "periodSeconds": INT,
             "timeoutSeconds": INT, "failureThreshold": INT, "successThreshold": INT,
             "terminationGracePeriodSeconds": INT})
HANDLER = obj({"exec": obj({"command": arr(STR)}), "httpGet": HTTP_GET,
               "sleep": obj({"seconds": INT}, ["seconds"])})
CONTAINER = obj({
    "name": STR, "image": STR, "imagePullPolicy": enum("Always", "IfNotPresent", "Never"),
    "command": arr(STR), "args": arr(STR),
    "env": arr(obj({"name": STR, "value": STR}, ["name"])),
    "ports": arr(obj({"name": STR, "containerPort": INT, "protocol": enum("TCP", "UDP", "SCTP")},
                     ["containerPort"])),
    "resources": obj({"limits": obj({}, additional=QUANTITY),
                      "requests": obj({}, additional=QUANTITY)}),
    "startupProbe": PROBE, "readinessProbe": PROBE, "livenessProbe": PROBE,
    "lifecycle": obj({"preStop": HANDLER, "postStart": HANDLER}),
    "volumeMounts": arr(obj({"name": STR, "mountPath": STR, "readOnly": BOOL, "subPath": STR},
                            ["name", "mountPath"])),
}, ["name", "image"])
VOLUME = obj({"name": STR,
              "persistentVolumeClaim": obj({"claimName": STR, "readOnly": BOOL}, ["claimName"]),
              "emptyDir": obj({"medium": STR, "sizeLimit": QUANTITY}),
              "hostPath": obj({"path": STR, "type": STR}, ["path"])}, ["name"])
POD_SPEC = obj({"containers": arr(CONTAINER), "volumes": arr(VOLUME),
                "terminationGracePeriodSeconds": INT, "nodeSelector": LABELS,
                "tolerations": arr(obj({"key": STR, "operator": enum("Exists", "Equal"),
                                        "value": STR, "effect": STR})),
                "runtimeClassName": STR, "serviceAccountName": STR},
               ["containers"])
DEPLOYMENT = obj({
    "apiVersion": enum("apps/v1"), "kind": enum("Deployment"), "metadata": META,
    "spec": obj({
        "replicas": INT, "selector": SELECTOR, "minReadySeconds": INT,
        "strategy": obj({"type": enum("RollingUpdate", "Recreate"),
                         "rollingUpdate": obj({"maxSurge": INT_OR_STR,
                                               "maxUnavailable": INT_OR_STR})}),
        "template": obj({"metadata": META, "spec": POD_SPEC}, ["spec"]),
    }, ["selector", "template"]),
}, ["apiVersion", "kind", "metadata", "spec"])
SERVICE = obj({
    "apiVersion": enum("v1"), "kind": enum("Service"), "metadata": META,
    "spec": obj({"type": enum("ClusterIP", "NodePort", "LoadBalancer"), "selector": LABELS,
                 "sessionAffinity": enum("None", "ClientIP"),
                 "ports": arr(obj({"name": STR, "port": INT, "targetPort": INT_OR_STR,
                                   "protocol": enum("TCP", "UDP", "SCTP")}, ["port"]))},
                ["ports"]),
}, ["apiVersion", "kind", "metadata", "spec"])
PDB = obj({
    "apiVersion": enum("policy/v1"), "kind": enum("PodDisruptionBudget"), "metadata": META,
    "spec": obj({"selector": SELECTOR, "maxUnavailable": INT_OR_STR,
                 "minAvailable": INT_OR_STR}, ["selector"]),
}, ["apiVersion", "kind", "metadata", "spec"])
KUSTOMIZATION = obj({"apiVersion": enum("kustomize.config.k8s.io/v1beta1"),
                     "kind": enum("Kustomization"), "resources": arr(STR),
                     "namespace": STR}, ["resources"])
SCHEMAS = {"Deployment": DEPLOYMENT, "Service": SERVICE, "PodDisruptionBudget": PDB,
           "Kustomization": KUSTOMIZATION}


# ---------------------------------------------------------------- the recipe's contract

def flag(args, name):
    """The value after --name in args (None when absent)."""
    return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else None


@functools.lru_cache(maxsize=None)
def serve_flags(binary):
    if not binary or not os.path.exists(binary):
        return None
    out = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True).stdout
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", out))


def check_contract(docs, binary):
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d.get("kind"), []).append(d)
    for kind in ("Deployment", "Service", "PodDisruptionBudget"):
        if len(by_kind.get(kind, [])) != 1:
            err("deploy/kubernetes", "expected exactly one %s" % kind)
    if errors:
        return
    dep, svc, pdb = by_kind["Deployment"][0], by_kind["Service"][0], by_kind["PodDisruptionBudget"][0]
    tmpl = dep["spec"]["template"]
    pod_labels = tmpl["metadata"].get("labels", {})
    where = "Deployment"

    def selects(sel):
        return bool(sel) and all(pod_labels.get(k) == v for k, v in sel.items())
    if not selects(dep["spec"]["selector"].get("matchLabels")):
        err(where, "spec.selector.matchLabels does not match the pod template's labels")
    if not selects(svc["spec"].get("selector")):
        err("Service", "selector does not match the pod labels")
    if not selects(pdb["spec"]["selector"].get("matchLabels")):
        err("PodDisruptionBudget", "selector does not match the pod labels")

    containers = tmpl["spec"]["containers"]
    if len(containers) != 1:
        return err(where, "expected one container")
    c = containers[0]
    ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
    if "http" not in ports:
        return err(where, "the container has no port named http")
    port = ports["http"]
    for sp in svc["spec"]["ports"]:
        if sp.get("targetPort") not in ("http", port):
            err("Service", "targetPort %r is not the container's http port" % sp.get("targetPort"))

    def probe(name, path):
        p = c.get(name)
        if not p or "httpGet" not in p:
            return err(where, "%s: an httpGet probe is required" % name)
        if p["httpGet"].get("path") != path:
            err(where, "%s must probe %s, not %r" % (name, path, p["httpGet"].get("path")))
        if p["httpGet"]["port"] not in ("http", port):
            err(where, "%s probes port %r, not the http port" % (name, p["httpGet"]["port"]))
    probe("readinessProbe", "/health")
    probe("livenessProbe", "/health/live")
    probe("startupProbe", "/health/live")

    args = c.get("args", [])
    if not args or args[0] != "serve":
        err(where, "the container's args must start with 'serve'")
    if flag(args, "--host") != "0.0.0.0":
        err(where, "--host 0.0.0.0 is required (the default 127.0.0.1 is unreachable in a pod)")
    if flag(args, "--port") != str(port):
        err(where, "--port %r differs from containerPort %d" % (flag(args, "--port"), port))
    shutdown = float(flag(args, "--shutdown-timeout") or 30)
    drain = float(flag(args, "--drain-delay") or 0)
    pre = c.get("lifecycle", {}).get("preStop")
    if not pre:
        err(where, "a preStop hook is required (endpoints must drop the pod before SIGTERM)")
        pre_s = 0
    elif "sleep" in pre:
        pre_s = pre["sleep"]["seconds"]
    else:
        cmd = " ".join(pre.get("exec", {}).get("command", []))
        m = re.search(r"sleep\s+(\d+)", cmd)
        pre_s = int(m.group(1)) if m else 0
    grace = tmpl["spec"].get("terminationGracePeriodSeconds", 30)
    need = pre_s + drain + shutdown + 1
    if grace < need:
        err(where, "terminationGracePeriodSeconds %d < preStop %s + --drain-delay %s + "
            "--shutdown-timeout %s + 1" % (grace, pre_s, drain, shutdown))
    if pre_s + drain <= 0:
        err(where, "neither a preStop sleep nor --drain-delay: new connections would reach a "
            "closing port")

    limits = c.get("resources", {}).get("limits", {})
    if limits.get("nvidia.com/gpu") != 1:
        err(where, "resources.limits nvidia.com/gpu must be 1 (one GPU per pod)")
    if flag(args, "--device") != "cuda":
        err(where, "--device cuda expected for a GPU pod")

    ann = tmpl["metadata"].get("annotations", {})
    if ann.get("prometheus.io/scrape") != "true":
        err(where, "pod annotation prometheus.io/scrape: \"true\" missing")
    if ann.get("prometheus.io/port") != str(port):
        err(where, "prometheus.io/port %r is not the container port" % ann.get("prometheus.io/port"))
    if ann.get("prometheus.io/path") != "/metrics":
        err(where, "prometheus.io/path must be /metrics")

    known = serve_flags(binary)
    if known is None:
        err("clefserve", "no binary at %r to read `serve --help` from" % binary)
    else:
        for a in args:
            if a.startswith("--") and a not in known:
                err(where, "%s is not a `clefserve serve` flag" % a)


def load_docs(files):
    docs = []
    for name in files:
        with open(os.path.join(KDIR, name)) as f:
            for i, d in enumerate(yaml.safe_load_all(f)):
                if d is not None:
                    docs.append(("%s[%d] %s" % (name, i, d.get("kind")), d))
    return docs


def check_docs(docs, files, binary):
    for where, d in docs:
        schema = SCHEMAS.get(d.get("kind"))
        if schema is None:
            err(where, "kind %r is not one the recipe uses" % d.get("kind"))
            continue
        check(d, schema, where)
    kust = [d for _, d in docs if d.get("kind") == "Kustomization"]
    if kust and sorted(kust[0].get("resources", [])) != sorted(f for f in files
                                                               if f != "kustomization.yaml"):
        err("kustomization.yaml", "resources must list every other file: %s" % files)
    if not errors:
        check_contract([d for _, d in docs if d.get("kind") != "Kustomization"], binary)


def pod(docs):
    return next(d for _, d in docs if d["kind"] == "Deployment")["spec"]["template"]


def container(docs):
    return pod(docs)["spec"]["containers"][0]


# Each must be caught (the checker's own test, run first): a typo, a wrong type, a wrong probe path,
# a grace period shorter than the drain, two GPUs, a selector that selects nothing, a bad flag.
MUTATIONS = {
    "typo in a probe key": lambda ds: container(ds).__setitem__(
        "readinesProbe", container(ds).pop("readinessProbe")),
    "typo in the pod spec": lambda ds: pod(ds)["spec"].__setitem__(
        "terminationGracePeriod", pod(ds)["spec"].pop("terminationGracePeriodSeconds")),
    "string for an integer": lambda ds: pod(ds)["spec"].__setitem__(
        "terminationGracePeriodSeconds", "45"),
    "readiness on /health/live": lambda ds: container(ds)["readinessProbe"]["httpGet"].__setitem__(
        "path", "/health/live"),
    "liveness on /health": lambda ds: container(ds)["livenessProbe"]["httpGet"].__setitem__(
        "path", "/health"),
    "grace period too short": lambda ds: pod(ds)["spec"].__setitem__(
        "terminationGracePeriodSeconds", 30),
    "no preStop": lambda ds: container(ds).pop("lifecycle"),
    "two GPUs": lambda ds: container(ds)["resources"]["limits"].__setitem__("nvidia.com/gpu", 2),
    "service selects nothing": lambda ds: next(d for _, d in ds if d["kind"] == "Service")[
        "spec"]["selector"].__setitem__("app.kubernetes.io/name", "other"),
    "unknown serve flag": lambda ds: container(ds)["args"].extend(["--drain-dealy", "1"]),
    "prometheus port mismatch": lambda ds: pod(ds)["metadata"]["annotations"].__setitem__(
        "prometheus.io/port", "9000"),
    "unknown kind": lambda ds: ds.append(("x.yaml[0] ConfigMap", {"apiVersion": "v1",
                                                                 "kind": "ConfigMap"})),
}


def self_test(files, binary):
    import copy
    base = load_docs(files)
    missed = []
    for name, mutate in MUTATIONS.items():
        docs = copy.deepcopy(base)
        mutate(docs)
        del errors[:]
        check_docs(docs, files, binary)
        if not errors:
            missed.append(name)
    del errors[:]
    if missed:
        err("self-test", "the checker missed: %s" % ", ".join(missed))
    return len(MUTATIONS)


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "clefserve")
    files = sorted(f for f in os.listdir(KDIR) if f.endswith(".yaml"))
    caught = self_test(files, binary)
    if errors:
        for e in errors:
            print("check_kubernetes: " + e, file=sys.stderr)
        sys.exit(1)
    lint = shutil.which("yamllint")
    if not lint:
        err("yamllint", "not installed (scripts/setup.sh installs Debian's yamllint)")
    else:
        r = subprocess.run([lint, "-s", "-c", os.path.join(KDIR, ".yamllint"), KDIR],
                           capture_output=True, text=True)
        if r.returncode != 0:
            err("yamllint", r.stdout + r.stderr)
    docs = load_docs(files)
    check_docs(docs, files, binary)
    if errors:
        for e in errors:
            print("check_kubernetes: " + e, file=sys.stderr)
        sys.exit(1)
    print("check_kubernetes: %d files, %d objects: schema and recipe contract OK (the checker "
          "caught all %d planted faults first)" % (len(files), len(docs), caught))


if __name__ == "__main__":
    main()
