"""Checks the deployment files against Kubernetes' schema and against vidgate.

Run by CI (and by hand) with PyYAML and kubernetes-validate installed:

    python3 deploy/check.py

- Every manifest in deploy/kubernetes/ is valid for the Kubernetes version
  below (kubernetes-validate, strict: an unknown field is an error).
- Every VIDGATE_* and AWS_* variable the compose file and the manifests set
  is one the README or a page of docs/ documents, so a misspelt setting (which
  vidgate would silently ignore) fails here.
- Every `*_FILE` variable names a file that the same container mounts.
- The compose file has the worked example's shape (docs/deploy.md): two api
  nodes and one worker, all on the image that scripts/container-image.sh
  builds, every node with the same shared settings.
- Both hold vidgate's containers to the same hardening: a non-root user, a
  read-only root file system, no privilege escalation, every capability
  dropped; pods mount no service-account token, a NetworkPolicy admits
  connections, and no trusted proxy network is wider than a /16.
"""

import ipaddress

import pathlib
import re
import sys

import kubernetes_validate
import yaml

KUBERNETES_VERSION = "1.31.0"
ROOT = pathlib.Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"

failures = []


def fail(message):
    failures.append(message)


def documented_variables():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    text = "".join(page.read_text() for page in pages)
    return set(re.findall(r"\b((?:VIDGATE|AWS)_[A-Z0-9_]+)\b", text))


DOCUMENTED = documented_variables()


def check_variables(where, names):
    for name in names:
        if name.startswith(("VIDGATE_", "AWS_")) and name not in DOCUMENTED:
            fail(f"{where}: {name} is not a documented setting")


def check_kubernetes():
    manifests = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
    kustomization = yaml.safe_load((DEPLOY / "kubernetes" / "kustomization.yaml").read_text())
    for listed in kustomization["resources"]:
        if not (DEPLOY / "kubernetes" / listed).is_file():
            fail(f"kustomization.yaml lists {listed}, which does not exist")
    kinds = set()
    config_keys = set()
    for path in manifests:
        if path.name == "kustomization.yaml":
            continue
        for document in yaml.safe_load_all(path.read_text()):
            kinds.add(document["kind"])
            try:
                kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.ValidationError as error:
                fail(f"{path.name}: {document['kind']} {document['metadata']['name']}: {error.message}")
            if document["kind"] == "ConfigMap":
                config_keys |= set(document["data"])
                check_variables(path.name, document["data"])
                check_trusted_proxies(path.name, document["data"])
            pod = pod_spec(document)
            if pod is not None:
                check_pod(path.name, pod, config_keys_of(manifests))
    for kind in (
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "Job",
        "ConfigMap",
        "Secret",
        "NetworkPolicy",
    ):
        if kind not in kinds:
            fail(f"deploy/kubernetes has no {kind}")


def pod_spec(document):
    if document["kind"] == "Deployment" or document["kind"] == "Job":
        return document["spec"]["template"]["spec"]
    return None


def config_keys_of(manifests):
    keys = {}
    for path in manifests:
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("kind") == "ConfigMap":
                keys[document["metadata"]["name"]] = document["data"]
    return keys


def check_pod(where, pod, config_maps):
    if pod.get("securityContext", {}).get("runAsNonRoot") is not True:
        fail(f"{where}: the pod may run as root")
    if pod.get("automountServiceAccountToken") is not False:
        fail(f"{where}: the pod mounts a service-account token")
    for container in pod["containers"]:
        context = container.get("securityContext", {})
        if (
            context.get("readOnlyRootFilesystem") is not True
            or context.get("allowPrivilegeEscalation") is not False
            or context.get("capabilities", {}).get("drop") != ["ALL"]
        ):
            fail(f"{where}: {container['name']} lacks the hardening of the other containers")
        environment = {}
        for source in container.get("envFrom", []):
            environment.update(config_maps[source["configMapRef"]["name"]])
        for variable in container.get("env", []):
            environment[variable["name"]] = variable.get("value")
        check_variables(where, environment)
        mounts = [mount["mountPath"] for mount in container.get("volumeMounts", [])]
        check_secret_files(where, environment, mounts)


def check_trusted_proxies(where, environment):
    """A trusted proxy chooses the client address every per-client limit keys
    on: trust the ingress, not a whole private network."""
    for network in environment.get("VIDGATE_TRUSTED_PROXIES", "").split(","):
        if network.strip() and ipaddress.ip_network(network.strip()).prefixlen < 16:
            fail(f"{where}: the trusted proxy network {network.strip()} is wider than a /16")


def check_compose_hardening(name, service):
    user = str(service.get("user", ""))
    if not user or user.split(":")[0] in ("0", "root"):
        fail(f"compose {name}: names no user other than root")
    if service.get("read_only") is not True:
        fail(f"compose {name}: its root file system is writable")
    if "no-new-privileges:true" not in service.get("security_opt", []):
        fail(f"compose {name}: may gain privileges")
    if service.get("cap_drop") != ["ALL"]:
        fail(f"compose {name}: keeps capabilities")


def check_secret_files(where, environment, mounts):
    for name, value in environment.items():
        if name.endswith("_FILE") and not any(value.startswith(mount + "/") for mount in mounts):
            fail(f"{where}: {name}={value} is not under a mounted volume")


def check_compose():
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    roles = {}
    shared = None
    for name, service in services.items():
        if service.get("image") != "localhost/vidgate:dev":
            continue
        command = service["command"]
        check_compose_hardening(name, service)
        check_variables(f"compose {name}", service.get("environment", {}))
        check_trusted_proxies(f"compose {name}", service.get("environment", {}))
        mounts = ["/run/secrets"] if service.get("secrets") else []
        check_secret_files(f"compose {name}", service.get("environment", {}), mounts)
        for secret in service.get("secrets", []):
            path = DEPLOY / compose["secrets"][secret]["file"]
            if not path.is_file():
                fail(f"compose {name}: the secret {secret} has no file {path}")
        if command[0] != "serve":
            continue
        role = command[command.index("--role") + 1]
        roles[role] = roles.get(role, 0) + 1
        if shared is None:
            shared = service["environment"]
        elif service["environment"] != shared:
            fail(f"compose {name}: its shared settings differ from the other nodes'")
    if roles != {"api": 2, "worker": 1}:
        fail(f"compose: nodes by role are {roles}, not two api nodes and a worker")


check_kubernetes()
check_compose()
for failure in failures:
    print(failure, file=sys.stderr)
if failures:
    sys.exit(1)
print("deploy/: the Kubernetes manifests and the compose file check out")
