// The control plane's messages: every one survives encode and decode
// unchanged, and a payload that is not one is refused with the reason.
#include "flowrun/messages.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <vector>

#include "flowrun/error.h"

using namespace flowrun;
using namespace std::string_literals;

namespace {

// One of every message, with values that are not the defaults: negative and
// 64-bit numbers, bytes that are not text, empty and absent optionals.
std::vector<Message> samples() {
  Exited exited;
  exited.rank = 7;
  exited.kind = Exited::Kind::signaled;
  exited.code = 9;
  exited.spawn_error = "";
  exited.pid = 4242;
  exited.start_ns = 1'700'000'000'123'456'789;
  exited.end_ns = 1'700'000'100'000'000'000;
  exited.rss_kib = 1 << 22;
  exited.stopped = true;
  exited.silent_ms = 61'000;
  exited.suspended = true;
  exited.stalled = true;
  exited.command = "python3";
  exited.program = "/usr/bin/python3";
  exited.path_python = "/usr/bin/python3";
  Exited spawn_failed;
  spawn_failed.kind = Exited::Kind::spawn_failed;
  spawn_failed.code = 1;
  spawn_failed.spawn_error = "python4: No such file or directory";
  Assign assign{};
  assign.step = "train";
  assign.run_id = "20261201-120000-ab12";
  assign.attempt = 2;
  assign.node_rank = 1;
  assign.nodes = 4;
  assign.workdir = "/shared/work";
  assign.marker_path = "/shared/work/.flowrun-marker";
  assign.marker_text = "secret\n";
  assign.want_port = true;
  assign.grace_ms = 10'000;
  assign.stall_ms = 600'000;
  Assign no_stall = assign;
  no_stall.stall_ms.reset();
  no_stall.want_port = false;
  Start start;
  start.attempt = 1;
  start.step = "train";
  start.run_id = "20261201-120000-ab12";
  start.job_id = "exp-42";
  start.role = "trainer";
  start.run_dir = "/shared/work/.flowrun/runs/20261201-120000-ab12";
  start.env = {"DATA=/data", "EMPTY=", "EQ=a=b"};
  start.world_size = 8;
  start.nodes = 4;
  start.node_rank = 2;
  start.max_restarts = 3;
  start.master_addr = "10.0.0.1";
  start.master_port = 29500;
  start.devices = Start::Devices::set;
  start.workdir = "/shared/work";
  start.argv = {"python3", "train.py", "--lr", "", "x y"};
  start.ranks = {StartRank{4, 0, "0", true}, StartRank{5, 1, "1", false}};
  Start if_inherited = start;
  if_inherited.devices = Start::Devices::if_inherited;
  if_inherited.nccl_flight_recorder = true;
  if_inherited.ranks = {StartRank{4, 0, "GPU-1,GPU-2", false}};
  Start no_ranks;
  Preflight preflight;
  preflight.devices = {0, 1, 2, 3};
  preflight.nranks = 8;
  preflight.first_rank = 4;
  preflight.nccl_id = "make";
  preflight.min_bytes = 8;
  preflight.max_bytes = std::uint64_t{1} << 40;
  preflight.factor = 2;
  preflight.warmup = 5;
  preflight.iters = 20;
  preflight.timeout_s = 60;
  return {
      Hello{"node-a", "0.1.0", "0123456789abcdef0123456789abcdef", -1, 12345, 8},
      Challenge{"fedcba9876543210fedcba9876543210"},
      Auth{std::string(64, 'a')},
      Welcome{std::string(64, 'b'), 3, 2500, 10'000},
      Refused{"wrong token"},
      assign,
      no_stall,
      Ready{true, "", "10.0.0.2", 29500, 8},
      Ready{false, "/shared/work/.flowrun-marker: No such file or directory", "10.0.0.3", 0, 0},
      start,
      if_inherited,
      no_ranks,
      Output{3, true, "loss \0 0.12\n\xff"s},
      Output{0, false, ""},
      exited,
      spawn_failed,
      Heartbeat{},
      Stop{"its agent received SIGTERM", false, false},
      Stop{"killed", true, false},
      Stop{"rank 1 on node-a exited with code 3", false, true},
      Stalled{{{0, 61'000, false}, {1, 3'600'000'000, true}}},
      Stalled{},
      UploadBegin{2, "out/result.txt", 5'000'000'000},
      UploadChunk{"\0\1\2 binary"s},
      UploadEnd{"out/result.txt", "e3069283"},
      UploadHole{1LL << 40},
      Bye{true},
      Bye{false},
      Done{1, {"rank 2: cannot read out/x: Permission denied", "two"}},
      Done{0, {}},
      preflight,
      PreflightId{std::string(256, 'f')},
      PreflightDone{R"({"hostname": "node-a"})"},
      Signal{"SIGUSR1"},
      TakeStacks{3},
      Stacks{0,
             "py-spy",
             {{2, "Thread 7 (idle): \"MainThread\"\n    f (/w/t.py:1)\n", "", ""},
              {3, "", "", "py-spy: Permission denied"}}},
      Stacks{4, "kernel", {{1, "", "futex_wait_queue (state S, syscall 202)", ""}}},
      Stacks{5, "", {}},
  };
}

// The message a frame carries, through the wire and a FrameReader.
Message through_the_wire(const Message& m) {
  FrameReader reader("agent");
  reader.feed(to_wire(encode(m)));
  auto frame = reader.next();
  REQUIRE(frame);
  CHECK(frame->type == type_of(m));
  std::string why;
  auto decoded = decode_message(*frame, &why);
  INFO(why);
  REQUIRE(decoded);
  CHECK(why.empty());
  return *decoded;
}

// Why `fields` are refused as a message of `type`.
std::string refusal(MessageType type, const Fields& fields) {
  std::string why;
  auto decoded = decode_message(Frame{type, encode_fields(fields)}, &why);
  CHECK_FALSE(decoded);
  return why;
}

// The fields of a message, to take apart and break.
Fields fields_of(const Message& m) {
  std::string error;
  auto fields = decode_fields(encode(m).payload, &error, 1 << 16);
  REQUIRE(fields);
  return *fields;
}

Fields with(Fields fields, const std::string& key, const std::string& value) {
  for (auto& [k, v] : fields)
    if (k == key) v = value;
  return fields;
}

Fields without(Fields fields, const std::string& key) {
  std::erase_if(fields, [&](const auto& kv) { return kv.first == key; });
  return fields;
}

}  // namespace

TEST_CASE("every message comes back from the wire as it was sent", "[messages]") {
  std::set<MessageType> types;
  for (const Message& m : samples()) {
    INFO(message_type_name(type_of(m)));
    types.insert(type_of(m));
    CHECK(through_the_wire(m) == m);
    CHECK(static_cast<std::size_t>(type_of(m)) == m.index() + 1);
  }
  CHECK(types.size() == kLastMessageType);  // every message type has a sample
}

TEST_CASE("a message's fields are on the wire under their names, in order", "[messages]") {
  CHECK(encode(Stop{"killed", true, false}) ==
        Frame{MessageType::stop, encode_fields({{"reason", "killed"}, {"kill", "1"}, {"stacks", "0"}})});
  CHECK(fields_of(Stacks{2, "py-spy", {{1, "d", "", ""}}}) ==
        Fields{{"request", "2"},
               {"source", "py-spy"},
               {"ranks", "1"},
               {"r0", encode_fields({{"rank", "1"}, {"dump", "d"}, {"kernel", ""}, {"missing", ""}})}});
  CHECK(encode(Heartbeat{}) == Frame{MessageType::heartbeat, ""});
  CHECK(encode(Stalled{{{3, 1500, true}, {4, 0, false}}}).payload ==
        encode_fields({{"ranks", "3 1500 1\n4 0 0\n"}}));
  Exited e;
  e.rank = 1;
  e.code = 2;
  const Fields exited = fields_of(e);
  std::vector<std::string> keys;
  for (const auto& kv : exited) keys.push_back(kv.first);
  CHECK(keys == std::vector<std::string>{"rank", "kind", "code", "spawn_error", "pid", "start_ns", "end_ns",
                                         "rss_kib", "stopped", "silent_ms", "suspended", "stalled", "command",
                                         "program", "path_python"});
  CHECK(exited[1].second == "exited");
  CHECK(exited[9].second == "");  // silent_ms: none
  Start s;
  s.step = "train";
  s.run_id = "r1";
  s.job_id = "r1";
  s.role = "default";
  s.run_dir = "/w/.flowrun/runs/r1";
  s.env = {"A=1", "B="};
  s.world_size = 4;
  s.nodes = 2;
  s.node_rank = 1;
  s.master_addr = "10.0.0.1";
  s.master_port = 29500;
  s.devices = Start::Devices::set;
  s.workdir = "/w";
  s.argv = {"a", "b"};
  s.ranks = {StartRank{2, 0, "", true}};
  CHECK(
      fields_of(s) ==
      Fields{{"attempt", "0"},
             {"step", "train"},
             {"run_id", "r1"},
             {"job_id", "r1"},
             {"role", "default"},
             {"run_dir", "/w/.flowrun/runs/r1"},
             {"env", "A=1\0B="s},
             {"world_size", "4"},
             {"nodes", "2"},
             {"node_rank", "1"},
             {"max_restarts", "0"},
             {"master_addr", "10.0.0.1"},
             {"master_port", "29500"},
             {"devices", "set"},
             {"nccl_flight_recorder", "0"},
             {"workdir", "/w"},
             {"argv", "a\0b"s},
             {"ranks", "1"},
             {"r0", encode_fields({{"rank", "2"}, {"local_rank", "0"}, {"devices", ""}, {"upload", "1"}})}});
  CHECK(fields_of(Start{})[13] == std::pair<std::string, std::string>{"devices", "leave"});
  Preflight p;
  p.devices = {0, 3};
  CHECK(fields_of(p)[0] == std::pair<std::string, std::string>{"devices", "0,3"});
}

TEST_CASE("upload chunks go out and come in without a copy, as the same bytes", "[messages]") {
  const std::string data = "chunk \0 of a file"s;
  CHECK(encode_upload_chunk_frame(data) == to_wire(encode(UploadChunk{data})));
  const Frame frame = encode(UploadChunk{data});
  CHECK(upload_chunk_data(frame.payload) == std::optional<std::string_view>(data));
  CHECK_FALSE(upload_chunk_data(encode_fields({{"data", "x"}, {"more", "y"}})));
}

TEST_CASE("a message with a field missing is refused, naming it", "[messages]") {
  for (const Message& m : samples()) {
    const Fields fields = fields_of(m);
    for (const auto& [key, value] : fields) {
      INFO(message_type_name(type_of(m)) << " without " << key);
      CHECK(refusal(type_of(m), without(fields, key)) == "field '" + key + "' is missing");
    }
  }
}

TEST_CASE("a message with a field it does not have is refused", "[messages]") {
  Fields hello = fields_of(Hello{"n", "0.1.0", std::string(32, '0'), 0, 1, 0});
  hello.emplace_back("colour", "blue");
  CHECK(refusal(MessageType::hello, hello) == "unexpected field 'colour'");
  CHECK(refusal(MessageType::heartbeat, {{"x\n\x01", ""}}) ==
        "unexpected field 'x?"
        "?'");
}

TEST_CASE("numbers, flags and names of the wrong form are refused", "[messages]") {
  const Fields exited = fields_of(Exited{});
  CHECK(refusal(MessageType::exited, with(exited, "code", "x")) == "field 'code' is 'x', not a number");
  CHECK(refusal(MessageType::exited, with(exited, "code", "")) == "field 'code' is '', not a number");
  CHECK(refusal(MessageType::exited, with(exited, "code", "+1")) == "field 'code' is '+1', not a number");
  CHECK(refusal(MessageType::exited, with(exited, "code", " 1")) == "field 'code' is ' 1', not a number");
  CHECK(refusal(MessageType::exited, with(exited, "code", "1 ")) == "field 'code' is '1 ', not a number");
  CHECK(refusal(MessageType::exited, with(exited, "code", "007")) == "field 'code' is '007', not a number");
  CHECK(refusal(MessageType::exited, with(exited, "code", "99999999999")) ==
        "field 'code' is '99999999999', not a number in range");
  CHECK(refusal(MessageType::exited, with(exited, "end_ns", "99999999999999999999")) ==
        "field 'end_ns' is '99999999999999999999', not a number in range");
  CHECK(refusal(MessageType::exited, with(exited, "silent_ms", "soon")) ==
        "field 'silent_ms' is 'soon', not a number");
  CHECK(refusal(MessageType::exited, with(exited, "stopped", "yes")) ==
        "field 'stopped' is 'yes', not 1 or 0");
  CHECK(refusal(MessageType::exited, with(exited, "kind", "dozed")) ==
        "field 'kind' is 'dozed', not exited, signaled or spawn_failed");
  CHECK(refusal(MessageType::output, with(fields_of(Output{0, false, "x"}), "stream", "stdlog")) ==
        "field 'stream' is 'stdlog', not stdout or stderr");
  CHECK(refusal(MessageType::preflight, with(fields_of(Preflight{}), "devices", "0,x")) ==
        "field 'devices' is 'x', not a number");
  CHECK(refusal(MessageType::preflight, with(fields_of(Preflight{}), "devices", "0,,1")) ==
        "field 'devices' is '', not a number");
  CHECK(refusal(MessageType::preflight, with(fields_of(Preflight{}), "min_bytes", "-8")) ==
        "field 'min_bytes' is '-8', not a number");
  const Fields start = fields_of(Start{});
  CHECK(refusal(MessageType::start, with(start, "devices", "all")) ==
        "field 'devices' is 'all', not leave, set or if_inherited");
  CHECK(refusal(MessageType::start, with(start, "env", "A=1\0B"s)) ==
        "field 'env' has the entry 'B', not NAME=value");
  CHECK(refusal(MessageType::start, with(start, "env", "=1"s)) ==
        "field 'env' has the entry '=1', not NAME=value");
  // A peer's bytes are shown short and printable.
  CHECK(refusal(MessageType::exited, with(exited, "code", "\x1b[31m" + std::string(100, '9'))) ==
        "field 'code' is '?[31m" + std::string(59, '9') + "...', not a number");
}

TEST_CASE("a payload of another message, or no fields at all, is refused", "[messages]") {
  CHECK(refusal(MessageType::ready, fields_of(Exited{})) == "field 'workdir_ok' is missing");
  CHECK(refusal(MessageType::exited, {}) == "field 'rank' is missing");
  std::string why;
  CHECK_FALSE(decode_message(Frame{MessageType::exited, "\0\0"s}, &why));
  CHECK(why == "truncated payload at byte 0: a length needs 4 bytes, 2 are left");
  CHECK_FALSE(decode_message(Frame{static_cast<MessageType>(99), ""}, &why));
  CHECK(why == "unknown message type 99");
}

TEST_CASE("a start's ranks are checked one by one", "[messages]") {
  Start start;
  start.ranks = {StartRank{0, 0, "0", true}, StartRank{1, 1, "", false}};
  const Fields fields = fields_of(start);
  CHECK(refusal(MessageType::start, with(fields, "ranks", "3")) == "field 'r2' is missing");
  CHECK(refusal(MessageType::start, with(fields, "ranks", "1")) == "unexpected field 'r1'");
  CHECK(refusal(MessageType::start, with(fields, "ranks", "65536")) ==
        "field 'ranks' is 65536, more ranks than a start can hold");
  CHECK(refusal(MessageType::start, with(fields, "r1", encode_fields({{"rank", "1"}}))) ==
        "start field 'r1': field 'local_rank' is missing");
  CHECK(refusal(MessageType::start, with(fields, "r0", "\0"s)) ==
        "start field 'r0': truncated payload at byte 0: a length needs 4 bytes, 1 are left");
}

TEST_CASE("a stacks message's ranks are checked one by one", "[messages]") {
  const Fields fields = fields_of(Stacks{0, "py-spy", {{0, "x", "", ""}, {1, "", "", "gone"}}});
  CHECK(refusal(MessageType::stacks, with(fields, "ranks", "3")) == "field 'r2' is missing");
  CHECK(refusal(MessageType::stacks, with(fields, "ranks", "65536")) ==
        "field 'ranks' is 65536, more ranks than a stacks can hold");
  CHECK(refusal(MessageType::stacks, with(fields, "r1", encode_fields({{"rank", "1"}}))) ==
        "stacks field 'r1': field 'dump' is missing");
}

TEST_CASE("a stall report's lines are checked", "[messages]") {
  CHECK(refusal(MessageType::stalled, {{"ranks", "1 2 1\n3 4"}}) ==
        "field 'ranks': line 2 '3 4' is not 'RANK SILENT_MS SUSPENDED'");
  CHECK(refusal(MessageType::stalled, {{"ranks", "1 2 3\n"}}) ==
        "field 'ranks': line 1 '1 2 3' is not 'RANK SILENT_MS SUSPENDED'");
  CHECK(refusal(MessageType::stalled, {{"ranks", "x 2 1\n"}}) == "field 'ranks' is 'x', not a number");
  CHECK(refusal(MessageType::stalled, {{"ranks", "1 2 1\n\n"}}) ==
        "field 'ranks': line 2 '' is not 'RANK SILENT_MS SUSPENDED'");
}

TEST_CASE("what cannot be written on the wire is a bug in the sender", "[messages]") {
  CHECK_THROWS_AS(encode(Done{0, {""}}), Error);
  Start start;
  start.argv = {"a\0b"s};
  CHECK_THROWS_AS(encode(start), Error);
}

TEST_CASE("cut or flipped payloads of every message are refused or decoded, never thrown", "[messages]") {
  for (const Message& m : samples()) {
    const Frame frame = encode(m);
    for (std::size_t cut = 0; cut < frame.payload.size(); ++cut) {
      std::string why;
      auto decoded = decode_message(Frame{frame.type, frame.payload.substr(0, cut)}, &why);
      CHECK(decoded.has_value() == why.empty());
    }
    for (std::size_t at = 0; at < frame.payload.size(); at += 3) {
      Frame flipped = frame;
      flipped.payload[at] = static_cast<char>(flipped.payload[at] ^ 0x5a);
      std::string why;
      auto decoded = decode_message(flipped, &why);
      CHECK(decoded.has_value() == why.empty());
    }
  }
}

TEST_CASE("fields may come in any order; a start of many ranks comes back whole", "[messages]") {
  Fields stop = fields_of(Stop{"killed", true});
  std::reverse(stop.begin(), stop.end());
  std::string why;
  CHECK(decode_message(Frame{MessageType::stop, encode_fields(stop)}, &why) == Message(Stop{"killed", true}));
  Start big;
  big.attempt = 3;
  big.master_addr = "10.0.0.1";
  big.master_port = 29500;
  big.workdir = "/w";
  big.argv = {"python3", "train.py"};
  for (int r = 0; r < 4096; ++r) big.ranks.push_back(StartRank{r, r % 8, std::to_string(r % 8), r == 0});
  CHECK(through_the_wire(big) == Message(big));
}
