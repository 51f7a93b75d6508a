#!/usr/bin/env python3
"""A rank for the multi-node end-to-end tests: one subcommand per behaviour
the tests need. Standard library only.

  node_worker.py env                 write the environment, host name and the result of a
                                     connection test to $FLOWRUN_OUTPUT_DIR/env.json: rank 0
                                     listens on MASTER_ADDR:MASTER_PORT, the last rank connects
  node_worker.py sleep S --ready DIR [--ignore-term]
                                     say "ready" with DIR/ready.RANK, then sleep S seconds
  node_worker.py fail --rank R --code C --ready DIR [--ignore-term]
                                     once every rank is ready, rank R exits with code C
                                     after a traceback; the others sleep
  node_worker.py symlink --rank R    rank R leaves a symbolic link to /etc/passwd in
                                     $FLOWRUN_OUTPUT_DIR, every rank a regular file
  node_worker.py started DIR         create DIR/started.RANK, then print it
"""
import argparse
import json
import os
import signal
import socket
import sys
import time

RANK = int(os.environ.get("RANK", "-1"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
HOST = socket.gethostname()


def ready(directory, ignore_term):
    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(os.path.join(directory, f"ready.{RANK}"), "w") as f:
        f.write(f"{HOST} {os.getpid()}\n")


def wait_ready(directory, count, limit=60):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if len([n for n in os.listdir(directory) if n.startswith("ready.")]) >= count:
            return
        time.sleep(0.02)
    sys.exit(f"rank {RANK}: the other ranks never became ready")


def serve(addr, port, token):
    """Rank 0: accept one connection on MASTER_ADDR:MASTER_PORT (as torch's
    TCPStore would) and check that it came from the last rank."""
    server = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((addr, port))
    server.listen(8)
    server.settimeout(30)
    conn, peer = server.accept()
    got = conn.recv(256).decode(errors="replace")
    conn.sendall(f"ok {got}".encode())
    conn.close()
    server.close()
    return {"listened": f"{addr}:{port}", "peer": peer[0], "got": got}


def reach(addr, port, token):
    """The last rank: connect to rank 0 on MASTER_ADDR:MASTER_PORT."""
    deadline = time.monotonic() + 30
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=5)
            break
        except OSError as e:
            if time.monotonic() > deadline:
                return {"error": f"cannot connect to {addr}:{port}: {e}"}
            time.sleep(0.05)
    conn.sendall(token.encode())
    reply = conn.recv(256).decode(errors="replace")
    conn.close()
    return {"connected": f"{addr}:{port}", "reply": reply}


def cmd_env(a):
    info = {"env": dict(os.environ), "hostname": HOST, "pid": os.getpid(), "cwd": os.getcwd()}
    addr, port = os.environ.get("MASTER_ADDR", ""), int(os.environ.get("MASTER_PORT", "0") or 0)
    token = f"rank {RANK} of {os.environ.get('TORCHELASTIC_RUN_ID', '?')}"
    try:
        if RANK == 0 and WORLD > 1:
            info["serve"] = serve(addr, port, token)
        elif RANK == WORLD - 1 and WORLD > 1:
            info["reach"] = reach(addr, port, token)
    except OSError as e:
        info["serve" if RANK == 0 else "reach"] = {"error": f"{type(e).__name__}: {e}"}
    with open(os.path.join(os.environ["FLOWRUN_OUTPUT_DIR"], "env.json"), "w") as f:
        json.dump(info, f, indent=1, sort_keys=True)
    print(f"rank {RANK} on {HOST} wrote env.json", flush=True)


def cmd_sleep(a):
    ready(a.ready, a.ignore_term)
    print(f"rank {RANK} on {HOST} is ready", flush=True)
    time.sleep(a.seconds)


def cmd_fail(a):
    ready(a.ready, a.ignore_term)
    if RANK != a.rank:
        time.sleep(60)
        return
    wait_ready(a.ready, WORLD)
    try:
        raise ValueError(f"boom from rank {RANK} on {HOST}")
    except ValueError:
        import traceback
        traceback.print_exc()
    sys.stderr.flush()
    os._exit(a.code)


def cmd_symlink(a):
    out = os.environ["FLOWRUN_OUTPUT_DIR"]
    with open(os.path.join(out, "plain.txt"), "w") as f:
        f.write(f"rank {RANK}\n")
    if RANK == a.rank:
        os.symlink("/etc/passwd", os.path.join(out, "passwd"))
        print(f"rank {RANK} on {HOST} left {out}/passwd -> /etc/passwd", flush=True)


def cmd_started(a):
    path = os.path.join(a.dir, f"started.{RANK}")
    with open(path, "w") as f:
        f.write(HOST + "\n")
    print(f"rank {RANK} on {HOST} started", flush=True)


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("env")
    p = sub.add_parser("sleep")
    p.add_argument("seconds", type=float)
    p.add_argument("--ready", required=True)
    p.add_argument("--ignore-term", action="store_true")
    p = sub.add_parser("fail")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--code", type=int, required=True)
    p.add_argument("--ready", required=True)
    p.add_argument("--ignore-term", action="store_true")
    p = sub.add_parser("symlink")
    p.add_argument("--rank", type=int, required=True)
    p = sub.add_parser("started")
    p.add_argument("dir")
    a = parser.parse_args()
    globals()["cmd_" + a.cmd](a)


if __name__ == "__main__":
    main()
