#!/usr/bin/env python3
"""A worker for the launcher's end-to-end tests: one subcommand per behaviour
the tests need from a rank or a plain step. Standard library only.

  worker.py env                      dump the environment to $FLOWRUN_OUTPUT_DIR/env.json
  worker.py argv ARGS...             print ARGS as a JSON list
  worker.py sleep S [--ignore-term] [--ready DIR]
  worker.py fail --rank R --code C [--ready DIR] [--stamp FILE] [--ignore-term]
                                     rank R fails with a traceback once every rank is
                                     ready; the others sleep
  worker.py restart --need N --code C
                                     exit C while TORCHELASTIC_RESTART_COUNT < N
  worker.py store                    rank 0 listens on MASTER_PORT (SO_REUSEADDR, as torch's
                                     TCPStore does), rank 1 connects and trades the run id
  worker.py bigline MIB [--hold S]   MIB MiB on stdout without a newline
  worker.py flood N [--no-newline] [--forever]
                                     N numbered lines on stdout (--forever: again and again)
  worker.py hang [--stop RANKS] [--silent RANKS] [--say]
                                     ranks in --stop send themselves SIGSTOP (after a line on
                                     stdout with --say), ranks in --silent sleep without a word,
                                     the others print a line every 0.1 s; for 60 s at most
  worker.py progress N               a tqdm-like bar on stderr, N redraws
  worker.py outputs                  files in the workdir and in $FLOWRUN_OUTPUT_DIR
  worker.py kill-self --rank R       rank R sends itself SIGKILL; the others sleep
  worker.py error-file --rank R      rank R writes a traceback to TORCHELASTIC_ERROR_FILE the
                                     way torch's @record does, and exits 1 saying nothing
  worker.py leave-behind             starts a detached `sleep 300` and exits 0 at once
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time

RANK = int(os.environ.get("RANK", "-1"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))

# 1 MiB of a pattern that is easy to check piece by piece.
PATTERN = b"0123456789abcdef" * 65536


def ready(directory, ignore_term):
    """Ignores SIGTERM when asked, then says so with a file, so that a test
    knows the signal disposition is in place before anything fails."""
    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if directory:
        open(os.path.join(directory, f"ready.{RANK}"), "w").close()


def wait_ready(directory, count, limit=60):
    deadline = time.time() + limit
    while time.time() < deadline:
        if len([n for n in os.listdir(directory) if n.startswith("ready.")]) >= count:
            return
        time.sleep(0.02)
    sys.exit("the other ranks never became ready")


def cmd_env(a):
    out = os.environ["FLOWRUN_OUTPUT_DIR"]
    info = {"env": dict(os.environ), "pid": os.getpid(), "pgid": os.getpgid(0), "sid": os.getsid(0),
            "cwd": os.getcwd()}
    with open(os.path.join(out, "env.json"), "w") as f:
        json.dump(info, f)
    print(f"rank {RANK} wrote env.json", flush=True)


def cmd_sleep(a):
    ready(a.ready, a.ignore_term)
    time.sleep(a.seconds)


def cmd_fail(a):
    ready(a.ready, a.ignore_term)
    if RANK != a.rank:
        time.sleep(60)
        return
    if a.ready:
        wait_ready(a.ready, WORLD)
    try:
        raise ValueError(f"boom from rank {RANK}")
    except ValueError:
        import traceback
        traceback.print_exc()
    sys.stderr.flush()
    if a.stamp:
        with open(a.stamp, "w") as f:
            f.write(repr(time.time()))
    os._exit(a.code)


def cmd_restart(a):
    count = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    print(f"rank {RANK} attempt {count} of at most {os.environ['TORCHELASTIC_MAX_RESTARTS']} restarts",
          flush=True)
    if count < a.need:
        print(f"rank {RANK}: not yet (restart {count})", file=sys.stderr)
        sys.exit(a.code)


def cmd_policy(a):
    """Rank --rank ends attempt K (TORCHELASTIC_RESTART_COUNT) the K-th way of --ways (the last one
    for later attempts): raise (the same ValueError each time), exit:N, kill:SIG, or ok; "+touch"
    first writes --touch. The other ranks end with it: 0 for ok, else they wait to be stopped."""
    count = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    ways = a.ways.split(",")
    way = ways[min(count, len(ways) - 1)]
    if way.endswith("+touch"):
        way = way[:-len("+touch")]
        if RANK == a.rank:
            with open(a.touch, "a") as f:
                f.write(f"attempt {count}\n")
    print(f"rank {RANK} attempt {count}: {way}", flush=True)
    if way == "ok":
        return
    if RANK != a.rank:
        time.sleep(60)
        return
    if way == "raise":
        raise ValueError("boom")
    kind, number = way.split(":")
    if kind == "kill":
        os.kill(os.getpid(), int(number))
        time.sleep(60)
    sys.exit(int(number))


def cmd_store(a):
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    token = os.environ["FLOWRUN_RUN_ID"].encode()
    if RANK == 0:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((addr, port))
        server.listen(8)
        if a.together:  # hold the port until every run's rank 0 holds its own
            folder, count = a.together[0], int(a.together[1])
            open(os.path.join(folder, f"{port}-{os.getpid()}"), "w").close()
            deadline = time.time() + 60
            while len(os.listdir(folder)) < count and time.time() < deadline:
                time.sleep(0.01)
        server.settimeout(30)
        conn, _ = server.accept()
        got = conn.recv(256)
        conn.sendall(b"ok " + got)
        conn.close()
        if got != token:
            sys.exit(f"rank 0: a stranger connected: {got!r}")
        print(f"rank 0 served {port}", flush=True)
        return
    deadline = time.time() + 30
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)
    conn.sendall(token)
    reply = conn.recv(256)
    if reply != b"ok " + token:
        sys.exit(f"rank {RANK}: wrong reply {reply!r}")
    print(f"rank {RANK} reached {port}", flush=True)


def cmd_bigline(a):
    out = sys.stdout.buffer
    for _ in range(a.mib):
        out.write(PATTERN)
    out.flush()
    time.sleep(a.hold)


def cmd_flood(a):
    lines = []
    for i in range(a.count):
        lines.append(f"rank {RANK} line {i} " + "x" * (i % 173))
    text = "\n".join(lines)
    if not a.no_newline:
        text += "\n"
    # Large writes, so that the pipe is full and lines straddle reads.
    while True:
        sys.stdout.write(text)
        sys.stdout.flush()
        if not a.forever:
            break


def cmd_hang(a):
    stop = [int(r) for r in a.stop.split(",") if r]
    silent = [int(r) for r in a.silent.split(",") if r]
    if RANK in stop:
        if a.say:
            print(f"rank {RANK} stops itself", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(60)
    elif RANK in silent:
        time.sleep(60)
    else:
        for i in range(600):
            print(f"rank {RANK} beat {i}", flush=True)
            time.sleep(0.1)


def cmd_progress(a):
    err = sys.stderr
    for i in range(a.count + 1):
        err.write(f"\r{100 * i // a.count:3d}%|{'#' * (10 * i // a.count):10s}|")
        err.flush()
        time.sleep(0.002)
    err.write("\n")
    print("done", flush=True)


def cmd_outputs(a):
    out = os.environ["FLOWRUN_OUTPUT_DIR"]
    os.makedirs(os.path.join(out, "private"), exist_ok=True)
    with open(os.path.join(out, "private", f"rank{RANK}.txt"), "w") as f:
        f.write(f"private file of rank {RANK}\n")
    os.makedirs("metrics", exist_ok=True)
    with open(f"metrics/rank{RANK}.json", "w") as f:
        json.dump({"rank": RANK}, f)
    if RANK == 0:
        os.makedirs("ckpt", exist_ok=True)
        with open("ckpt/model.pt", "w") as f:
            f.write("weights of rank 0\n")


def cmd_kill_self(a):
    if RANK == a.rank:
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)


def cmd_error_file(a):
    if RANK != a.rank:
        time.sleep(60)
        return
    # The shape torch.distributed.elastic's ErrorHandler.record_exception writes.
    trace = ('Traceback (most recent call last):\n  File "train.py", line 7, in <module>\n'
             f'    main()\nRuntimeError: recorded failure of rank {RANK}\n')
    with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
        json.dump({"message": {"message": f"RuntimeError: recorded failure of rank {RANK}",
                               "extraInfo": {"py_callstack": trace, "timestamp": str(int(time.time()))}}}, f)
    sys.exit(1)


def cmd_leave_behind(a):
    child = subprocess.Popen(["sleep", "300"], start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    # Popen returns once the child's close-on-exec pipe closed, which the kernel does in execve a
    # moment before the child takes its new name: until then /proc/PID/comm still says python3, and
    # flowrun's sweep, once this rank exits, names what it finds. Wait for the name (bounded).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{child.pid}/comm") as f:
                if f.read().strip() == "sleep":
                    break
        except OSError:
            break
        time.sleep(0.001)
    print(f"rank {RANK} left {child.pid} behind", flush=True)


def main():
    if sys.argv[1:2] == ["argv"]:
        print(json.dumps(sys.argv[2:]), flush=True)
        return
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("env")
    s = sub.add_parser("sleep")
    s.add_argument("seconds", type=float)
    s.add_argument("--ignore-term", action="store_true")
    s.add_argument("--ready")
    s = sub.add_parser("fail")
    s.add_argument("--rank", type=int, required=True)
    s.add_argument("--code", type=int, required=True)
    s.add_argument("--ready")
    s.add_argument("--stamp")
    s.add_argument("--ignore-term", action="store_true")
    s = sub.add_parser("restart")
    s.add_argument("--need", type=int, required=True)
    s.add_argument("--code", type=int, required=True)
    s = sub.add_parser("policy")
    s.add_argument("--rank", type=int, default=1)
    s.add_argument("--ways", required=True)
    s.add_argument("--touch", default="progress.txt")
    s = sub.add_parser("store")
    s.add_argument("--together", nargs=2, metavar=("DIR", "N"), help="rank 0 listens until N files are in DIR")
    s = sub.add_parser("bigline")
    s.add_argument("mib", type=int)
    s.add_argument("--hold", type=float, default=0.5)
    s = sub.add_parser("flood")
    s.add_argument("count", type=int)
    s.add_argument("--no-newline", action="store_true")
    s.add_argument("--forever", action="store_true")
    s = sub.add_parser("hang")
    s.add_argument("--stop", default="")
    s.add_argument("--silent", default="")
    s.add_argument("--say", action="store_true")
    s = sub.add_parser("progress")
    s.add_argument("count", type=int)
    sub.add_parser("outputs")
    s = sub.add_parser("kill-self")
    s.add_argument("--rank", type=int, required=True)
    s = sub.add_parser("error-file")
    s.add_argument("--rank", type=int, required=True)
    sub.add_parser("leave-behind")
    a = p.parse_args()
    globals()["cmd_" + a.cmd.replace("-", "_")](a)


if __name__ == "__main__":
    main()
