"""Kubernetes objects against Kubernetes' own schemas, for tests/test_manifests.py.

  build/kubernetes-validate/bin/python tests/manifests/validate.py < REQUEST.json

Run by the Python of the venv that scripts/test's deps phase makes (kubernetes-validate and
what it needs, pinned by scripts/kubernetes-validate.txt: Debian's jsonschema is older than
it asks for), not by the tests' own. REQUEST is {"versions": ["1.29", ...], "objects":
[{"label": ..., "object": {...}}, ...]}; stdout gets one result a line, as JSON: {"label",
"what", "version", "validated", "error"}, where `validated` is the Kubernetes version whose
schema was used (kubernetes-validate falls back to an older one it has; the test wants the
one asked for) and `error` is null or "PATH: MESSAGE".

Each object is checked as `kubernetes-validate --strict` checks it (no field the schema does
not name). A JobSet (jobset.x-k8s.io) is a custom resource kubernetes-validate has no schema
for: it is held to jobset-v1alpha2.schema.json beside this file, whose metadata and
replicated jobs' templates are Kubernetes' own strict ObjectMeta and JobTemplateSpec of the
version, and each replicated job's template is also checked whole as a batch/v1 Job.
"""
import json
import os
import sys

import jsonschema
from kubernetes_validate import utils
from referencing import Registry, Resource

HERE = os.path.dirname(os.path.abspath(__file__))
JOBSET_SCHEMA = os.path.join(HERE, "jobset-v1alpha2.schema.json")


def bundled(version):
    """kubernetes-validate's schema directory of exactly `version` ("1.29"), or None."""
    for v in utils.all_versions():
        if utils.major_minor(v) == version:
            return f"kubernetes-json-schema/v{v}-local-strict"
    return None


def error_text(e):
    return f"{'.'.join(str(p) for p in e.path) or '(top)'}: {e.message}"


def check_object(obj, version):
    """(validated version, error) under kubernetes-validate --strict."""
    try:
        return utils.validate(obj, version, strict=True), None
    except utils.ValidationError as e:
        return e.version, error_text(e)
    except utils.SchemaNotFoundError as e:
        return None, e.message
    except utils.VersionNotSupportedError as e:
        return None, e.message


def check_jobset(obj, version, schema):
    """(validated version, error) against the JobSet schema, Kubernetes' definitions of `version`."""
    folder = bundled(version)
    if folder is None:
        return None, f"kubernetes-validate {utils.__version__} has no schemas for Kubernetes {version}"
    definitions = utils.schema_contents(f"{folder}/_definitions.json", version)
    registry = Resource.from_contents(definitions) @ Registry()
    errors = sorted(jsonschema.Draft202012Validator(schema, registry=registry).iter_errors(obj),
                    key=lambda e: list(map(str, e.path)))
    return version, error_text(errors[0]) if errors else None


def main():
    request = json.load(sys.stdin)
    with open(JOBSET_SCHEMA) as f:
        jobset_schema = json.load(f)
    for item in request["objects"]:
        obj = item["object"]
        for version in request["versions"]:
            checks = []
            if obj.get("kind") == "JobSet":
                checks.append(("JobSet (jobset-v1alpha2.schema.json)", check_jobset(obj, version, jobset_schema)))
                for n, rj in enumerate(obj.get("spec", {}).get("replicatedJobs", [])):
                    template = rj.get("template", {})
                    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": template.get("metadata", {}),
                           "spec": template.get("spec", {})}
                    checks.append((f"replicatedJobs[{n}].template as a batch/v1 Job", check_object(job, version)))
            else:
                checks.append((f"{obj.get('apiVersion')} {obj.get('kind')}", check_object(obj, version)))
            for what, (validated, error) in checks:
                print(json.dumps({"label": item["label"], "what": what, "version": version,
                                  "validated": validated, "error": error}))


if __name__ == "__main__":
    main()
