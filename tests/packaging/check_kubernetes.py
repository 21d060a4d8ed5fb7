#!/usr/bin/python3
"""check_kubernetes.py BIN SRCROOT BUILDDIR: the container file and the
Kubernetes manifests (packaging/container, packaging/kubernetes) are ones that
run the relay as documented.

Containerfile:
  - every path its runtime stage copies from the build stage, and its
    ENTRYPOINT, is in the meson install that build-root.sh makes (configured
    here with the same options; `meson introspect --installed`);
  - its runtime packages provide every shared library the binary needs
    (readelf NEEDED -> ldconfig -> dpkg -S);
  - its USER is numeric.
Manifests (every document of packaging/kubernetes/*.yaml):
  - probes: liveness on /livez at the relay's port; readiness on /readyz only
    where the relay is the pod's only container; a relay next to other
    containers (a sidecar, native or not) has no readiness or startup probe;
    a native sidecar has restartPolicy: Always;
  - the port is http.listen's default port, and OUTBOX_RELAY_HTTP_LISTEN
    listens on every address at it;
  - securityContext: runAsNonRoot, runAsUser/runAsGroup = the Containerfile's
    user, no privilege escalation, read-only root, every capability dropped;
  - terminationGracePeriodSeconds exceeds relay.shutdown_timeout_ms;
  - `outbox-relay check-config` accepts the pod's configuration: the mounted
    ConfigMap's file, every OUTBOX_RELAY_* variable of the container, and the
    service-link variables Kubernetes would inject for the Services of the
    same file;
  - with node and npm: each document against the Kubernetes OpenAPI schema
    (tests/packaging/kubernetes/validate.cjs, kubernetes-models from the npm
    registry, installed once into BUILDDIR by `npm ci`).

Exit 0 passed, 1 failed, 77 skipped (no python3-yaml).
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

try:
    import yaml
except ImportError:
    print("check_kubernetes: SKIP: no python3-yaml (apt-get install python3-yaml)", file=sys.stderr)
    sys.exit(77)

BIN, ROOT, BUILD = sys.argv[1:4]
failures = []


def fail(msg):
    failures.append(msg)
    print("check_kubernetes: FAIL: " + msg, file=sys.stderr)


def relay(*args, env=None):
    e = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    e.update(env or {})
    return subprocess.run([BIN, *args], capture_output=True, text=True, env=e)


# ---- what the relay says about itself ---------------------------------------
dump = relay("check-config", "-c", "/dev/null", "-X", "kafka.bootstrap.servers=localhost:9092")
if dump.returncode != 0:
    sys.exit("check_kubernetes: the relay rejects its defaults: " + dump.stderr)


def default(section, key):
    sec = None
    for line in dump.stdout.splitlines():
        m = re.match(r"^\[(\w+)\]$", line)
        if m:
            sec = m.group(1)
        m = re.match(r"^(\S+) = (.*)$", line)
        if m and sec == section and m.group(1) == key:
            return m.group(2)
    sys.exit(f"check_kubernetes: check-config prints no {section}.{key}")


RELAY_PORT = int(default("http", "listen").rsplit(":", 1)[1])
SHUTDOWN_S = int(default("relay", "shutdown_timeout_ms")) / 1000

# ---- the Containerfile -------------------------------------------------------
CF = os.path.join(ROOT, "packaging/container/Containerfile")
cf = open(CF).read()
# Continuation lines joined, comments dropped.
cf_lines = [l for l in re.sub(r"\\\n\s*", " ", cf).splitlines() if l.strip() and not l.lstrip().startswith("#")]
stages = []
for line in cf_lines:
    if line.startswith("FROM "):
        stages.append([])
    if stages:  # an ARG before the first FROM (the Debian release) is global
        stages[-1].append(line)
runtime = stages[-1]

user = [l.split()[1] for l in runtime if l.startswith("USER ")]
if len(user) != 1 or not re.fullmatch(r"\d+:\d+", user[0]):
    sys.exit("check_kubernetes: the Containerfile's runtime stage needs one numeric USER uid:gid")
UID, GID = (int(x) for x in user[0].split(":"))

with tempfile.TemporaryDirectory() as tmp:
    bdir = os.path.join(tmp, "build")
    r = subprocess.run([os.path.join(ROOT, "packaging/container/build-root.sh"), ROOT, "-", bdir],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("check_kubernetes: build-root.sh cannot configure: " + r.stderr[-2000:])
    r = subprocess.run(["meson", "introspect", "--installed", bdir], capture_output=True, text=True, check=True)
    installed = set(json.loads(r.stdout).values())


def is_installed(path):
    path = path.rstrip("/")
    return path in installed or any(p.startswith(path + "/") for p in installed)


for line in runtime:
    m = re.match(r"COPY\s+--from=build\s+(?:--\S+\s+)*(\S+)\s+(\S+)$", line)
    if not m:
        continue
    src, dst = m.groups()
    if not src.startswith("/staging/"):
        fail(f"Containerfile: {line}: copies from outside the meson install (/staging)")
        continue
    path = src[len("/staging"):]
    if path.rstrip("/") != dst.rstrip("/"):
        fail(f"Containerfile: {line}: {path} lands at another path ({dst})")
    if not is_installed(path):
        fail(f"Containerfile: {path} is not in the meson install (build-root.sh)")
entry = [l for l in runtime if l.startswith("ENTRYPOINT")]
entry_bin = json.loads(entry[0].split(None, 1)[1])[0] if entry else None
if entry_bin not in installed:
    fail(f"Containerfile: ENTRYPOINT {entry_bin} is not installed by meson")

# Runtime packages against the binary's libraries.
apt = " ".join(l for l in runtime if l.startswith("RUN") and "apt-get install" in l)
pkgs = set(re.findall(r"\b(lib[\w.+-]+|ca-certificates)\b", apt))
if shutil.which("dpkg") and shutil.which("readelf"):
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]",
                        subprocess.run(["readelf", "-d", BIN], capture_output=True, text=True).stdout)
    ldcache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    for lib in needed:
        if lib.startswith(("libc.so", "libm.so", "libpthread", "libdl", "ld-linux", "librt")):
            continue  # libc6: in every Debian image
        m = re.search(r"^\s+" + re.escape(lib) + r" \([^)]*x86-64[^)]*\) => (\S+)", ldcache, re.M) or \
            re.search(r"^\s+" + re.escape(lib) + r" .*=> (\S+)", ldcache, re.M)
        if not m:
            fail(f"cannot resolve {lib}")
            continue
        owner = subprocess.run(["dpkg", "-S", os.path.realpath(m.group(1))], capture_output=True, text=True)
        if owner.returncode != 0:
            owner = subprocess.run(["dpkg", "-S", m.group(1)], capture_output=True, text=True)
        pkg = owner.stdout.split(":")[0].strip()
        # A renamed library package (Debian 13's libuv1t64) provides the old
        # name, which apt installs it for: the Containerfile names one list
        # for both releases.
        provides = subprocess.run(["dpkg-query", "-W", "-f=${Provides}", pkg],
                                  capture_output=True, text=True).stdout if pkg else ""
        provided = {p.split()[0] for p in provides.split(",") if p.strip()}
        if pkg and pkg not in pkgs and not provided & pkgs:
            fail(f"Containerfile: the runtime stage does not install {pkg} ({lib}, needed by the binary)")
else:
    print("check_kubernetes: no dpkg/readelf: runtime libraries not checked", file=sys.stderr)

# ---- the manifests -----------------------------------------------------------


def service_links(svc):
    """The variables the kubelet injects for a Service (docker-links style)."""
    name = svc["metadata"]["name"].upper().replace("-", "_")
    ip = "10.96.0.10"
    ports = svc["spec"].get("ports", [])
    env = {}
    for i, p in enumerate(ports):
        proto = p.get("protocol", "TCP")
        url = f"{proto.lower()}://{ip}:{p['port']}"
        if i == 0:
            env[f"{name}_SERVICE_HOST"] = ip
            env[f"{name}_SERVICE_PORT"] = str(p["port"])
            env[f"{name}_PORT"] = url
        if p.get("name"):
            env[f"{name}_SERVICE_PORT_{p['name'].upper().replace('-', '_')}"] = str(p["port"])
        base = f"{name}_PORT_{p['port']}_{proto}"
        env.update({base: url, base + "_PROTO": proto.lower(), base + "_PORT": str(p["port"]),
                    base + "_ADDR": ip})
    return env


def port_number(container, port):
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    return None


def check_probe(where, c, kind, path):
    probe = c.get(kind)
    if not probe:
        fail(f"{where}: no {kind}")
        return
    get = probe.get("httpGet") or {}
    if get.get("path") != path:
        fail(f"{where}: {kind} asks {get.get('path')}, expected {path}")
    if port_number(c, get.get("port")) != RELAY_PORT:
        fail(f"{where}: {kind} port {get.get('port')} is not the relay's port {RELAY_PORT}")


files = sorted(glob.glob(os.path.join(ROOT, "packaging/kubernetes/*.yaml")))
if not files:
    fail("no packaging/kubernetes/*.yaml")
n_relays = {"standalone": 0, "native sidecar": 0}
for f in files:
    docs = [d for d in yaml.safe_load_all(open(f)) if d]
    rel = os.path.relpath(f, ROOT)
    configmaps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    links = {}
    for d in docs:
        if d["kind"] == "Service":
            links.update(service_links(d))
    for d in docs:
        if d["kind"] not in ("Deployment", "StatefulSet", "DaemonSet"):
            continue
        pod = d["spec"]["template"]["spec"]
        psc = pod.get("securityContext", {})
        containers = pod.get("containers", [])
        inits = pod.get("initContainers", [])
        is_relay = lambda c: "outbox-relay" in c.get("image", "")
        others = [c for c in containers if not is_relay(c)]
        for c, native in [(c, False) for c in containers] + [(c, True) for c in inits]:
            if not is_relay(c):
                continue
            where = f"{rel}: {d['kind']} {d['metadata']['name']}, container {c['name']}"
            check_probe(where, c, "livenessProbe", "/livez")
            alone = not native and not others
            if native:
                n_relays["native sidecar"] += 1
                if c.get("restartPolicy") != "Always":
                    fail(f"{where}: an init container relay needs restartPolicy: Always (a native sidecar)")
            elif alone:
                n_relays["standalone"] += 1
            if alone:
                check_probe(where, c, "readinessProbe", "/readyz")
            else:
                for kind in ("readinessProbe", "startupProbe"):
                    if c.get(kind):
                        fail(f"{where}: a relay beside the application must have no {kind}: "
                             "/readyz fails while Kafka is down and would make the application unready")
            sc = c.get("securityContext", {})
            eff = lambda k: sc.get(k, psc.get(k))
            if eff("runAsNonRoot") is not True:
                fail(f"{where}: runAsNonRoot is not true")
            if eff("runAsUser") != UID or eff("runAsGroup") != GID:
                fail(f"{where}: runs as {eff('runAsUser')}:{eff('runAsGroup')}, the image's user is {UID}:{GID}")
            if sc.get("allowPrivilegeEscalation") is not False:
                fail(f"{where}: allowPrivilegeEscalation is not false")
            if sc.get("readOnlyRootFilesystem") is not True:
                fail(f"{where}: readOnlyRootFilesystem is not true")
            if "ALL" not in sc.get("capabilities", {}).get("drop", []):
                fail(f"{where}: capabilities are not all dropped")
            grace = pod.get("terminationGracePeriodSeconds", 30)
            if grace <= SHUTDOWN_S:
                fail(f"{where}: terminationGracePeriodSeconds {grace} <= relay.shutdown_timeout_ms")

            # The pod's configuration, as the relay would load it.
            env = dict(links)
            for e in c.get("env", []):
                env[e["name"]] = str(e["value"]) if "value" in e else "from-a-secret"
            listen = env.get("OUTBOX_RELAY_HTTP_LISTEN", "")
            if not re.fullmatch(r"(0\.0\.0\.0|\[::\]):" + str(RELAY_PORT), listen):
                fail(f"{where}: OUTBOX_RELAY_HTTP_LISTEN={listen!r}: the probes need 0.0.0.0:{RELAY_PORT}")
            conf = "/dev/null"
            for m in c.get("volumeMounts", []):
                if m["mountPath"].rstrip("/") != "/etc/outbox-relay":
                    continue
                vol = next(v for v in pod.get("volumes", []) if v["name"] == m["name"])
                cm = configmaps.get(vol.get("configMap", {}).get("name"))
                if not cm or "outbox-relay.conf" not in cm.get("data", {}):
                    fail(f"{where}: /etc/outbox-relay is not a ConfigMap of this file with outbox-relay.conf")
                    continue
                tf = tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False)
                tf.write(cm["data"]["outbox-relay.conf"])
                tf.close()
                conf = tf.name
            r = relay("check-config", "-c", conf, env=env)
            if conf != "/dev/null":
                os.unlink(conf)
            if r.returncode != 0:
                fail(f"{where}: check-config rejects the pod's configuration (exit {r.returncode}): {r.stderr.strip()}")
if not n_relays["standalone"] or not n_relays["native sidecar"]:
    fail(f"the manifests must show the relay as its own Deployment and as a native sidecar: {n_relays}")

# ---- the Kubernetes schema ---------------------------------------------------
node, npm = shutil.which("node"), shutil.which("npm")
if node and npm:
    src = os.path.join(ROOT, "tests/packaging/kubernetes")
    dst = os.path.join(BUILD, "k8s-validate")
    lock = open(os.path.join(src, "package-lock.json")).read()
    stamp = os.path.join(dst, "node_modules", ".lock-copy")
    if not os.path.exists(stamp) or open(stamp).read() != lock:
        os.makedirs(dst, exist_ok=True)
        for n in ("package.json", "package-lock.json"):
            shutil.copy(os.path.join(src, n), dst)
        r = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=dst,
                           capture_output=True, text=True)
        if r.returncode != 0:
            fail("npm ci of the schema validator failed: " + r.stderr[-1000:])
        else:
            open(stamp, "w").write(lock)
    if os.path.exists(stamp):
        shutil.copy(os.path.join(src, "validate.cjs"), dst)
        r = subprocess.run([node, os.path.join(dst, "validate.cjs"), *files], capture_output=True, text=True)
        sys.stderr.write(r.stdout + r.stderr)
        if r.returncode != 0:
            fail("the manifests do not match the Kubernetes schema")
else:
    print("check_kubernetes: no node/npm: schema validation skipped (structure checked above)", file=sys.stderr)

if failures:
    sys.exit(1)
print(f"check_kubernetes: Containerfile and {len(files)} manifests pass (image user {UID}:{GID}, port {RELAY_PORT})")
