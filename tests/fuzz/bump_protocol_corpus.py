#!/usr/bin/env python3
"""Rewrites tests/fuzz/corpus/protocol for a new protocol version.

An input is a control byte, then frames (protocol.h). Each frame of the
version before kProtocolVersion, whole or cut short, gets kProtocolVersion,
so the fuzzer's inputs still reach the decoders; frames of older versions
stay as they are (they exercise the refusal). A message whose fields changed
with the version is rewritten by REWRITE, keyed by (old version, type). Each
file is then named by the SHA-1 of its content, as libFuzzer names them.

  python3 tests/fuzz/bump_protocol_corpus.py
"""
import hashlib
import os
import re
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus", "protocol")
with open(os.path.join(ROOT, "lib", "protocol", "include", "flowrun", "protocol.h")) as header:
    VERSION = int(re.search(r"kProtocolVersion = (\d+);", header.read()).group(1))
HELLO = 1
ASSIGN = 6
START = 7
STOP = 11
BYE = 15
READY = 16
SHIP_END = 28
EXITED = 9
SHARES = 31


def decode_fields(payload):
    fields, at = [], 0
    while at < len(payload):
        (n,) = struct.unpack(">I", payload[at:at + 4])
        key = payload[at + 4:at + 4 + n]
        at += 4 + n
        (n,) = struct.unpack(">I", payload[at:at + 4])
        fields.append((key, payload[at + 4:at + 4 + n]))
        at += 4 + n
    return fields


def encode_fields(fields):
    return b"".join(struct.pack(">I", len(k)) + k + struct.pack(">I", len(v)) + v for k, v in fields)


def start_4_to_5(payload):
    """A protocol 4 start (each rank's whole environment) as a protocol 5 one (the node's part of the plan)."""
    old = dict(decode_fields(payload))
    ranks = [dict(decode_fields(old[b"r%d" % i])) for i in range(int(old[b"ranks"]))]
    env = dict(e.split(b"=", 1) for r in ranks[:1] for e in r[b"env"].split(b"\0") if e)
    new = [(b"attempt", old[b"attempt"]), (b"step", env.get(b"FLOWRUN_STEP", b"train")),
           (b"run_id", env.get(b"TORCHELASTIC_RUN_ID", b"20261201-120000-ab12")),
           (b"run_dir", env.get(b"FLOWRUN_RUN_DIR", old[b"workdir"] + b"/.flowrun/runs/20261201-120000-ab12")),
           (b"env", b"DATA=/data\0EMPTY="), (b"world_size", env.get(b"WORLD_SIZE", b"1")),
           (b"nodes", env.get(b"GROUP_WORLD_SIZE", b"2")), (b"node_rank", env.get(b"GROUP_RANK", b"1")),
           (b"max_restarts", b"0"), (b"master_addr", old[b"master_addr"]), (b"master_port", old[b"master_port"]),
           (b"devices", b"set"), (b"workdir", old[b"workdir"]), (b"argv", old[b"argv"]),
           (b"ranks", old[b"ranks"])]
    for i, r in enumerate(ranks):
        new.append((b"r%d" % i, encode_fields([(b"rank", r[b"rank"]), (b"local_rank", r[b"local_rank"]),
                                               (b"devices", r[b"local_rank"]), (b"upload", r[b"upload"])])))
    return encode_fields(new)


def start_5_to_6(payload):
    """A protocol 5 start with the role and the job id of protocol 6, after run_id."""
    new = []
    for key, value in decode_fields(payload):
        new.append((key, value))
        if key == b"run_id":
            new += [(b"job_id", value), (b"role", b"default")]
    return encode_fields(new)


def start_6_to_7(payload):
    """A protocol 6 start with protocol 7's nccl_flight_recorder (off) after devices."""
    new = []
    for key, value in decode_fields(payload):
        new.append((key, value))
        if key == b"devices":
            new.append((b"nccl_flight_recorder", b"0"))
    return encode_fields(new)


