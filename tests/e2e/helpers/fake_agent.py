#!/usr/bin/env python3
"""A hostile agent for the head's tests: it speaks flowrun's control-plane
protocol (lib/protocol/include/flowrun/protocol.h) with the run's token, joins, and then
misbehaves the way a test asks.

  fake_agent.py HOST:PORT TOKEN_FILE --upload PATH [--node NAME] [--content TEXT]
                [--corrupt crc|truncate]

--upload PATH: after start, report the ranks as exited 0, announce an upload of
PATH for its first rank (e.g. ../../x) with CONTENT (default "bad") and send
it with a CRC-32C that does not match; then say done.
--corrupt crc (the default): as above, one byte of the data flipped in transit.
--corrupt truncate: send half of CONTENT, then drop the connection.
Exits 0 after the head's bye or the drop, 1 when refused.
"""
import argparse
import hashlib
import hmac
import os
import re
import socket
import struct
import sys

# The protocol this tree's flowrun speaks (the head refuses any other).
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "lib", "protocol", "include",
                       "flowrun", "protocol.h")) as _header:
    VERSION = int(re.search(r"kProtocolVersion = (\d+);", _header.read()).group(1))
TYPES = {"hello": 1, "challenge": 2, "auth": 3, "welcome": 4, "refused": 5, "assign": 6, "start": 7,
         "output": 8, "exited": 9, "heartbeat": 10, "stop": 11, "upload_begin": 12, "upload_chunk": 13,
         "upload_end": 14, "bye": 15, "ready": 16, "done": 17,
         "preflight": 18, "preflight_id": 19, "preflight_done": 20, "signal": 21, "stalled": 22,
         "take_stacks": 23, "stacks": 24, "upload_hole": 25, "ship_begin": 26, "ship_chunk": 27,
         "ship_end": 28, "ship_done": 29, "ship_ack": 30, "shares": 31, "sample_rate": 32}
NAMES = {v: k for k, v in TYPES.items()}


def fields(pairs):
    out = b""
    for key, value in pairs:
        key = key.encode()
        value = value if isinstance(value, bytes) else str(value).encode()
        out += struct.pack(">I", len(key)) + key + struct.pack(">I", len(value)) + value
    return out


def parse(payload):
    out, pos = {}, 0
    while pos < len(payload):
        (n,) = struct.unpack_from(">I", payload, pos)
        key = payload[pos + 4:pos + 4 + n].decode()
        pos += 4 + n
        (m,) = struct.unpack_from(">I", payload, pos)
        out[key] = payload[pos + 4:pos + 4 + m]
        pos += 4 + m
    return out


def frame_keys(token, agent_nonce, head_nonce, node):
    """derive_frame_keys (lib/protocol/auth.cpp): HKDF-SHA256, one block per direction."""
    salt = b"flowrun-frames-v1\0" + agent_nonce + b"\0" + head_nonce
    prk = hmac.new(salt, token.encode(), hashlib.sha256).digest()
    return {label: hmac.new(prk, label.encode() + b":" + node.encode() + b"\x01", hashlib.sha256).digest()
            for label in ("agent->head", "head->agent")}


class Cipher:
    """FrameCipher: AES-256-GCM, nonce = direction:u32 + sequence:u64, the header as associated data."""

    def __init__(self, key, direction):
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        self.aead, self.direction, self.sequence = AESGCM(key), direction, 0

    def nonce(self):
        return struct.pack(">IQ", self.direction, self.sequence)

    def seal(self, kind, payload):
        header = struct.pack(">IBB", len(payload) + 16 + 2, VERSION, kind)
        sealed = header + self.aead.encrypt(self.nonce(), payload, header)
        self.sequence += 1
        return sealed

    def open(self, kind, payload):
        header = struct.pack(">IBB", len(payload) + 2, VERSION, kind)
        plain = self.aead.decrypt(self.nonce(), payload, header)
        self.sequence += 1
        return plain


