"""Runs a command as a child subreaper (prctl PR_SET_CHILD_SUBREAPER) and reports what it left behind.

    python3 reaper.py REPORT -- ARGV...

When ARGV's process exits, the kernel gives every process it left (running, or exited and not yet
reaped) to this one before this one learns of the exit, so the list below is complete, not a race:
whatever ARGV started and did not end and reap before it exited is here, its own helpers included.
REPORT gets a JSON list of [pid, name, state], one per process left; those still running are then
killed (SIGKILL). Exits with ARGV's exit code (128 + N for a signal), stdin, stdout and stderr passed
through.
"""
import ctypes
import json
import os
import signal
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36


def children():
    found = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            found += [int(c) for c in f.read().split()]
    return found


def described(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        return [pid, name, stat[stat.rindex(")") + 2]]
    except OSError:
        return [pid, "?", "?"]


def main():
    report, argv = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit(f"reaper.py: prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}")
    # The signals a test sends the command go to it, not to this process.
    proc = subprocess.Popen(argv)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: proc.send_signal(s))
    code = proc.wait()
    left = [described(pid) for pid in children()]
    with open(report + ".tmp", "w") as f:
        json.dump(left, f)
    os.replace(report + ".tmp", report)
    for pid, _name, _state in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    sys.exit(128 - code if code < 0 else code)


if __name__ == "__main__":
    main()
