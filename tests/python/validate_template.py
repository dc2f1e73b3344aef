"""The agent-sandbox template checked offline: its SandboxTemplate fields against the upstream
CRD, the Pod it makes and the NetworkPolicy the controller makes from it against Kubernetes'
own schemas (kubernetes-validate, PyPI, pinned by scripts/test.sh, strict: an unknown or
misspelt field is an error, as the API server would prune it silently).

Usage: validate_template.py TEMPLATE.yaml FSD.toml
Then that the template and fsd's config agree: the ports the router, the probes and the pod's own
containers use are the ones fsd listens on, and only the router and named clients are let in.
Prints one line per passed check; raises on the first failure.
"""

import copy
import sys
import tomllib

import kubernetes_validate
import yaml
from kubernetes_validate.utils import latest_version

# The SandboxTemplate schema of kubernetes-sigs/agent-sandbox at 2fd412d5,
# k8s/crds/extensions.agents.x-k8s.io_sandboxtemplates.yaml, version v1beta1 (served, storage):
# the fields above the Pod spec, which the CRD embeds as the Kubernetes PodSpec. Required
# fields are marked True.
CRD_API_VERSION = "extensions.agents.x-k8s.io/v1beta1"
CRD_SPEC = {
    "podTemplate": True,
    "networkPolicy": False,
    "networkPolicyManagement": False,
    "envVarsInjectionPolicy": False,
    "volumeClaimTemplates": False,
    "volumeClaimTemplatesPolicy": False,
    "service": False,
}
CRD_ENUMS = {
    "networkPolicyManagement": {"Managed", "Unmanaged"},
    "envVarsInjectionPolicy": {"Allowed", "Overrides", "Disallowed"},
    "volumeClaimTemplatesPolicy": {"Disallowed", "Allowed", "Overrides"},
}
CRD_POD_TEMPLATE = {"metadata": False, "spec": True}
CRD_POD_METADATA = {"labels", "annotations"}
# The controller's restricted NetworkPolicySpec: podSelector and policyTypes are its own.
CRD_NETWORK_POLICY = {"ingress", "egress"}
# The label the controller selects a template's pods by (its value: a hash of the name).
TEMPLATE_REF_LABEL = "agents.x-k8s.io/sandbox-template-ref-hash"


def passed(name):
    print(f"ok {name}", flush=True)


def fields(what, value, allowed, required=()):
    assert isinstance(value, dict), f"{what} is not a mapping: {value!r}"
    unknown = sorted(set(value) - set(allowed))
    assert not unknown, f"{what} has fields the CRD does not: {unknown}"
    missing = sorted(set(required) - set(value))
    assert not missing, f"{what} lacks required fields {missing}"


def must_fail(what, resource, version):
    try:
        kubernetes_validate.validate(resource, version, strict=True)
    except kubernetes_validate.ValidationError:
        return
    raise AssertionError(f"the validator accepted {what}: it checks nothing")


template = yaml.safe_load(open(sys.argv[1]))
version = latest_version()

assert template["apiVersion"] == CRD_API_VERSION, template["apiVersion"]
assert template["kind"] == "SandboxTemplate", template["kind"]
fields("the template", template, {"apiVersion", "kind", "metadata", "spec"}, {"spec"})
spec = template["spec"]
fields("spec", spec, CRD_SPEC, [k for k, required in CRD_SPEC.items() if required])
for key, values in CRD_ENUMS.items():
    if key in spec:
        assert spec[key] in values, f"spec.{key} = {spec[key]!r}, the CRD allows {sorted(values)}"
pod_template = spec["podTemplate"]
fields("spec.podTemplate", pod_template, CRD_POD_TEMPLATE, ["spec"])
metadata = pod_template.get("metadata", {})
fields("spec.podTemplate.metadata", metadata, CRD_POD_METADATA)
for key in CRD_POD_METADATA & set(metadata):
    assert all(isinstance(v, str) for v in metadata[key].values()), f"{key} values must be strings"
fields("spec.networkPolicy", spec.get("networkPolicy", {}), CRD_NETWORK_POLICY)
assert spec.get("networkPolicyManagement", "Managed") == "Managed", "the template's policy must be applied"
passed(f"SandboxTemplate fields against the {CRD_API_VERSION} CRD")

pod = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "fsd-agent-sb-1", "labels": dict(metadata.get("labels", {}))},
    "spec": pod_template["spec"],
}
kubernetes_validate.validate(pod, version, strict=True)
passed(f"Pod spec against Kubernetes {version}")

policy = {
    "apiVersion": "networking.k8s.io/v1",
    "kind": "NetworkPolicy",
    "metadata": {"name": "fsd-agent-network-policy"},
    "spec": {
        "podSelector": {"matchLabels": {TEMPLATE_REF_LABEL: "0123456789"}},
        "policyTypes": ["Ingress", "Egress"],
        **spec["networkPolicy"],
    },
}
kubernetes_validate.validate(policy, version, strict=True)
passed(f"NetworkPolicy against Kubernetes {version}")

# The validator is not vacuous: a misspelt field, a wrong type are refused.
broken = copy.deepcopy(pod)
broken["spec"]["containers"][0]["readinesProbe"] = broken["spec"]["containers"][0]["readinessProbe"]
must_fail("a misspelt readinessProbe", broken, version)
broken = copy.deepcopy(policy)
broken["spec"]["ingress"][0]["ports"][0]["port"] = [8888]
must_fail("a list as a port", broken, version)
passed("the validator refuses a misspelt field and a wrong type")

# The template and fsd.toml agree.
config = tomllib.load(open(sys.argv[2], "rb"))
ports = {spec.split(":", 1)[0]: int(spec.rsplit(":", 1)[1]) for spec in config["listen"]}
assert set(ports) == {"http+plain", "http+pod", "http"}, config["listen"]
fsd, agent = pod["spec"]["containers"]
assert (fsd["name"], agent["name"]) == ("fsd", "agent")
declared = {p["name"]: p["containerPort"] for p in fsd["ports"]}
assert declared == {"rest": ports["http+plain"], "router": ports["http+pod"], "rest-tls": ports["http"]}, declared
for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
    got = fsd[probe]["httpGet"]
    assert (got["path"], got["port"], got.get("scheme", "HTTP")) == ("/v1/health", ports["http+pod"], "HTTP"), probe
rest_addr = {e["name"]: e["value"] for e in agent["env"]}["SANDBOXD_REST_ADDR"]
assert rest_addr == f"127.0.0.1:{ports['http+plain']}", rest_addr
assert agent["command"][:2] != ["fsd-tools", "mcp"], "fsd-tools mcp as a container's main process reads a closed stdin"
passed("ports, probes and SANDBOXD_REST_ADDR are fsd.toml's")

router_rule, clients_rule = spec["networkPolicy"]["ingress"]
assert router_rule["from"] == [{
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "agent-sandbox-system"}},
    "podSelector": {"matchLabels": {"app": "sandbox-router"}},
}], router_rule
assert router_rule["ports"] == [{"protocol": "TCP", "port": ports["http+pod"]}], router_rule
assert all("podSelector" in peer and "ipBlock" not in peer for peer in clients_rule["from"]), clients_rule
assert {p["port"] for p in clients_rule["ports"]} == {ports["http+pod"], ports["http"]}, clients_rule
passed("only the router's pods and labelled clients reach the pod network listener")
