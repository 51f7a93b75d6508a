// The control plane's messages as structs: one per MessageType, each with
// the fields it carries, who sends it and when. encode() turns one into a
// Frame (its payload is encode_fields of the fields below, in this order,
// under these names); decode_message() turns a Frame back, or says why it
// cannot. The head (lib/head/remote_group.cpp) and the agent (lib/agent/agent.cpp) use
// nothing else, so a field has one name, one type and one meaning.
//
// Every field is on the wire in every message (no field is optional), and a
// payload with a field missing, a field this protocol does not know, or a
// value of the wrong form is refused. How values are written:
//   integers   decimal, '-' for negatives ("12", "-1"); no '+', spaces or
//              leading zeros beyond a single "0"
//   booleans   "1" or "0"
//   optional   an integer or "" for none (Assign::stall_ms, Exited::silent_ms)
//   lists      items joined by NUL ('\0'); "" is the empty list, so a list
//              of one empty item cannot be sent (none of the lists needs one)
// Types that other modules own (ExitStatus, AllReduceSweep, NcclPart) are mirrored here
// as plain fields and converted by the head and the agent, so this module
// links nothing above flowrun_base.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "flowrun/protocol.h"

namespace flowrun {

// ---- The handshake (see protocol.h) -----------------------------------------

// agent -> head: the first message.
struct Hello {
  static constexpr MessageType kType = MessageType::hello;
  std::string node;     // the agent's host name (FLOWRUN_HOSTNAME or gethostname)
  std::string flowrun;  // FLOWRUN_VERSION: the head admits only its own
  std::string nonce;    // the agent's challenge to the head (make_nonce)
  int node_rank = -1;   // --node-rank or SLURM_NODEID; -1: any free rank
  int pid = 0;
  int gpus = 0;  // the GPUs the agent sees (select_gpus)
  // The agent of a gang's node (a pod of an Indexed Job, a SkyPilot node):
  // it serves every parallel step of the flow, so the head keeps its link
  // between steps, and it ends when the flow does (Bye::flow_exit).
  bool stays = false;
  // The agent's end of its connection to the head (its address as the other
  // nodes reach it: node 0's is MASTER_ADDR), and a port it listens on there
  // so that the other nodes' checks can tell they reach it (0: none).
  std::string address{};
  int reach_port = 0;
  friend bool operator==(const Hello&, const Hello&) = default;
};

// head -> agent: the nonce the agent must prove the token over.
struct Challenge {
  static constexpr MessageType kType = MessageType::challenge;
  std::string nonce;
  friend bool operator==(const Challenge&, const Challenge&) = default;
};

// agent -> head: auth_proof(token, head's nonce, "agent:" + node).
struct Auth {
  static constexpr MessageType kType = MessageType::auth;
  std::string proof;
  friend bool operator==(const Auth&, const Auth&) = default;
};

// head -> agent: accepted. Every frame after it is sealed, both ways.
struct Welcome {
  static constexpr MessageType kType = MessageType::welcome;
  std::string proof;  // auth_proof(token, agent's nonce, "head:" + node)
  int node_rank = 0;  // the rank the head gave this node
  std::int64_t heartbeat_ms = 0;
  std::int64_t timeout_ms = 0;  // a head silent this long is lost
  friend bool operator==(const Welcome&, const Welcome&) = default;
};

// head -> agent: not accepted (shown to the user); the head then closes. Also
// what the head answers a peer of another protocol version with, in that
// peer's version (refused_frame_in): its fields must never change.
struct Refused {
  static constexpr MessageType kType = MessageType::refused;
  std::string reason;
  friend bool operator==(const Refused&, const Refused&) = default;
};

// ---- A step's attempt -----------------------------------------------------

// head -> agent: the step this node runs; answered with Ready.
struct Assign {
  static constexpr MessageType kType = MessageType::assign;
  std::string step;
  std::string run_id;
  int attempt = 0;  // 0, then one more per restart
  int node_rank = 0;
  int nodes = 0;
  std::string workdir;
  // A file the head wrote in the workdir and its content: a node that reads
  // something else there does not share the head's workdir.
  std::string marker_path;
  std::string marker_text;
  bool want_port = false;  // node 0: hold a free port for MASTER_PORT
  std::int64_t grace_ms = 0;
  // The step's stall_timeout, enforced by the agent, whose supervisor reads
  // its ranks' pipes (it reports them with Stalled).
  std::optional<std::int64_t> stall_ms;
  // How long the agent may take its live ranks' stacks before a stop's
  // signals (the step's forensics timeout); 0: it takes none.
  std::int64_t forensics_ms = 0;
  // One sample of each rank's stack every sample_ms on average, to name the
  // slow rank (the step's forensics sample); 0: none. The agent sends its
  // ranks' tallies with Shares.
  std::int64_t sample_ms = 0;
  // parallel.node_checks: the agent checks its node before it answers
  // (docs/reliability.md), against the GPUs the plan gives the node
  // (`node_gpus`, -1: a step of CPU workers, no GPU checks) and, with a
  // `python`, whether this Python imports torch (the head holds a failure
  // against the node only where another node's Python imports it).
  bool node_checks = false;
  int node_gpus = -1;
  std::string python;
  // With node_checks, to a node other than node 0: node 0's host name,
  // address and reach port (Hello::reach_port), which the node checks it
  // reaches (reach_node0). Port 0: no such check.
  std::string node0_name;
  std::string node0_address;
  int node0_port = 0;
  friend bool operator==(const Assign&, const Assign&) = default;
};

// One check of a node (Ready::checks): its name ("gpu_count", "gpu_health",
// "scratch_space", "workdir_space", "torch_import", "reach_node0"), whether the node
// passed, and what was found (on a failure: what is wrong and what to do).
// On the wire they go as Start's ranks do: the field "ranks" (their count),
// then "r0", "r1", ... each the encode_fields of name, ok and detail.
struct NodeCheck {
  std::string name;
  bool ok = true;
  std::string detail;
  friend bool operator==(const NodeCheck&, const NodeCheck&) = default;
};

// agent -> head: the answer to Assign.
struct Ready {
  static constexpr MessageType kType = MessageType::ready;
  bool workdir_ok = false;
  std::string workdir_error;  // why not, when !workdir_ok
  std::string address;        // the agent's end of the connection (node 0's is MASTER_ADDR)
  int port = 0;               // the port held for Assign::want_port, else 0
  int gpus = 0;
  // Assign::node_checks: the node's checks (empty: none ran) and how long
  // they took, in milliseconds.
  std::vector<NodeCheck> checks;
  std::int64_t check_ms = 0;
  friend bool operator==(const Ready&, const Ready&) = default;
};

// One rank of Start.
struct StartRank {
  int rank = 0;
  int local_rank = 0;
  std::string devices;  // its CUDA_VISIBLE_DEVICES, where Start::devices says to set it
  bool upload = false;  // upload its FLOWRUN_OUTPUT_DIR after a successful attempt
  friend bool operator==(const StartRank&, const StartRank&) = default;
};

// head -> agent: start this node's ranks now (every node starts together).
// It carries the node's part of the step's plan and of this launch (the
// plan module's NodeWork, as plain fields): the agent makes each rank's
// environment from it and from what only the node has, its own environment
// and scratch directory (worker_env). On the wire each rank is one field
// "r0", "r1", ... whose value is the encode_fields of rank, local_rank,
// devices and upload, after the field "ranks" (their count).
struct Start {
  static constexpr MessageType kType = MessageType::start;
  // What a rank's CUDA_VISIBLE_DEVICES becomes (DeviceRule): "leave" it as
  // inherited, "set" it to the rank's devices, or set it only "if_inherited"
  // (the node's environment has one).
  enum class Devices { leave, set, if_inherited };
  int attempt = 0;  // 0, then one more per restart (TORCHELASTIC_RESTART_COUNT)
  std::string step;
  std::string run_id;
  std::string job_id;            // TORCHELASTIC_RUN_ID
  std::string role;              // ROLE_NAME
  std::string run_dir;           // FLOWRUN_RUN_DIR
  std::vector<std::string> env;  // "NAME=value" entries: the spec's env, then the step's
  int world_size = 0;
  int nodes = 0;
  int node_rank = 0;
  int max_restarts = 0;
  std::string master_addr;
  int master_port = 0;
  Devices devices = Devices::leave;
  // The step's forensics.nccl: each rank gets NCCL's flight-recorder
  // variables, its dumps in the rank's directory, uploaded when they exist.
  bool nccl_flight_recorder = false;
  std::string workdir;
  std::vector<std::string> argv;
  std::vector<StartRank> ranks;  // the node's ranks, by local rank
  friend bool operator==(const Start&, const Start&) = default;
};

// agent -> head: what a rank wrote, at most kMaxChunkBytes of it.
struct Output {
  static constexpr MessageType kType = MessageType::output;
  int rank = 0;
  bool is_stderr = false;  // "stream": "stdout" or "stderr"
  std::string data;
  friend bool operator==(const Output&, const Output&) = default;
};

// agent -> head: how a rank ended, the fields of its WorkerRecord.
struct Exited {
  static constexpr MessageType kType = MessageType::exited;
  // ExitStatus::Kind's three ends of a process: "exited", "signaled", "spawn_failed".
  enum class Kind { exited, signaled, spawn_failed };
  int rank = 0;
  Kind kind = Kind::exited;
  int code = 0;             // exited: the exit code; signaled: the signal number
  std::string spawn_error;  // spawn_failed: why
  int pid = 0;
  std::int64_t start_ns = 0;  // wall clock
  std::int64_t end_ns = 0;
  std::int64_t error_file_ns = 0;  // when it wrote its error file (WorkerRecord::error_file_unix_ns); 0: none
  std::int64_t rss_kib = 0;
  bool stopped = false;  // the agent was stopping its ranks when this one ended
  // Set when the agent stopped it: how long it had written nothing, and
  // whether it was in the stopped state (WorkerRecord::silent_s, suspended).
  std::optional<std::int64_t> silent_ms;
  bool suspended = false;
  bool stalled = false;
  // What it ran, for the report's hints (WorkerRecord::command, ...).
  std::string command;
  std::string program;
  std::string path_python;
  friend bool operator==(const Exited&, const Exited&) = default;
};

// Both ways: liveness; a peer silent past the timeout is lost. No fields.
struct Heartbeat {
  static constexpr MessageType kType = MessageType::heartbeat;
  friend bool operator==(const Heartbeat&, const Heartbeat&) = default;
};

// head -> agent: stop every rank (SIGTERM, grace, SIGKILL); kill: SIGKILL now;
// stacks: take the live ranks' stacks first (Stacks, request 0), as for a
// failure, a stall or a timeout on the node itself (not for an interrupt).
// agent -> head: the agent got a signal (reason says which); kill and
// stacks are false.
struct Stop {
  static constexpr MessageType kType = MessageType::stop;
  std::string reason;
  bool kill = false;
  bool stacks = false;
  friend bool operator==(const Stop&, const Stop&) = default;
};

// head -> agent: take the live ranks' stacks now and answer with Stacks of
// the same request (> 0); nothing stops (flowrun stacks, SIGQUIT).
struct TakeStacks {
  static constexpr MessageType kType = MessageType::take_stacks;
  int request = 0;
  friend bool operator==(const TakeStacks&, const TakeStacks&) = default;
};

// One rank of Stacks: py-spy's text (at most kMaxStackDumpBytes of it), or
// the kernel's words, or why there is none.
struct StackEntry {
  int rank = 0;
  std::string dump;
  std::string kernel;
  std::string missing;
  friend bool operator==(const StackEntry&, const StackEntry&) = default;
};

// agent -> head: the stacks of the node's live ranks, taken before its stop's
// signals (request 0) or for TakeStacks (its request). On the wire each rank
// is one field "r0", "r1", ... after "ranks" (their count), as in Start.
struct Stacks {
  static constexpr MessageType kType = MessageType::stacks;
  int request = 0;
  std::string source;  // "py-spy" or "kernel"
  std::vector<StackEntry> ranks;
  friend bool operator==(const Stacks&, const Stacks&) = default;
};

// agent -> head: ranks of this node wrote nothing for the step's
// stall_timeout; the agent is stopping them. On the wire one field
// "ranks": a line "RANK SILENT_MS SUSPENDED\n" per rank.
struct Stalled {
  static constexpr MessageType kType = MessageType::stalled;
  struct Rank {
    int rank = 0;
    std::int64_t silent_ms = 0;
    bool suspended = false;
    friend bool operator==(const Rank&, const Rank&) = default;
  };
  std::vector<Rank> ranks;
  friend bool operator==(const Stalled&, const Stalled&) = default;
};

// agent -> head: what the samples of this node's ranks found so far in the
// attempt (Assign::sample_ms): each rank's tally whole, replacing the last
// one sent (RankShare's fields). On the wire one field "ranks": per rank a
// line "RANK SAMPLES WAITS FRAMES IDLES BLOCKED_US SPAN_US", then FRAMES
// lines "COUNT WHERE" (WHERE without a newline).
struct Shares {
  static constexpr MessageType kType = MessageType::shares;
  struct Rank {
    int rank = 0;
    std::int64_t samples = 0, waits = 0;
    std::vector<std::pair<std::string, std::int64_t>> frames;
    std::int64_t idles = 0, blocked_us = 0, span_us = 0;  // protocol 14
    friend bool operator==(const Rank&, const Rank&) = default;
  };
  int attempt = 0;
  std::vector<Rank> ranks;
  friend bool operator==(const Shares&, const Shares&) = default;
};

// head -> agent: sample this node's ranks `rate` times as often as
// Assign::sample_ms says (1: as it says), from the next sample on. The head
// asks for more while its tally of every node's ranks holds a suspect it has
// not named yet, and for 1 again once it named one or the suspicion went.
struct SampleRate {
  static constexpr MessageType kType = MessageType::sample_rate;
  int attempt = 0;
  int rate = 1;
  friend bool operator==(const SampleRate&, const SampleRate&) = default;
};

// agent -> head: a file a rank wrote, for the join step (error.json or
// out/...); its chunks follow in order, then UploadEnd.
struct UploadBegin {
  static constexpr MessageType kType = MessageType::upload_begin;
  int rank = 0;
  std::string path;  // checked by safe_relative_path at the head
  std::int64_t size = 0;
  friend bool operator==(const UploadBegin&, const UploadBegin&) = default;
};

// agent -> head: at most kMaxChunkBytes of the file. Sent and read without a
// copy of the data: upload_chunk_frame_to_fill and upload_chunk_data.
struct UploadChunk {
  static constexpr MessageType kType = MessageType::upload_chunk;
  std::string data;
  friend bool operator==(const UploadChunk&, const UploadChunk&) = default;
};

// agent -> head: the file is complete; the head checks the size and the checksum.
struct UploadEnd {
  static constexpr MessageType kType = MessageType::upload_end;
  std::string path;
  std::string crc32c;  // Crc32c::hex() of the data, each hole as upload_hole_crc_bytes
  friend bool operator==(const UploadEnd&, const UploadEnd&) = default;
};

// agent -> head, between UploadBegin and UploadEnd: the next `bytes` bytes of
// the file are a hole (zeros the file system does not store), so they are
// not sent, and the head leaves a hole there too: a rank's sparse file (or
// its `truncate -s 1T`) costs the head's disk what it cost the node's, and
// the network nothing. Counted in the size like data.
struct UploadHole {
  static constexpr MessageType kType = MessageType::upload_hole;
  std::int64_t bytes = 0;  // > 0
  friend bool operator==(const UploadHole&, const UploadHole&) = default;
};

// What a hole of `bytes` adds to an upload's checksum, on both sides: its
// length (8 bytes, big-endian) after a NUL, so that where the holes are and
// how long is checked like the data.
std::string upload_hole_crc_bytes(std::int64_t bytes);

// Both ways: orderly close; the sender closes after it. From the head:
// whether the step succeeded (an agent of flowrun run exits with it). To an
// agent that stays (Hello::stays), the head says either that it keeps the
// link for the flow's next parallel step (keep: the agent ends this step
// and waits, and the head does not close), or that the flow ended with exit
// code flow_exit, which the agent exits with, so that its pod succeeds or
// fails with the flow.
struct Bye {
  static constexpr MessageType kType = MessageType::bye;
  bool succeeded = false;
  bool keep = false;
  int flow_exit = -1;  // -1: the flow goes on, or the agent does not stay
  friend bool operator==(const Bye&, const Bye&) = default;
};

// agent -> head: every rank of the attempt ended and its uploads are sent.
struct Done {
  static constexpr MessageType kType = MessageType::done;
  int attempt = 0;
  std::vector<std::string> errors;  // what went wrong on the node (uploads, scratch directory)
  friend bool operator==(const Done&, const Done&) = default;
};

// ---- A multi-node step's preflight (between Ready and Start) ---------------

// head -> agent: run flowrun doctor's NCCL check on these GPUs as ranks
// first_rank.. of nranks (NcclPart), with the sizes of AllReduceSweep. A Stop while
// it runs kills the check.
struct Preflight {
  static constexpr MessageType kType = MessageType::preflight;
  std::vector<int> devices;  // on the wire "0,1,2"
  int nranks = 0;
  int first_rank = 0;
  std::string nccl_id;  // "make" (node 0) or the id node 0's check made
  std::uint64_t min_bytes = 0;
  std::uint64_t max_bytes = 0;
  int factor = 0;
  int warmup = 0;
  int iters = 0;
  int timeout_s = 0;
  friend bool operator==(const Preflight&, const Preflight&) = default;
};

// agent -> head: node 0's check made the communicator's id.
struct PreflightId {
  static constexpr MessageType kType = MessageType::preflight_id;
  std::string nccl_id;
  friend bool operator==(const PreflightId&, const PreflightId&) = default;
};

// agent -> head: the node's findings, a flowrun doctor --json report.
struct PreflightDone {
  static constexpr MessageType kType = MessageType::preflight_done;
  std::string facts;
  friend bool operator==(const PreflightDone&, const PreflightDone&) = default;
};

// head -> agent: give this signal ("SIGUSR1" or "SIGUSR2") to the main process
// of every rank of the node; nothing stops (Slurm's --signal, Lightning's requeue).
struct Signal {
  static constexpr MessageType kType = MessageType::signal;
  std::string signal;
  friend bool operator==(const Signal&, const Signal&) = default;
};

// ---- Shipping a step's inputs (between Ready and Start) --------------------
//
// A node that does not share the head's workdir (its Ready said the marker
// was not there) gets what its ranks need from the head, file by file: each
// is ShipBegin, its ShipChunks in order, then ShipEnd; ShipDone ends the
// shipment and the agent answers it with ShipAck. The agent writes the
// files beneath its private scratch directory (work/), where its ranks then
// run, and checks each file's size and CRC-32C.

// head -> agent: a file of the shipment; its chunks follow.
struct ShipBegin {
  static constexpr MessageType kType = MessageType::ship_begin;
  std::string path;        // relative to the workdir; checked by safe_relative_path at the agent
  std::int64_t bytes = 0;  // its size
  int mode = 0;            // its permission bits (the agent keeps at most 0755 of them)
  friend bool operator==(const ShipBegin&, const ShipBegin&) = default;
};

// head -> agent: the next bytes of the file (at most 256 KiB a chunk). Sent
// and read without a copy of the data: ship_chunk_frame_to_fill and
// ship_chunk_data.
struct ShipChunk {
  static constexpr MessageType kType = MessageType::ship_chunk;
  std::string data;
  friend bool operator==(const ShipChunk&, const ShipChunk&) = default;
};

// head -> agent: the file is complete; the agent checks its size and checksum.
struct ShipEnd {
  static constexpr MessageType kType = MessageType::ship_end;
  std::string crc32c;  // Crc32c::hex() of the file's bytes
  friend bool operator==(const ShipEnd&, const ShipEnd&) = default;
};

// head -> agent: the shipment is complete: `files` files of `bytes` bytes
// in all, which the agent counts too. Answered with ShipAck.
struct ShipDone {
  static constexpr MessageType kType = MessageType::ship_done;
  std::int64_t files = 0;
  std::int64_t bytes = 0;
  friend bool operator==(const ShipDone&, const ShipDone&) = default;
};

// agent -> head: the shipment is written (ok), or the first thing that went
// wrong with it, naming the file ("data/x.txt: SHA-256 differs from the
// head's"); the step then fails with it.
struct ShipAck {
  static constexpr MessageType kType = MessageType::ship_ack;
  bool ok = false;
  std::string error;
  friend bool operator==(const ShipAck&, const ShipAck&) = default;
};

// ---- Encoding and decoding ---------------------------------------------------

// Every message, in MessageType order: the alternative at index i is the
// message of type i + 1.
using Message =
    std::variant<Hello, Challenge, Auth, Welcome, Refused, Assign, Start, Output, Exited, Heartbeat, Stop,
                 UploadBegin, UploadChunk, UploadEnd, Bye, Ready, Done, Preflight, PreflightId, PreflightDone,
                 Signal, Stalled, TakeStacks, Stacks, UploadHole, ShipBegin, ShipChunk, ShipEnd, ShipDone,
                 ShipAck, Shares, SampleRate>;

// The frame of each message. Throws flowrun::Error only where the message
// cannot be written (a list item with a NUL, a list of one empty item): a
// bug in the sender.
Frame encode(const Hello& m);
Frame encode(const Challenge& m);
Frame encode(const Auth& m);
Frame encode(const Welcome& m);
Frame encode(const Refused& m);
Frame encode(const Assign& m);
Frame encode(const Ready& m);
Frame encode(const Start& m);
Frame encode(const Output& m);
Frame encode(const Exited& m);
Frame encode(const Heartbeat& m);
Frame encode(const Stop& m);
Frame encode(const Stalled& m);
Frame encode(const UploadBegin& m);
Frame encode(const UploadChunk& m);
Frame encode(const UploadEnd& m);
Frame encode(const UploadHole& m);
Frame encode(const Bye& m);
Frame encode(const Done& m);
Frame encode(const Preflight& m);
Frame encode(const PreflightId& m);
Frame encode(const PreflightDone& m);
Frame encode(const Signal& m);
Frame encode(const TakeStacks& m);
Frame encode(const Stacks& m);
Frame encode(const ShipBegin& m);
Frame encode(const ShipChunk& m);
Frame encode(const ShipEnd& m);
Frame encode(const ShipDone& m);
Frame encode(const ShipAck& m);
Frame encode(const Shares& m);
Frame encode(const SampleRate& m);
Frame encode(const Message& m);

// The message in `frame`, or nullopt with *why set (never a throw), e.g.
//   "truncated payload at byte 9: a length needs 4 bytes, 2 are left"
//   "field 'code' is missing"
//   "field 'code' is 'x', not a number"
//   "field 'kind' is 'dozed', not exited, signaled or spawn_failed"
//   "unexpected field 'colour'"
//   "start field 'r0': field 'devices' is missing"
// The caller names the message: "malformed exited: field 'code' is missing".
std::optional<Message> decode_message(const Frame& frame, std::string* why);

// The type of a message (its alternative's kType).
MessageType type_of(const Message& m);

// The data of an upload_chunk payload as a view into it (no copy), or
// nullopt when the payload is not one field "data" (decode_message says why).
std::optional<std::string_view> upload_chunk_data(std::string_view payload);

// The same for ship_chunk (the head's shipment to an agent).
std::optional<std::string_view> ship_chunk_data(std::string_view payload);

// An upload_chunk or ship_chunk frame whose data is its last `bytes` bytes,
// zeros for the sender to read the file into in place (no copy from a
// buffer): the same bytes as encode(UploadChunk{data}) once filled with
// `data`. chunk_frame_cut shortens one to its first `bytes` of data (a
// short read).
std::string upload_chunk_frame_to_fill(std::size_t bytes);
std::string ship_chunk_frame_to_fill(std::size_t bytes);
void chunk_frame_cut(std::string& frame, std::size_t bytes);

// A frame as the bytes to send (encode_frame of its type and payload).
std::string to_wire(const Frame& frame);

}  // namespace flowrun