def shares_13_to_14(payload):
    """A protocol 13 shares, each rank's line with protocol 14's blocked samples (its waits) and no span."""
    new = []
    for key, value in decode_fields(payload):
        if key == b"ranks":
            lines, frames_left = [], 0
            for line in value.split(b"\n"):
                words = line.split(b" ")
                if frames_left == 0 and len(words) == 4:
                    frames_left = int(words[3])
                    line = line + b" " + words[2] + b" 0 0"
                elif frames_left > 0:
                    frames_left -= 1
                lines.append(line)
            value = b"\n".join(lines)
        new.append((key, value))
    return encode_fields(new)


def ship_end_14_to_15(payload):
    """A protocol 14 ship_end (the file's SHA-256) as a protocol 15 one (its CRC-32C: the first 8 hex digits)."""
    return encode_fields([(b"crc32c", value[:8]) if key == b"sha256" else (key, value)
                          for key, value in decode_fields(payload)])


def after(key, added):
    """A rewrite that puts the fields `added` after the field `key`."""
    def rewrite(payload):
        new = []
        for k, value in decode_fields(payload):
            new.append((k, value))
            if k == key:
                new += added
        return encode_fields(new)
    return rewrite


REWRITE = {(4, START): start_4_to_5, (5, START): start_5_to_6, (6, START): start_6_to_7,
           # protocol 7: the forensics time in assign, stacks before a stop's signals
           (6, ASSIGN): after(b"stall_ms", [(b"forensics_ms", b"3000")]),
           (6, STOP): after(b"kill", [(b"stacks", b"1")]),
           # protocol 9: a gang's agent stays; bye keeps it or says the flow's exit code
           (8, HELLO): after(b"gpus", [(b"stays", b"0")]),
           (8, BYE): after(b"succeeded", [(b"keep", b"0"), (b"flow_exit", b"-1")]),
           # protocol 10: node checks asked in assign, their verdict in ready
           (9, ASSIGN): after(b"forensics_ms", [(b"node_checks", b"0"), (b"node_gpus", b"-1"), (b"python", b"")]),
           (9, READY): after(b"gpus", [(b"check_ms", b"0"), (b"ranks", b"0")]),
           # protocol 11: the samples' rate in assign (shares, a new message, needs no rewrite)
           (10, ASSIGN): after(b"forensics_ms", [(b"sample_ms", b"1000")]),
           # protocol 13: hello says the agent's address and reach port, assign node 0's
           (12, HELLO): after(b"stays", [(b"address", b"10.0.0.2"), (b"reach_port", b"40123")]),
           (12, ASSIGN): after(b"python", [(b"node0_name", b""), (b"node0_address", b""), (b"node0_port", b"0")]),
           # protocol 14: each rank's shares with its blocked samples and time
           (13, SHARES): shares_13_to_14,
           # protocol 15: ship_end carries the file's CRC-32C
           (14, SHIP_END): ship_end_14_to_15,
           # protocol 16: exited says when the rank wrote its error file
           (15, EXITED): after(b"end_ns", [(b"error_file_ns", b"0")])}
# protocol 12: sample_rate, a new message (head -> agent); no frame of 11 changed


def bump(frames):
    """`frames` with each frame of the version before this one bumped, up to the first of another version."""
    out, at = bytearray(), 0
    while len(frames) - at >= 6:
        length, version, kind = struct.unpack(">IBB", frames[at:at + 6])
        if version != VERSION - 1:
            break
        end = at + 4 + length
        if length < 2 or end > len(frames):  # cut short: the rest is this frame's
            out += frames[at:at + 4] + bytes([VERSION]) + frames[at + 5:]
            return bytes(out)
        payload = frames[at + 6:end]
        if (version, kind) in REWRITE:
            try:
                payload = REWRITE[(version, kind)](payload)
            except (struct.error, KeyError, ValueError):
                pass  # a mutant the decoder refuses anyway: kept as it is

        out += struct.pack(">IBB", len(payload) + 2, VERSION, kind) + payload
        at = end
    return bytes(out) + frames[at:]


def main():
    for name in sorted(os.listdir(CORPUS)):
        path = os.path.join(CORPUS, name)
        with open(path, "rb") as f:
            data = f.read()
        if not data:
            continue
        bumped = data[:1] + bump(data[1:])
        if bumped == data:
            continue
        os.remove(path)
        with open(os.path.join(CORPUS, hashlib.sha1(bumped).hexdigest()), "wb") as f:
            f.write(bumped)


if __name__ == "__main__":
    main()
