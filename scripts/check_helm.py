#!/usr/bin/env python3
"""Checks the Helm chart in deploy/helm/sluice: `helm lint --strict` and `helm template`
with several value sets, each rendering held against what the server will do with it
(each object decoded strictly into the Kubernetes API's types by scripts/kube-strict;
the ConfigMap's sluice.toml parsed, and the pod's ports, the Services, the probes and
the drain settings must agree with it), and deploy/kubernetes/sluice.yaml against the
chart's rendering with the default values, so the plain manifests cannot drift.

Run by scripts/check-helm.sh, which provides helm (HELM), kube-strict (KUBE_STRICT) and
this interpreter (Python 3.11 or newer, for tomllib, with PyYAML). `--update` rewrites
deploy/kubernetes/sluice.yaml.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import tomllib

import yaml

CHART = "deploy/helm/sluice"
PLAIN = "deploy/kubernetes/sluice.yaml"
RELEASE = "sluice"
# helm built by `go install` says Kubernetes 1.20 unless told (the chart needs 1.25).
KUBE_VERSION = "1.30.0"
PLAIN_HEADER = """\
# Sluice on Kubernetes without Helm: a Deployment of two nodes, their Services (TCP and
# UDP), the configuration (ConfigMap sluice.toml), a Redis for the cluster's directory
# (with a NetworkPolicy that admits only Sluice's pods) and a PodDisruptionBudget.
# Rendered from deploy/helm/sluice with its default values by `bash
# scripts/check-helm.sh --update`, which the test suite checks: edit the chart, not
# this file. Set the image (sluice:0.1.0 below) to your build of deploy/Dockerfile,
# then `kubectl apply -n NAMESPACE -f deploy/kubernetes/sluice.yaml`; docs/deployment.md
# ("Kubernetes") says what to change for your network.
"""


class CheckError(Exception):
    pass


def helm(*args, check=True):
    cmd = [os.environ["HELM"], *args]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if check and run.returncode != 0:
        raise CheckError(f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stdout}{run.stderr}")
    return run


def render(sets):
    args = ["template", RELEASE, CHART, "--kube-version", KUBE_VERSION]
    for s in sets:
        args += ["--set", s]
    return helm(*args).stdout


def strict(manifests, name):
    """The objects decode into the Kubernetes API's types with no unknown field."""
    run = subprocess.run([os.environ["KUBE_STRICT"]], input=manifests, capture_output=True, text=True)
    if run.returncode != 0:
        raise CheckError(f"{name}: not valid Kubernetes objects:\n{run.stdout}{run.stderr}")


def notes(sets):
    """NOTES.txt as `helm install` prints it: `helm template` leaves it out, so it is
    rendered from a copy of the chart where it is a template's value."""
    with tempfile.TemporaryDirectory() as tmp:
        chart = os.path.join(tmp, "sluice")
        shutil.copytree(CHART, chart)
        source = os.path.join(chart, "templates", "NOTES.txt")
        with open(source) as f:
            text = f.read()
        os.remove(source)
        with open(os.path.join(chart, "templates", "_notes.tpl"), "w") as f:
            f.write('{{- define "sluice.notes" -}}\n' + text + "{{- end -}}\n")
        with open(os.path.join(chart, "templates", "notes.yaml"), "w") as f:
            f.write('kind: Notes\ntext: {{ include "sluice.notes" . | toJson }}\n')
        args = ["template", RELEASE, chart, "--kube-version", KUBE_VERSION,
                "--show-only", "templates/notes.yaml"]
        for s in sets:
            args += ["--set", s]
        out = yaml.safe_load(helm(*args).stdout)["text"]
    expect("<no value>" not in out, f"NOTES.txt has a missing value:\n{out}")
    return out


def lint(sets):
    args = ["lint", "--strict", CHART, "--kube-version", KUBE_VERSION]
    for s in sets:
        args += ["--set", s]
    out = helm(*args).stdout
    if "0 chart(s) failed" not in out:
        raise CheckError(f"helm lint: {out}")


