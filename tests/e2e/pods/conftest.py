"""The pods of tests/e2e/pods/: emulated Kubernetes pods (and AWS Batch and SkyPilot nodes) on this
machine, by tests/pods/podsim.py. Needs root and network namespaces; the tests that need them are
skipped, saying why, without.

  def test_x(pods, flowrun):
      keys = pods.add_manifest(MANIFEST, IMAGE_DIR, pod_env={"train-1": {"FLOWRUN_FAKE_GPUS": "2"}})
      pods.start()
      assert pods.wait("train-0", timeout=60) == 0
      assert pods.leftovers() == []

The start order's seed is $FLOWRUN_PODS_SEED when set, else drawn and printed (podsim's first line),
so that a failure can be replayed with the same order and delays. After each test the pods are
removed (podsim's down), and the test fails if anything was left.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "pods"))
import podsim  # noqa: E402
from flowrun_testlib.cluster import end_on_sigterm  # noqa: E402



@pytest.fixture(scope="session")
def pods_unavailable():
    """Why pods cannot run here ('' when they can)."""
    return podsim.unavailable()


@pytest.fixture
def pods(flowrun, pods_unavailable):
    """A podsim.Pods for the test (its pods added, not started), removed after it."""
    if pods_unavailable:
        pytest.skip(pods_unavailable)
    end_on_sigterm()
    if os.path.exists(podsim.DEFAULT_DIR):  # a run that stopped without its teardown
        podsim.down(podsim.DEFAULT_DIR)
    seed = os.environ.get("FLOWRUN_PODS_SEED")
    sim = podsim.Pods(flowrun, seed=int(seed) if seed else None, delay=0.2)
    yield sim
    left = sim.down()
    if left:
        pytest.fail(f"podsim's down left: {'; '.join(left)}", pytrace=False)
