"""Shared helpers of the end-to-end tests (tests/**/test_*.py, run under pytest; tests/conftest.py
holds the fixtures): the environment a test starts flowrun in, output normalisation, and the
small rank programs the suites share."""
import contextlib
import os
import re
import shutil
import subprocess
import tempfile

# Variables that change what flowrun decides; tests start without them.
_INFLUENTIAL = re.compile(r"^(CUDA_|SLURM_|FLOWRUN_|OMP_NUM_THREADS$|TORCH_NCCL_|NCCL_|NO_COLOR$|PYTHONUNBUFFERED$)")
RUN_ID = re.compile(r"\b[a-z0-9][a-z0-9_-]*-\d{8}-\d{6}-[0-9a-f]{6}\b")
# How flowrun words a peer that died (kill -9): the kernel closes its socket
# with a FIN, or with a RST when a heartbeat had arrived that it had not yet
# read; both are true, and which one comes is timing. The agent says the
# first; the head, of a lost node, the second.
_RESET = "the connection failed: Connection reset by peer"
CONNECTION_CLOSED = rf"(?:the connection closed|{_RESET})"
AGENT_CLOSED = rf"its agent's connection closed(?: \({_RESET}\))?"


def clean_env(**extra):
    """The environment without variables that steer flowrun, the host named host-a."""
    env = {k: v for k, v in os.environ.items() if not _INFLUENTIAL.match(k)}
    env["FLOWRUN_HOSTNAME"] = "host-a"
    env.update(extra)
    return env


@contextlib.contextmanager
def temp_dir(prefix, parent=None, mode=None, keep=False):
    """A new directory (mkdtemp: PREFIX and a random tail, in `parent`, default TMPDIR or /tmp),
    removed after the block unless `keep`. For what pytest's own (the `scratch` fixture, 0700
    under /tmp/pytest-of-USER) does not fit: a path another user must reach, `mode` 0o1777 as
    /tmp is; or one in a given place, as /tmp, which each node of a cluster has its own of."""
    path = tempfile.mkdtemp(prefix=prefix, dir=parent)
    try:
        if mode is not None:
            os.chmod(path, mode)
        yield path
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)


def normalise(text, root=None):
    """Makes output comparable across machines: run id and repo path (the
    host name is fixed by FLOWRUN_HOSTNAME in clean_env)."""
    text = RUN_ID.sub("<run-id>", text)
    if root:
        text = text.replace(os.path.abspath(root), "<root>")
    return text


def run(argv, cwd, env=None, input_text=None, timeout=60):
    return subprocess.run(argv, cwd=cwd, env=env if env is not None else clean_env(), input=input_text,
                           capture_output=True, text=True, timeout=timeout)


def diff(expected, actual):
    import difflib
    return "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True), "expected", "actual"))


# --- floods: what a rank writes, what arrived, how much memory it took ----------

# A rank that prints argv[1] lines ("line I"), argv[2] seconds apart, and after each print waits
# until the line is in its own stdout.log, so a line held in Python's buffer fails the rank (or
# stalls the step) whatever the machine's speed. With argv[3] "result" it also leaves a finished
# result as the fault suite counts one (result.txt, then "rank R wrote its result").
# Run as `python3 gaps.py LINES GAP [result]`.
GAPS_RANK = """import os, sys, time
rank, lines, gap = os.environ["RANK"], int(sys.argv[1]), float(sys.argv[2])
result = sys.argv[3:] == ["result"]
log = os.path.join(os.environ["FLOWRUN_RUN_DIR"], os.environ["FLOWRUN_STEP"], "rank" + rank, "stdout.log")
if result:
    with open(os.path.join(os.environ["FLOWRUN_OUTPUT_DIR"], "result.txt"), "w") as f:
        f.write(f"rank {rank} result\\n")
for i in range(lines):
    line = f"line {i}"
    print(line)
    deadline = time.monotonic() + 60
    while line + "\\n" not in open(log).read():
        if time.monotonic() > deadline:
            sys.exit(f"rank {rank}: {line!r} is not in {log} 60 s after print()")
        time.sleep(0.01)
    time.sleep(gap)
if result:
    print(f"rank {rank} wrote its result")
"""

# A rank that writes argv[1] bytes of 100-byte lines to stdout, in 64 KiB blocks that each begin with
# their number (so a block lost, repeated or out of order changes the checksum), as fast as Python can,
# then "BYTES CRC32" of what it wrote to sent.$RANK in the workdir. Run as `python3 -c FLOOD_RANK BYTES`.
FLOOD_RANK = """import os, sys, zlib
total, rank = int(sys.argv[1]), os.environ["RANK"]
body = (f"rank {rank} ".encode() + b"x" * 90 + b"\\n") * 650
sent = crc = i = 0
while sent < total:
    block = (f"r{rank} block {i:09d}\\n".encode() + body)[:total - sent]
    view = memoryview(block)
    while view:
        view = view[os.write(1, view):]
    crc, sent, i = zlib.crc32(block, crc), sent + len(block), i + 1
with open(f"sent.{rank}", "w") as f:
    f.write(f"{sent} {crc:08x}")
"""

# A rank that writes argv[1] random bytes to $FLOWRUN_OUTPUT_DIR/blob, then "BYTES CRC32" to sent.$RANK.
# With argv[2], only that rank does; the others do nothing.
BLOB_RANK = """import os, sys, zlib
if len(sys.argv) < 3 or os.environ["RANK"] == sys.argv[2]:
    total, crc = int(sys.argv[1]), 0
    with open(os.path.join(os.environ["FLOWRUN_OUTPUT_DIR"], "blob"), "wb") as f:
        for at in range(0, total, 1 << 20):
            block = os.urandom(min(1 << 20, total - at))
            f.write(block)
            crc = zlib.crc32(block, crc)
    with open(f"sent.{os.environ['RANK']}", "w") as f:
        f.write(f"{total} {crc:08x}")
"""


def file_crc(path):
    """(size, CRC-32 as 8 hex digits) of a file."""
    import zlib
    crc = size = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            crc, size = zlib.crc32(block, crc), size + len(block)
    return size, f"{crc:08x}"


def peak_rss_kib(pid):
    """VmHWM (the kernel's own record of a process's peak resident set) of a live process in KiB,
    from /proc/PID/status; None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


class PeakMemory:
    """The largest VmHWM of each process ({name: Popen}) read every 5 ms in a thread, until
    stop(); in MiB."""

    def __init__(self, procs):
        import threading
        self.procs, self.peak, self._done = procs, {name: 0.0 for name in procs}, False
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self):
        import time
        while not self._done:
            for name, p in self.procs.items():
                kib = peak_rss_kib(p.pid)
                if kib is not None:
                    self.peak[name] = max(self.peak[name], kib / 1024)
            time.sleep(0.005)

    def stop(self):
        self._done = True
        self._thread.join()
        return self.peak

    def describe(self):
        return ", ".join(f"{name} {mib:.1f} MiB" for name, mib in self.peak.items())
