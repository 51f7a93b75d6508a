"""What a pod sees, run in each pod of tests/e2e/pods/test_podsim.py as its container's command:

  probe.py [--names N1,N2,...] [--listen PORT --peers K | --connect HOST:PORT] [--wait-term]

prints one line `PROBE {json}`: its host name, PID, environment, working directory, which flowrun
PATH finds, the processes it sees, the Secret file FLOWRUN_TOKEN_FILE names (text, mode, whether it
can be written), what each name resolves to (waiting for names whose pods start later, as the
cluster's DNS answers them once they run), and the marker files of its working directory and /tmp
(it writes its own first). --listen accepts K connections and answers each; --connect dials until
the listener answers. Exits $PROBE_EXIT (0 unset); --wait-term then waits for SIGTERM and exits 42.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import sys
import time

LIMIT = 60.0  # seconds to wait for a peer: the pods start seconds apart


def resolve(names):
    got, deadline = {}, time.monotonic() + LIMIT
    while len(got) < len(names) and time.monotonic() < deadline:
        for name in names:
            if name not in got:
                try:
                    got[name] = socket.gethostbyname(name)
                except OSError:
                    pass
        if len(got) < len(names):
            time.sleep(0.05)
    return got


def listen(port, peers):
    server = socket.create_server(("0.0.0.0", port))
    server.settimeout(LIMIT)
    seen = {}
    while len(seen) < peers:
        conn, (addr, _) = server.accept()
        with conn:
            name = conn.makefile().readline().strip()
            conn.sendall(f"hello {name} from {socket.gethostname()}\n".encode())
            seen[name] = addr
    return seen


def connect(endpoint):
    host, port = endpoint.rsplit(":", 1)
    deadline = time.monotonic() + LIMIT
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=5) as conn:
                conn.sendall(f"{socket.gethostname()}\n".encode())
                return conn.makefile().readline().strip()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def secret(path):
    if not path:
        return None
    st = os.stat(path)
    try:
        with open(path, "a"):
            writable = True
    except OSError as e:
        writable = e.strerror
    with open(path) as f:
        text = f.read()
    return {"text": text, "mode": oct(st.st_mode & 0o7777), "link": os.path.islink(path),
            "writable": writable, "dir": sorted(os.listdir(os.path.dirname(path)))}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--names", default="")
    parser.add_argument("--listen", type=int)
    parser.add_argument("--peers", type=int, default=0)
    parser.add_argument("--connect")
    parser.add_argument("--wait-term", action="store_true")
    args = parser.parse_args()
    me = socket.gethostname()
    for where in (".", "/tmp"):
        with open(os.path.join(where, f"marker-{me}"), "w") as f:
            f.write(me)
    # The environment the pod gave (os.environ has what this Python added: LC_CTYPE, PEP 538).
    with open("/proc/self/environ", "rb") as f:
        env = dict(kv.decode().split("=", 1) for kv in f.read().split(b"\0") if kv)
    info = {"hostname": me, "pid": os.getpid(), "env": env, "cwd": os.getcwd(),
            "flowrun": os.path.realpath(shutil.which("flowrun") or ""),
            "procs": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
            "secret": secret(os.environ.get("FLOWRUN_TOKEN_FILE")),
            "resolved": resolve([n for n in args.names.split(",") if n])}
    if args.listen:
        info["peers"] = listen(args.listen, args.peers)
    if args.connect:
        info["reply"] = connect(args.connect)
    info["markers"] = {where: sorted(f for f in os.listdir(where) if f.startswith("marker-"))
                       for where in (".", "/tmp")}
    print("PROBE " + json.dumps(info), flush=True)
    if args.wait_term:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(42))
        print("waiting for SIGTERM", flush=True)
        while True:
            signal.pause()
    return int(os.environ.get("PROBE_EXIT", "0"))


if __name__ == "__main__":
    sys.exit(main())
