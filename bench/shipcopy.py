"""shipcopy: the floor for shipping a step's inputs. One sending process (as the head is one process) copies
every FILE, one after the other, over each of N loopback TCP connections at once (non-blocking sockets under
one selector, 1 MiB writes); N receiving processes (as the agents are) each write what they read into its own
file in DIR. No framing, no checksum.

  python3 shipcopy.py N DIR FILE...

Prints "bytes=B wall_ns=T": the bytes written by all receivers and the time from the first connection to the
last receiver's file closed. Exits 1 on any error or short copy."""

import os
import selectors
import socket
import sys
import time

CHUNK = 1 << 20


def receive(listener, path):
    conn, _ = listener.accept()
    got = 0
    with open(path, "wb", buffering=0) as out:
        while True:
            data = conn.recv(CHUNK)
            if not data:
                break
            out.write(data)
            got += len(data)
    os._exit(0 if got else 1)


def main():
    n, dest, files = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    total = sum(os.path.getsize(f) for f in files)
    listeners, pids = [], []
    for k in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        listeners.append(s)
        pid = os.fork()
        if pid == 0:
            receive(s, os.path.join(dest, f"copy{k}"))
        pids.append(pid)
    t0 = time.monotonic_ns()
    sel = selectors.DefaultSelector()
    for s in listeners:
        c = socket.create_connection(s.getsockname())
        c.setblocking(False)
        sel.register(c, selectors.EVENT_WRITE, {"file": 0, "fd": None, "buf": memoryview(b"")})
    open_streams = n
    while open_streams:
        for key, _ in sel.select():
            st, c = key.data, key.fileobj
            if not st["buf"]:
                if st["fd"] is None and st["file"] < len(files):
                    st["fd"] = open(files[st["file"]], "rb", buffering=0)
                    st["file"] += 1
                data = st["fd"].read(CHUNK) if st["fd"] is not None else b""
                if not data:
                    if st["fd"] is not None:
                        st["fd"].close()
                        st["fd"] = None
                    if st["file"] == len(files):
                        sel.unregister(c)
                        c.close()
                        open_streams -= 1
                    continue
                st["buf"] = memoryview(data)
            try:
                sent = c.send(st["buf"])
            except BlockingIOError:
                continue
            st["buf"] = st["buf"][sent:]
    codes = [os.waitpid(p, 0)[1] for p in pids]
    wall = time.monotonic_ns() - t0
    got = sum(os.path.getsize(os.path.join(dest, f"copy{k}")) for k in range(n))
    print(f"bytes={got} wall_ns={wall}")
    sys.exit(0 if got == n * total and not any(codes) else 1)


if __name__ == "__main__":
    main()
