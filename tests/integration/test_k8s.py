"""The k8s/ overlays on a real API server (etcd + kube-apiserver, no kubelet: nothing is
run, the objects are checked and stored): the operators' CRDs are applied and established
first, then each overlay, rendered by kustomize, with a strict server-side apply
(`--validate=strict`: the server refuses unknown fields). And the dispatcher's
ServiceAccount, with RBAC on, may do what its role says and nothing else.

Strimzi's CRDs are generated from its Maven artifacts (io.strimzi:api and crd-generator,
as its own build does; Java 21+). The Altinity ClickHouse operator's CRDs are served by no
registry reachable here: stand-ins written below accept any spec, so the field shapes of
ClickHouseInstallation and ClickHouseKeeperInstallation are NOT checked by this test."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpusched.local.kube import LocalKube, apiserver_buildable
from tests.k8s import DISPATCHER, apply_rbac, kustomize
from tests.k8s import kubectl as admin

pytestmark = [pytest.mark.kubernetes, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
STRIMZI = Path(__file__).parent / "strimzi" / "pom.xml"
STRIMZI_KINDS = {
    "io.strimzi.api.kafka.model.kafka.Kafka": "kafka.yaml",
    "io.strimzi.api.kafka.model.nodepool.KafkaNodePool": "kafkanodepool.yaml",
    "io.strimzi.api.kafka.model.topic.KafkaTopic": "kafkatopic.yaml",
}
ALTINITY = {  # group, kind, plural, short name: stand-ins (see the module's docstring)
    ("clickhouse.altinity.com", "ClickHouseInstallation", "clickhouseinstallations", "chi"),
    ("clickhouse-keeper.altinity.com", "ClickHouseKeeperInstallation",
     "clickhousekeeperinstallations", "chk"),
}  # fmt: skip


def _java21() -> str:
    for java in sorted(Path("/usr/lib/jvm").glob("*/bin/java"), reverse=True):
        version = subprocess.run([str(java), "-version"], capture_output=True, text=True).stderr
        major = version.split('"')[1].split(".")[0] if '"' in version else "0"
        if major.isdigit() and int(major) >= 21:
            return str(java)
    pytest.fail("Strimzi's CRD generator needs Java 21 or newer (none in /usr/lib/jvm)")


def _strimzi_crds() -> Path:
    """Strimzi's CRDs, generated once into ~/.cache/gpusched from its Maven artifacts."""
    digest = hashlib.sha256(STRIMZI.read_bytes()).hexdigest()[:12]
    out = Path.home() / ".cache" / "gpusched" / f"strimzi-crds-{digest}"
    if (out / ".complete").exists():
        return out
    jars = out / "jars"
    subprocess.run(
        ["mvn", "-q", "-B", "-f", str(STRIMZI), "dependency:copy-dependencies",
         f"-DoutputDirectory={jars}"],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    subprocess.run(
        [_java21(), "-cp", f"{jars}/*", "io.strimzi.crdgenerator.CrdGenerator",
         "--crd-api-version", "v1", "--api-versions", "v1", "--storage-version", "v1",
         "--yaml", *(f"{cls}={out / name}" for cls, name in STRIMZI_KINDS.items())],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (out / ".complete").touch()
    return out


def _stand_in(group: str, kind: str, plural: str, short: str) -> dict[str, object]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {
                "kind": kind,
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": [short],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKube]:
    """A fresh local API server with RBAC on and a token for the dispatcher's account."""
    if not apiserver_buildable():
        pytest.skip("kube-apiserver is built from the k8s.io/kubernetes module: needs Go")
    assert shutil.which("kubectl"), "kubectl is needed (it renders the overlays too)"
    local = LocalKube(tmp_path_factory.mktemp("kube"), rbac=True, service_accounts=(DISPATCHER,))
    local.up()
    try:
        yield local
    finally:
        local.down()


def _run(command: list[str], stdin: str | None = None) -> str:
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{' '.join(command[:3])}...:\n{done.stdout}{done.stderr}"
    return done.stdout


def test_overlays_apply_strictly(kube: LocalKube, tmp_path: Path) -> None:
    kubectl = admin(kube)
    crds = [*sorted(_strimzi_crds().glob("*.yaml"))]
    stand_ins = tmp_path / "altinity-stand-in-crds.yaml"
    stand_ins.write_text(yaml.safe_dump_all([_stand_in(*a) for a in sorted(ALTINITY)]))
    for crd in [*crds, stand_ins]:
        _run([*kubectl, "apply", "--server-side", "-f", str(crd)])
    _run([*kubectl, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"])

    for overlay in ("dev", "distributed"):
        # a Job's pod template is immutable and the overlays name different Secrets
        _run([*kubectl, "-n", "gpusched", "delete", "job", "gpusched-init",
              "--ignore-not-found"])  # fmt: skip
        rendered = kustomize(REPO / "k8s" / "overlays" / overlay)
        applied = _run(
            [*kubectl, "apply", "--server-side", "--validate=strict",
             "--field-manager=gpusched-test", "-f", "-"],
            stdin=rendered,
        )  # fmt: skip
        kinds = {d["kind"] for d in yaml.safe_load_all(rendered) if d}
        assert applied.count("serverside-applied") == sum(
            1 for d in yaml.safe_load_all(rendered) if d
        )
        assert {"Deployment", "StatefulSet", "DaemonSet", "Job", "ClusterRole"} <= kinds
    topics = _run([*kubectl, "-n", "gpusched", "get", "kafkatopics", "-o", "name"]).split()
    assert "kafkatopic.kafka.strimzi.io/gpusched.jobs.v1.dlq" in topics

    # a field Strimzi's schema does not have is refused (the check is not a formality)
    bad = kustomize(REPO / "k8s" / "overlays" / "distributed")
    bad = bad.replace("  entityOperator:", "  entityOperatr:", 1)
    refused = subprocess.run(
        [*kubectl, "apply", "--server-side", "--validate=strict", "-f", "-"],
        input=bad, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "entityOperatr" in refused.stderr


def test_dispatcher_account_may_do_only_its_role(kube: LocalKube) -> None:
    apply_rbac(kube)
    dispatcher = admin(kube, kube.account_token(DISPATCHER))
    listed = _run([*dispatcher, "auth", "can-i", "--list"]).splitlines()[1:]
    granted: dict[str, set[str]] = {}
    for line in listed:
        resource, verbs = line.split()[0], line.rsplit("[", 1)[-1].rstrip("]").split()
        if not resource.startswith("["):  # non-resource URLs (discovery) are everyone's
            granted[resource] = set(verbs)
    everyone = {r for r in granted if r.startswith("selfsubject")}  # system:basic-user
    assert {r: v for r, v in granted.items() if r not in everyone} == {
        "pods": {"get", "list", "create", "patch", "delete"},
        "pods/binding": {"create"},
        "pods/eviction": {"create"},
        "nodes": {"get", "list", "patch"},
    }
    for verb, what in (("create", "nodes"), ("get", "secrets"), ("create", "deployments"),
                       ("update", "pods"), ("watch", "pods")):  # fmt: skip
        refused = subprocess.run([*dispatcher, "auth", "can-i", verb, what, "-A"],
                                 capture_output=True, text=True, timeout=60)  # fmt: skip
        assert refused.stdout.strip() == "no", (verb, what)
