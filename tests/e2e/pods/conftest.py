"""The pods of tests/e2e/pods/: emulated Kubernetes pods (and AWS Batch and SkyPilot nodes) on this
machine, by tests/pods/podsim.py. Needs root and network namespaces; the tests that need them are
skipped, saying why, without.

  def test_x(pods, flowrun):
      keys = pods.add_manifest(MANIFEST, IMAGE_DIR, pod_env={"train-1": {"FLOWRUN_FAKE_GPUS": "2"}})
      pods.start()
      assert pods.wait("train-0", timeout=60) == 0
      assert pods.leftovers() == []

  def test_y(run_manifest):
      pods = run_manifest(MANIFEST, IMAGE_DIR)  # the same, added and started in one call

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
    holder = podsim.owner()
    if holder and holder != os.getpid():
        pytest.fail(f"the pods of another run (pid {holder}) are up in {podsim.DEFAULT_DIR}; let it end, or end it "
                    f"and run tests/pods/podsim.py down", pytrace=False)
    left = podsim.stale()
    if left:  # a run that stopped without its teardown
        print(f"podsim: removing what an earlier run left: {' '.join(left)}")
        podsim.down()
    seed = os.environ.get("FLOWRUN_PODS_SEED")
    sim = podsim.Pods(flowrun, seed=int(seed) if seed else None, delay=0.2)
    yield sim
    # pytest shows a test's output only when it fails: then each pod's log is there to read.
    for key in sim.keys:
        lines = sim.log(key).splitlines()
        print(f"--- pod {key} ({sim.ip(key)}): its log's last {min(len(lines), 40)} of {len(lines)} lines")
        print("\n".join(lines[-40:]))
    left = sim.down()
    if left:
        pytest.fail(f"podsim's down left: {'; '.join(left)}", pytrace=False)


@pytest.fixture
def run_manifest(pods):
    """run_manifest(text, image, env=None, pod_env=None, background=False): the manifest's pods added
    and started (background: starting in a thread while the test goes on); returns the Pods."""
    def run(text, image, env=None, pod_env=None, background=False):
        pods.add_manifest(text, image, env, pod_env)
        pods.start(background)
        return pods
    return run