class Peer:
    def __init__(self, sock):
        self.sock, self.buf = sock, b""
        self.sealer = self.opener = None

    def seal_from_now(self, token, agent_nonce, head_nonce, node):
        keys = frame_keys(token, agent_nonce, head_nonce, node)
        self.sealer, self.opener = Cipher(keys["agent->head"], 1), Cipher(keys["head->agent"], 2)

    def frame(self, kind, pairs=()):
        payload = fields(pairs)
        if self.sealer:
            return self.sealer.seal(TYPES[kind], payload)
        return struct.pack(">IBB", len(payload) + 2, VERSION, TYPES[kind]) + payload

    def send(self, kind, pairs=()):
        self.sock.sendall(self.frame(kind, pairs))

    def recv(self):
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack_from(">I", self.buf)
                if len(self.buf) >= 4 + n:
                    kind, payload = self.buf[5], self.buf[6:4 + n]
                    self.buf = self.buf[4 + n:]
                    if self.opener:
                        payload = self.opener.open(kind, payload)
                    if NAMES.get(kind) == "heartbeat":
                        continue
                    return NAMES.get(kind, str(kind)), parse(payload)
            data = self.sock.recv(65536)
            if not data:
                return None, {}
            self.buf += data


def crc32c(data):
    """CRC-32C (Castagnoli), as 8 lowercase hex digits, as the head computes it."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return f"{crc ^ 0xFFFFFFFF:08x}"


def proof(token, nonce, role):
    message = b"flowrun-auth-v1\0" + nonce + b"\0" + role.encode()
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("endpoint")
    ap.add_argument("token_file")
    ap.add_argument("--upload", required=True)
    ap.add_argument("--node", default="fake")
    ap.add_argument("--content", default="bad")
    ap.add_argument("--corrupt", choices=("crc", "truncate"), default="crc")
    args = ap.parse_args()
    host, port = args.endpoint.rsplit(":", 1)
    token = open(args.token_file).read().strip()
    peer = Peer(socket.create_connection((host, int(port))))
    my_nonce = os.urandom(16).hex()
    peer.send("hello", [("node", args.node), ("flowrun", os.environ.get("FLOWRUN_VERSION", "0.1.0")),
                        ("nonce", my_nonce), ("node_rank", "-1"), ("pid", os.getpid()), ("gpus", "0"),
                        ("stays", "0"), ("address", ""), ("reach_port", "0")])
    kind, msg = peer.recv()
    if kind != "challenge":
        print(f"fake agent: {kind}: {msg.get('reason', b'').decode()}", file=sys.stderr)
        return 1
    peer.send("auth", [("proof", proof(token, msg["nonce"], "agent:" + args.node))])
    head_nonce = msg["nonce"]
    kind, msg = peer.recv()
    if kind != "welcome":
        print(f"fake agent: {kind}: {msg.get('reason', b'').decode()}", file=sys.stderr)
        return 1
    peer.seal_from_now(token, my_nonce.encode(), head_nonce, args.node)
    ranks = []
    while True:
        kind, msg = peer.recv()
        if kind is None or kind == "bye":
            return 0
        if kind == "assign":
            marker = open(msg["marker_path"].decode(), "rb").read()
            peer.send("ready", [("workdir_ok", "1" if marker == msg["marker_text"] else "0"), ("workdir_error", ""),
                                ("address", "127.0.0.1"), ("port", "29500"), ("gpus", "0"),
                                ("check_ms", "0"), ("ranks", "0")])
        elif kind == "start":
            ranks = [int(parse(msg[f"r{i}"])["rank"]) for i in range(int(msg["ranks"]))]
            for rank in ranks:
                peer.send("exited", [("rank", rank), ("kind", "exited"), ("code", "0"), ("spawn_error", ""),
                                     ("pid", "0"), ("start_ns", "0"), ("end_ns", "0"), ("error_file_ns", "0"),
                                     ("rss_kib", "0"),
                                     ("stopped", "0"), ("silent_ms", ""), ("suspended", "0"), ("stalled", "0"),
                                     ("command", ""), ("program", ""), ("path_python", "")])
            content = args.content.encode()
            peer.send("upload_begin", [("rank", ranks[0]), ("path", args.upload), ("size", len(content))])
            if args.corrupt == "truncate":
                peer.send("upload_chunk", [("data", content[:len(content) // 2])])
                peer.sock.shutdown(socket.SHUT_RDWR)
                peer.sock.close()
                return 0
            # The CRC-32C of what was meant; the head receives it with one byte flipped.
            flipped = content[:-1] + bytes([content[-1] ^ 0x20])
            peer.send("upload_chunk", [("data", flipped)])
            peer.send("upload_end", [("path", args.upload), ("crc32c", crc32c(content))])
            peer.send("done", [("attempt", msg["attempt"]), ("errors", "")])


if __name__ == "__main__":
    sys.exit(main())
