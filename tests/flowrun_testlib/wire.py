"""Peers on the control plane's wire for the fault suite (no token needed):

Crowd(host, port, count)  keeps `count` connections to the head open and says
                          nothing on them, opening a new one for each the
                          head closes, until stop().
Proxy(host, port, mode)   a TCP proxy the agents dial instead of the head; it
                          passes bytes through, frame by frame, except:
                            "flip":   one byte of every sealed start frame
                                      (head -> agent) is flipped;
                            "replay": every ready frame (agent -> head) is
                                      sent twice.
                          .port is where it listens; .touched counts the
                          frames it changed.
"""
import selectors
import socket
import struct
import threading

START, READY = 7, 16


class Crowd:
    def __init__(self, host, port, count):
        self.addr, self.count = (host, port), count
        self.opened, self._stop = 0, threading.Event()
        self._sel = selectors.DefaultSelector()
        for _ in range(count):
            self._open()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _open(self):
        try:
            s = socket.create_connection(self.addr, timeout=5)
        except OSError:
            return
        s.setblocking(False)
        self._sel.register(s, selectors.EVENT_READ)
        self.opened += 1

    def _run(self):
        while not self._stop.is_set():
            for key, _ in self._sel.select(0.2):
                s = key.fileobj
                try:
                    data = s.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if not data:  # refused or dropped: take its place again
                    self._sel.unregister(s)
                    s.close()
                    if not self._stop.is_set():
                        self._open()

    def stop(self):
        self._stop.set()
        self._thread.join()
        for key in list(self._sel.get_map().values()):
            key.fileobj.close()


class Proxy:
    def __init__(self, host, port, mode):
        self.head, self.mode, self.touched = (host, port), mode, 0
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                agent, _ = self.listener.accept()
            except OSError:
                return
            head = socket.create_connection(self.head)
            threading.Thread(target=self._pump, args=(agent, head, "up"), daemon=True).start()
            threading.Thread(target=self._pump, args=(head, agent, "down"), daemon=True).start()

    def _change(self, frame, direction, index):
        """The bytes to send for the `index`th frame (0: the first) going `direction`."""
        kind = frame[5]
        # Frames 0 and 1 each way are the handshake (hello/auth, challenge/welcome): plain.
        if self.mode == "flip" and direction == "down" and kind == START and index >= 2:
            with self._lock:
                self.touched += 1
            middle = 6 + (len(frame) - 6) // 2
            return frame[:middle] + bytes([frame[middle] ^ 0x40]) + frame[middle + 1:]
        if self.mode == "replay" and direction == "up" and kind == READY and index >= 2:
            with self._lock:
                self.touched += 1
            return frame + frame
        return frame

    def _pump(self, src, dst, direction):
        buf, index = b"", 0
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                buf += data
                while len(buf) >= 4:
                    (n,) = struct.unpack_from(">I", buf)
                    if len(buf) < 4 + n:
                        break
                    frame, buf = buf[:4 + n], buf[4 + n:]
                    dst.sendall(self._change(frame, direction, index))
                    index += 1
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.listener.close()
