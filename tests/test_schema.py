"""specs/schema/flowrun.schema.json accepts every example spec: each YAML file
under specs/ and each ```yaml block of README.md and docs/*.md (the specs that
tests/test_doc_examples.py passes through `flowrun validate`). Editors check
specs against the schema, so it must not drift from what flowrun accepts.

  python3 -m pytest tests/test_schema.py [-k NAME]
"""
import json
import os
import re

import pytest
import yaml

from test_doc_examples import FENCE, documents

pytestmark = pytest.mark.schema

SCHEMA = os.path.join("specs", "schema", "flowrun.schema.json")


@pytest.fixture(scope="module")
def validator(repo_root):
    try:
        import jsonschema
    except ImportError:
        pytest.fail("python3-jsonschema is missing: apt-get install python3-jsonschema (or scripts/test --phase deps)")
    with open(os.path.join(repo_root, SCHEMA)) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def example_specs(root):
    """(label, YAML text) of every example spec."""
    found = []
    for folder, dirs, files in os.walk(os.path.join(root, "specs")):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "data")
        for name in sorted(files):
            if name.endswith((".yaml", ".yml")):
                path = os.path.join(folder, name)
                found.append((os.path.relpath(path, root), open(path).read()))
    for path in documents(root, cluster=False):
        text = open(path).read()
        for m in FENCE.finditer(text):
            words = m.group(1).split()
            if words[:1] == ["yaml"] and "bad" not in words[1:]:
                line = text[:m.start()].count("\n") + 1
                found.append((f"{os.path.relpath(path, root)}:{line}", m.group(2)))
    return found


def test_every_example_spec_matches_the_schema(repo_root, validator, check):
    specs = example_specs(repo_root)
    check(len(specs) > 20, "found the example specs", f"only {len(specs)}")
    for label, text in specs:
        spec = yaml.safe_load(text)
        errors = sorted(validator.iter_errors(spec), key=lambda e: list(e.absolute_path))
        check(not errors, f"{label} matches {SCHEMA}",
              "\n".join(f"  {'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in errors))


def test_the_schema_rejects_what_flowrun_rejects(validator, check):
    # The schema is not a stub that takes anything: a misspelt key, a step
    # without run and a bad gpus value each fail it, as they fail `flowrun validate`.
    for label, spec in [
        ("an unknown top-level key", {"steps": [{"name": "a", "run": "true"}], "stepz": []}),
        ("a step without run", {"steps": [{"name": "a"}]}),
        ("gpus: some", {"steps": [{"name": "a", "run": "true", "parallel": {"gpus": "some"}}]}),
        ("forensics: on", {"steps": [{"name": "a", "run": "true", "parallel": {}, "forensics": "on"}]}),
        ("forensics without parallel", {"steps": [{"name": "a", "run": "true", "forensics": "nccl"}]}),
        ("forensics with a timeout and no stacks",
         {"steps": [{"name": "a", "run": "true", "parallel": {}, "forensics": {"stacks": False, "timeout": 5}}]}),
        ("restart.causes: node_lost", {"steps": [{"name": "a", "run": "true", "parallel": {
            "max_restarts": 2, "restart": {"causes": ["node_lost"]}}}]}),
    ]:
        check(any(True for _ in validator.iter_errors(spec)), f"the schema rejects {label}")


def test_the_schema_has_every_key_flowrun_reads(repo_root, validator, check):
    # lib/spec/spec_keys.h lists the keys the spec accepts at each level (kStepKeys, ...):
    # a key added there and not here would make editors flag valid specs.
    source = open(os.path.join(repo_root, "lib", "spec", "spec_keys.h")).read()
    lists = {name: re.findall(r'"([a-z_]+)"', body)
             for name, body in re.findall(r"constexpr std::string_view k(\w+)Keys\[\] = \{(.*?)\};", source, re.S)}
    schema, defs = validator.schema, validator.schema["$defs"]
    levels = {"Top": schema, "Step": defs["step"], "Parallel": defs["parallel"],
              "Logs": defs["step"]["properties"]["logs"], "Cluster": defs["cluster"],
              "Forensics": defs["step"]["properties"]["forensics"]["oneOf"][1],
              "Restart": defs["parallel"]["properties"]["restart"]}
    check(sorted(lists) == sorted(levels), "lib/spec/spec_keys.h's key lists are the levels this test knows",
          f"spec_keys.h: {sorted(lists)}")
    for name, level in levels.items():
        keys, known = set(lists.get(name, [])), set(level["properties"])
        check(keys == known, f"the schema's {name.lower()} keys are those lib/spec/spec_keys.h lists",
              f"only in spec_keys.h: {sorted(keys - known)}; only in the schema: {sorted(known - keys)}")
