"""``--emit k8s`` PyTorchJobs against the Kubeflow PyTorchJob v1 CRD's openAPIV3Schema and the
typed Kubernetes client (pod templates deserialised as ``V1PodTemplateSpec``; resource
quantities are strings in the Kubernetes API)."""

from __future__ import annotations

import pytest
import realclients as rc
import yaml
from corpus import SCENARIOS, bundles

from optimizer.launch.flags import job_shape
from optimizer.launch.scripts import k8s_manifest

CRD = rc.SHARED_CLIENTS / "kubeflow.org_pytorchjobs.yaml"


@pytest.fixture(scope="module")
def schema():
    jsonschema = rc.require("jsonschema")
    if not CRD.is_file():
        rc.missing(f"no PyTorchJob CRD at {CRD}")
    crd = yaml.safe_load(CRD.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return jsonschema, version["schema"]["openAPIV3Schema"]


@pytest.fixture(scope="module")
def typed():
    client = rc.require("kubernetes.client")
    utils = rc.require("kubernetes.utils")
    return client, utils


@pytest.mark.parametrize("name", [s.name for s in SCENARIOS[::4]])
def test_pytorchjob_matches_the_crd_and_the_typed_client(schema, typed, name):
    jsonschema, crd_schema = schema
    client, utils = typed
    _, result = dict((s.name, (s, r)) for s, r in bundles())[name]
    p, c = result.problem, result.candidate.config
    manifest = k8s_manifest(p.model, p.cluster, p.training, c)
    manifest = yaml.safe_load(yaml.safe_dump(manifest))  # as kubectl would read the file
    jsonschema.validate(manifest, crd_schema)
    nodes, per_node = job_shape(p.cluster, c)
    api = client.ApiClient()
    total = 0
    for spec in manifest["spec"]["pytorchReplicaSpecs"].values():
        template = api._ApiClient__deserialize(spec["template"], "V1PodTemplateSpec")
        (container,) = template.spec.containers
        limit = spec["template"]["spec"]["containers"][0]["resources"]["limits"][
            "nvidia.com/gpu"]
        assert isinstance(limit, str), "Kubernetes quantities are strings"
        assert utils.parse_quantity(container.resources.limits["nvidia.com/gpu"]) == per_node
        total += spec["replicas"]
    assert total == nodes