def expect(cond, what):
    if not cond:
        raise CheckError(what)


def port_of(addr):
    """The port of a listener address "0.0.0.0:1935", or None for "off"."""
    if addr == "off":
        return None
    host, _, port = addr.rpartition(":")
    expect(host and port.isdigit(), f"listener address {addr!r} is not HOST:PORT")
    return int(port)


def one(docs, kind, name):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    expect(len(found) == 1, f"{len(found)} {kind} named {name}, expected one")
    return found[0]


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check(docs, case):
    """Holds one rendering against its case's expectations; returns what it checked."""
    full = RELEASE
    deployment = one(docs, "Deployment", full)
    pod = deployment["spec"]["template"]
    pod_labels = pod["metadata"]["labels"]
    spec = pod["spec"]
    expect(selects(deployment["spec"]["selector"]["matchLabels"], pod_labels),
           "the Deployment's selector does not select its pods")
    [container] = spec["containers"]
    expect(container["image"] == "sluice:0.1.0", f"image {container['image']}")

    # The configuration, as the server will read it.
    config_volume = [v for v in spec["volumes"] if v["name"] == "config"]
    expect(config_volume and config_volume[0]["configMap"]["name"] == full,
           "the config volume is not the chart's ConfigMap")
    mount = [m for m in container["volumeMounts"] if m["name"] == "config"]
    expect(mount and mount[0]["mountPath"] == "/etc/sluice/sluice.toml"
           and mount[0].get("subPath") == "sluice.toml",
           "sluice.toml is not mounted where the image's entrypoint reads it")
    toml = tomllib.loads(one(docs, "ConfigMap", full)["data"]["sluice.toml"])

    # Listeners: the TOML's, the pod's ports and the Services' are the same.
    listeners = {
        "rtmp": ("TCP", port_of(toml["rtmp"]["listen"])),
        "rtsp": ("TCP", port_of(toml["rtsp"]["listen"])),
        "http": ("TCP", port_of(toml["http"]["listen"])),
        "https": ("TCP", port_of(toml["http"]["https"])),
        "webrtc": ("UDP", port_of(toml["webrtc"]["udp"])),
        "srt": ("UDP", port_of(toml["srt"]["listen"])),
    }
    listeners = {k: v for k, v in listeners.items() if v[1] is not None}
    expect(("https" in listeners) == case.get("tls", False),
           f"https listener {'missing' if case.get('tls') else 'on without a certificate'}")
    declared = {p["name"]: (p["protocol"], p["containerPort"]) for p in container["ports"]}
    expect(declared == listeners, f"pod ports {declared} != sluice.toml's listeners {listeners}")
    for proto, svc_name in (("TCP", full), ("UDP", f"{full}-udp")):
        svc = one(docs, "Service", svc_name)
        expect(selects(svc["spec"]["selector"], pod_labels), f"Service {svc_name} selects no pod")
        exposed = {}
        for p in svc["spec"]["ports"]:
            expect(p["protocol"] == proto, f"Service {svc_name} mixes protocols: {p}")
            target = declared.get(p["targetPort"])
            expect(target is not None, f"Service {svc_name} targets unknown port {p['targetPort']}")
            exposed[p["name"]] = (p["protocol"], p["port"])
            expect(target[1] == p["port"], f"Service {svc_name} port {p} != pod port {target}")
        wanted = {k: v for k, v in listeners.items() if v[0] == proto}
        expect(exposed == wanted, f"Service {svc_name} ports {exposed} != listeners {wanted}")

    # Probes: on the HTTP listener, /healthz for liveness and /readyz for readiness.
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        expect(get["path"] == path, f"{probe} path {get['path']}, expected {path}")
        expect(declared.get(get["port"]) == listeners["http"],
               f"{probe} port {get['port']} is not the HTTP listener {listeners['http']}")

    # Termination: SIGTERM drains, and Kubernetes waits longer than the drain.
    limits = toml["limits"]
    expect(limits["drain_on_sigterm"] is True, "limits.drain_on_sigterm is not true")
    sleep_s = 0
    pre_stop = container.get("lifecycle", {}).get("preStop")
    if pre_stop is not None:
        command = pre_stop["exec"]["command"]
        # The runtime image (debian:bookworm-slim) has coreutils' sleep and no curl.
        expect(command[0] == "/bin/sleep" and len(command) == 2, f"preStop {command}")
        sleep_s = int(command[1])
    grace_ms = spec["terminationGracePeriodSeconds"] * 1000
    needed_ms = sleep_s * 1000 + limits["drain_ms"] + limits["shutdown_grace_ms"]
    expect(grace_ms > needed_ms,
           f"terminationGracePeriodSeconds {grace_ms} ms does not cover preStop, drain and "
           f"shutdown grace ({needed_ms} ms)")
    pdb = one(docs, "PodDisruptionBudget", full)
    expect(selects(pdb["spec"]["selector"]["matchLabels"], pod_labels), "the PDB selects no pod")

    # Every $(VAR) in the args is an env variable of the container.
    args = container.get("args") or []
    expect(args[len(args) - len(case.get("extraArgs", [])):] == case.get("extraArgs", []),
           f"extraArgs are not the last args: {args}")
    env = {e["name"]: e for e in container.get("env", [])}
    for arg in args:
        if arg.startswith("$(") and arg.endswith(")"):
            expect(arg[2:-1] in env, f"args use {arg}, which is not in env")

    def flag(name):
        return [args[i + 1] for i, a in enumerate(args[:-1]) if a == name]

    def field_ref(var):
        return env.get(var, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")

    host_network = case.get("hostNetwork", False)
    # The cluster: its directory, and the address other nodes reach this one at.
    redis_objects = [d for d in docs if d["metadata"]["name"] == f"{full}-redis"]
    if case["cluster"]:
        expect(flag("--cluster-advertise") == ["$(POD_IP)"], f"--cluster-advertise: {args}")
        expect(field_ref("POD_IP") == "status.podIP", "POD_IP is not the pod's IP")
        directory = toml.get("cluster", {}).get("directory")
        if case["cluster"] == "redis":
            svc = one(docs, "Service", f"{full}-redis")
            redis = one(docs, "Deployment", f"{full}-redis")
            port = svc["spec"]["ports"][0]["port"]
            expect(directory == f"redis://{full}-redis:{port}",
                   f"cluster.directory {directory!r} is not the chart's Redis")
            expect(selects(svc["spec"]["selector"], redis["spec"]["template"]["metadata"]["labels"]),
                   "the Redis Service selects no Redis pod")
            expect(not selects(svc["spec"]["selector"], pod_labels), "the Redis Service selects Sluice")
            policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
            if host_network:
                expect(not policies, "a NetworkPolicy would keep host-network pods from Redis")
            else:
                [policy] = policies
                redis_labels = redis["spec"]["template"]["metadata"]["labels"]
                expect(selects(policy["spec"]["podSelector"]["matchLabels"], redis_labels),
                       "the NetworkPolicy is not Redis's")
                [rule] = policy["spec"]["ingress"]
                expect(selects(rule["from"][0]["podSelector"]["matchLabels"], pod_labels)
                       and rule["ports"] == [{"port": "redis", "protocol": "TCP"}],
                       f"the NetworkPolicy does not let Sluice reach Redis: {rule}")
        elif case["cluster"] == "secret":
            expect(directory is None, f"cluster.directory {directory!r} with a Secret")
            expect(flag("--cluster") == ["$(SLUICE_CLUSTER_DIRECTORY)"], f"--cluster: {args}")
            ref = env["SLUICE_CLUSTER_DIRECTORY"]["valueFrom"]["secretKeyRef"]
            expect(ref == {"name": "sluice-redis-url", "key": "url"}, f"directory secret {ref}")
        else:
            expect(directory == case["cluster"], f"cluster.directory {directory!r}")
        if case["cluster"] != "redis":
            expect(not redis_objects, "Redis objects rendered with redis.enabled=false")
    else:
        expect("cluster" not in toml, "a [cluster] table without a cluster")
        expect(not flag("--cluster-advertise") and not flag("--cluster"), f"cluster flags: {args}")
        expect(not redis_objects, "Redis objects rendered without a cluster")

    # Networking and WebRTC's candidate.
    per_node = host_network or case.get("hostPorts", False)
    expect(spec.get("hostNetwork", False) == host_network, "hostNetwork")
    expect(toml["rtsp"]["rtp_ports"] == ("30000-30199" if host_network else "off"),
           f"rtsp.rtp_ports {toml['rtsp']['rtp_ports']!r}")
    if host_network:
        expect(spec.get("dnsPolicy") == "ClusterFirstWithHostNet",
               "hostNetwork without dnsPolicy ClusterFirstWithHostNet: Service names do not resolve")
    for p in container["ports"]:
        if case.get("hostPorts") and not host_network and p["protocol"] == "UDP":
            expect(p.get("hostPort") == p["containerPort"], f"no hostPort on {p}")
        else:
            expect("hostPort" not in p, f"hostPort on {p}")
    candidates = flag("--webrtc-candidate")
    if case.get("candidates"):
        expect(candidates == case["candidates"], f"--webrtc-candidate {candidates}")
    elif per_node:
        expect(candidates == ["$(HOST_IP)"], f"--webrtc-candidate {candidates}, expected the node's")
        expect(field_ref("HOST_IP") == "status.hostIP", "HOST_IP is not the node's IP")
    else:
        expect(candidates == [], f"--webrtc-candidate {candidates}")
    rolling = deployment["spec"]["strategy"]["rollingUpdate"]
    if per_node:
        expect(rolling["maxSurge"] == 0, "a surge pod cannot take the node's ports")
        anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        expect(selects(anti[0]["labelSelector"]["matchLabels"], pod_labels), "anti-affinity")
    else:
        expect(rolling["maxUnavailable"] == 0, "a rollout takes a pod away before its successor is ready")

    # TLS, the API token and the ServiceMonitor.
    if case.get("tls"):
        mount = [m for m in container["volumeMounts"] if m["name"] == "tls"][0]["mountPath"]
        for key in ("tls_cert", "tls_key"):
            expect(os.path.dirname(toml["http"][key]) == mount, f"http.{key} is not in {mount}")
    if case.get("token"):
        expect(flag("--api-token") == ["$(SLUICE_API_TOKEN)"], f"--api-token: {args}")
        monitor = one(docs, "ServiceMonitor", full)
        selector = monitor["spec"]["selector"]["matchLabels"]
        services = [d for d in docs if d["kind"] == "Service" and selects(selector, d["metadata"]["labels"])]
        expect([s["metadata"]["name"] for s in services] == [full], "the ServiceMonitor's Services")
        endpoint = monitor["spec"]["endpoints"][0]
        expect(endpoint["port"] == "http" and endpoint["path"] == "/metrics", f"endpoint {endpoint}")
    else:
        expect(not flag("--api-token"), "--api-token without a Secret")

    sc = container["securityContext"]
    expect(sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"], "securityContext")
    expect(spec["securityContext"]["runAsUser"] == 10001, "the image's user is 10001")


CASES = [
    ("defaults", [], {"cluster": "redis", "notes": [
        "Cluster directory: redis://sluice-redis:6379.", "service/sluice-udp (ClusterIP)",
        "reachable inside the cluster only"]}),
    ("hostNetwork", ["hostNetwork=true"], {"cluster": "redis", "hostNetwork": True,
                                           "notes": ["each pod's node address"]}),
    ("hostPorts", ["hostPorts=true", "replicaCount=3"], {"cluster": "redis", "hostPorts": True}),
    ("external Redis, TLS, API token, ServiceMonitor",
     ["redis.enabled=false", "cluster.directory=rediss://redis.example:6380/2",
      "tls.secretName=sluice-tls", "api.tokenSecret.name=sluice-api", "serviceMonitor.enabled=true"],
     {"cluster": "rediss://redis.example:6380/2", "tls": True, "token": True,
      "notes": ["HTTPS 8443", "Authorization: Bearer $TOKEN"]}),
    ("directory URL from a Secret",
     ["redis.enabled=false", "cluster.directorySecret.name=sluice-redis-url",
      "cluster.directorySecret.key=url"],
     {"cluster": "secret"}),
    ("no Redis, no cluster, one explicit candidate",
     ["redis.enabled=false", "cluster.enabled=false", "replicaCount=1",
      "webrtc.candidates={203.0.113.5}"],
     {"cluster": None, "candidates": ["203.0.113.5"], "notes": ["WebRTC announces 203.0.113.5."]}),
    ("independent nodes", ["redis.enabled=false", "cluster.enabled=false"],
     {"cluster": None, "notes": ["WARNING: 2 replicas without a cluster"]}),
]

# Value sets the chart must refuse, with what its message says.
REFUSED = [
    (["redis.enabled=false"], "cluster.enabled needs a directory"),
    (["serviceMonitor.enabled=true"], "serviceMonitor.enabled needs api.tokenSecret"),
]


def main():
    update = sys.argv[1:] == ["--update"]
    expect(sys.argv[1:] in ([], ["--update"]), "usage: check_helm.py [--update]")
    for name, sets, case in CASES:
        lint(sets)
        manifests = render(sets)
        strict(manifests, name)
        docs = [d for d in yaml.safe_load_all(manifests) if d]
        check(docs, case)
        text = notes(sets)
        for line in case.get("notes", []):
            expect(line in text, f"{name}: NOTES.txt does not say {line!r}:\n{text}")
        print(f"ok: {name}: helm lint --strict, helm template ({len(docs)} objects), NOTES.txt checked")
    # Config values land in sluice.toml with their TOML types.
    docs = [d for d in yaml.safe_load_all(render([
        "config.tables.hls.always=true", "config.tables.edge.idle_ms=10000",
        "config.global.workers=4", "drain.drainMs=60000", "extraArgs={--log,debug}"])) if d]
    toml = tomllib.loads(one(docs, "ConfigMap", RELEASE)["data"]["sluice.toml"])
    expect(toml["hls"] == {"always": True} and toml["edge"] == {"idle_ms": 10000}
           and toml["workers"] == 4 and toml["limits"]["drain_ms"] == 60000,
           f"config values in sluice.toml: {toml}")
    check(docs, {"cluster": "redis", "extraArgs": ["--log", "debug"]})
    print("ok: config.global and config.tables in sluice.toml, integers as integers; extraArgs")
    for sets, message in REFUSED:
        run = helm("template", RELEASE, CHART, "--kube-version", KUBE_VERSION,
                   *[a for s in sets for a in ("--set", s)], check=False)
        expect(run.returncode != 0 and message in run.stderr,
               f"helm template --set {sets} should fail with {message!r}: {run.returncode} {run.stderr}")
        print(f"ok: refused {sets}")

    plain = PLAIN_HEADER + render([])
    if update:
        with open(PLAIN, "w") as f:
            f.write(plain)
        print(f"wrote {PLAIN}")
    else:
        with open(PLAIN) as f:
            committed = f.read()
        expect(committed == plain,
               f"{PLAIN} is not what the chart renders: run `bash scripts/check-helm.sh --update`")
        print(f"ok: {PLAIN} is the chart's rendering with its defaults")


if __name__ == "__main__":
    try:
        main()
    except CheckError as e:
        print(f"check-helm: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
