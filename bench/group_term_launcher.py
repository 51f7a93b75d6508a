#!/usr/bin/env python3
"""A baseline launcher for case (k) of scripts/bench, not part of flowrun: the teardown that simple
launchers do, and that flowrun did before its drain-aware teardown: on a rank's failure, SIGTERM to every
rank's whole process group at once, one deadline shared by all of them, then SIGKILL.

  group_term_launcher.py [--nproc N] [--deadline SECONDS] -- COMMAND [ARGS...]

It starts N ranks of COMMAND on this host, each in a process group of its own (a new session), with
torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...), and waits for their
exits through pidfds. The first rank that fails (a non-zero exit or a signal) makes it send SIGTERM to
the process group of every rank still running, all at once (killpg: the rank's main process and what it
started, DataLoader workers included), and wait for them until one deadline, SECONDS (default 30) after
the failure; it sends SIGKILL to the groups of those still running then. Once every rank has ended it
sends SIGKILL to what is left in their groups. It exits with the first failure's exit code (128 + N for a
signal N), or 0 when every rank succeeded.
"""
import argparse
import os
import select
import signal
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank, nproc, port):
    env = dict(os.environ)
    env.update({
        "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc),
        "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(nproc),
        "ROLE_NAME": "default", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
        "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_RUN_ID": "none",
        "PYTHONUNBUFFERED": "1",
    })
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def signal_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def code_of(status):
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument("--deadline", type=float, default=30.0)
    p.add_argument("command", nargs="+")
    args = p.parse_args()
    port = free_port()
    ranks = {}  # pidfd -> (rank, Popen)
    for rank in range(args.nproc):
        proc = subprocess.Popen(args.command, env=rank_env(rank, args.nproc, port), start_new_session=True)
        ranks[os.pidfd_open(proc.pid)] = (rank, proc)
    groups = [proc.pid for _, proc in ranks.values()]  # each rank leads its own process group
    poller = select.poll()
    for fd in ranks:
        poller.register(fd, select.POLLIN)
    failure, deadline, killed = None, None, False
    while ranks:
        timeout = None if deadline is None else max(0, deadline - time.monotonic()) * 1000
        ready = poller.poll(timeout)
        for fd, _ in ready:
            rank, proc = ranks.pop(fd)
            poller.unregister(fd)
            os.close(fd)
            _, status = os.waitpid(proc.pid, 0)
            proc.returncode = code_of(status)
            if proc.returncode != 0 and failure is None:
                failure = proc.returncode
                print(f"group_term_launcher: rank {rank} failed (exit {failure}); SIGTERM to every rank's "
                      f"process group, SIGKILL in {args.deadline:g} s", file=sys.stderr, flush=True)
                deadline = time.monotonic() + args.deadline
                for _, other in ranks.values():
                    signal_group(other.pid, signal.SIGTERM)
        if ranks and not ready and deadline is not None and time.monotonic() >= deadline and not killed:
            print(f"group_term_launcher: SIGKILL to {len(ranks)} rank(s) still running at the deadline",
                  file=sys.stderr, flush=True)
            for _, proc in ranks.values():
                signal_group(proc.pid, signal.SIGKILL)
            killed, deadline = True, None
    for pgid in groups:
        signal_group(pgid, signal.SIGKILL)  # what the ranks left behind
    return failure or 0


if __name__ == "__main__":
    sys.exit(main())
