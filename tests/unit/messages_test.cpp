// The control plane's messages: every one survives encode and decode
// unchanged, and a payload that is not one is refused with the reason.
#include "flowrun/messages.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "flowrun/error.h"
#include "flowrun/text.h"

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
  exited.error_file_ns = 1'700'000'099'750'000'001;
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
  assign.node_checks = true;
  assign.node_gpus = 8;
  assign.python = "/usr/bin/python3";
  assign.node0_name = "node-a";
  assign.node0_address = "10.0.0.2";
  assign.node0_port = 40123;
  Ready checked{true, "", "10.0.0.4", 0, 7, {}, 0};
  checked.checks = {NodeCheck{"gpu_count", false, "NVML reports 7 GPUs where the plan expects 8"},
                    NodeCheck{"scratch_space", true, "12.5 GiB free in /tmp"}};
  checked.check_ms = 431;
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
      Hello{"node-a", "0.1.0", "0123456789abcdef0123456789abcdef", -1, 12345, 8, true, "10.0.0.2", 40123},
      Challenge{"fedcba9876543210fedcba9876543210"},
      Auth{std::string(64, 'a')},
      Welcome{std::string(64, 'b'), 3, 2500, 10'000},
      Refused{"wrong token"},
      assign,
      no_stall,
      Ready{true, "", "10.0.0.2", 29500, 8, {}, 0},
      Ready{false, "/shared/work/.flowrun-marker: No such file or directory", "10.0.0.3", 0, 0, {}, 0},
      checked,
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
      Bye{true, true, -1},
      Bye{false, false, 3},
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
      ShipBegin{"data/x.txt", 1'048'577, 0755},
      ShipChunk{"\0\1\2 binary"s},
      ShipEnd{"e3069283"},
      ShipDone{3, 1'258'291},
      ShipAck{true, ""},
      ShipAck{false, "data/x.txt: its checksum differs from the head's"},
      Shares{2,
             {{0,
               40,
               30,
               {{"load_batch (data.py:88)", 6}, {"forward (train.py:35)", 4}},
               34,
               21000000,
               60000000},
              {1, 3, 3, {}, 3, 0, 0}}},
      Shares{0, {}},
      SampleRate{3, 8},
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

// Every sample's frame as protocol 12 writes it (length, version, type, then
// each field's length and bytes), in hex, in the order of samples(). A change
// to how any message is written shows here first: one that is meant needs a
// new protocol version (protocol.h), not new bytes under this one.
const std::vector<std::pair<std::string_view, std::string>> kGoldenFrames = {
    {"hello",
     "000000c11001000000046e6f6465000000066e6f64652d6100000007666c6f7772756e00000005302e312e3000000005"
     "6e6f6e6365000000203031323334353637383961626364656630313233343536373839616263646566000000096e6f64"
     "655f72616e6b000000022d31000000037069640000000531323334350000000467707573000000013800000005737461"
     "7973000000013100000007616464726573730000000831302e302e302e320000000a72656163685f706f727400000005"
     "3430313233"},
    {"challenge",
     "0000002f1002000000056e6f6e6365000000206665646362613938373635343332313066656463626139383736353433"
     "323130"},
    {"auth",
     "0000004f10030000000570726f6f66000000406161616161616161616161616161616161616161616161616161616161"
     "6161616161616161616161616161616161616161616161616161616161616161616161"},
    {"welcome",
     "0000009010040000000570726f6f66000000406262626262626262626262626262626262626262626262626262626262"
     "6262626262626262626262626262626262626262626262626262626262626262626262000000096e6f64655f72616e6b"
     "00000001330000000c6865617274626561745f6d7300000004323530300000000a74696d656f75745f6d730000000531"
     "30303030"},
    {"refused", "0000001b100500000006726561736f6e0000000b77726f6e6720746f6b656e"},
    {"assign",
     "000001bd1006000000047374657000000005747261696e0000000672756e5f69640000001432303236313230312d3132"
     "303030302d6162313200000007617474656d70740000000132000000096e6f64655f72616e6b0000000131000000056e"
     "6f646573000000013400000007776f726b6469720000000c2f7368617265642f776f726b0000000b6d61726b65725f70"
     "6174680000001c2f7368617265642f776f726b2f2e666c6f7772756e2d6d61726b65720000000b6d61726b65725f7465"
     "7874000000077365637265740a0000000977616e745f706f727400000001310000000867726163655f6d730000000531"
     "30303030000000087374616c6c5f6d73000000063630303030300000000c666f72656e736963735f6d73000000013000"
     "00000973616d706c655f6d7300000001300000000b6e6f64655f636865636b730000000131000000096e6f64655f6770"
     "7573000000013800000006707974686f6e000000102f7573722f62696e2f707974686f6e330000000a6e6f6465305f6e"
     "616d65000000066e6f64652d610000000d6e6f6465305f616464726573730000000831302e302e302e320000000a6e6f"
     "6465305f706f7274000000053430313233"},
    {"assign",
     "000001961006000000047374657000000005747261696e0000000672756e5f69640000001432303236313230312d3132"
     "303030302d6162313200000007617474656d70740000000132000000096e6f64655f72616e6b0000000131000000056e"
     "6f646573000000013400000007776f726b6469720000000c2f7368617265642f776f726b0000000b6d61726b65725f70"
     "6174680000001c2f7368617265642f776f726b2f2e666c6f7772756e2d6d61726b65720000000b6d61726b65725f7465"
     "7874000000077365637265740a0000000977616e745f706f727400000001300000000867726163655f6d730000000531"
     "30303030000000087374616c6c5f6d73000000000000000c666f72656e736963735f6d7300000001300000000973616d"
     "706c655f6d7300000001300000000b6e6f64655f636865636b730000000130000000096e6f64655f6770757300000002"
     "2d3100000006707974686f6e000000000000000a6e6f6465305f6e616d65000000000000000d6e6f6465305f61646472"
     "657373000000000000000a6e6f6465305f706f72740000000130"},
    {"ready",
     "0000007e10100000000a776f726b6469725f6f6b00000001310000000d776f726b6469725f6572726f72000000000000"
     "0007616464726573730000000831302e302e302e3200000004706f727400000005323935303000000004677075730000"
     "00013800000008636865636b5f6d7300000001300000000572616e6b730000000130"},
    {"ready",
     "000000b110100000000a776f726b6469725f6f6b00000001300000000d776f726b6469725f6572726f72000000372f73"
     "68617265642f776f726b2f2e666c6f7772756e2d6d61726b65723a204e6f20737563682066696c65206f722064697265"
     "63746f727900000007616464726573730000000831302e302e302e3300000004706f7274000000013000000004677075"
     "73000000013000000008636865636b5f6d7300000001300000000572616e6b730000000130"},
    {"ready",
     "0000013110100000000a776f726b6469725f6f6b00000001310000000d776f726b6469725f6572726f72000000000000"
     "0007616464726573730000000831302e302e302e3400000004706f727400000001300000000467707573000000013700"
     "000008636865636b5f6d73000000033433310000000572616e6b7300000001320000000272300000005a000000046e61"
     "6d65000000096770755f636f756e74000000026f6b00000001300000000664657461696c0000002c4e564d4c20726570"
     "6f727473203720475055732077686572652074686520706c616e20657870656374732038000000027231000000470000"
     "00046e616d650000000d736372617463685f7370616365000000026f6b00000001310000000664657461696c00000015"
     "31322e3520476942206672656520696e202f746d70"},
    {"start",
     "00000258100700000007617474656d70740000000131000000047374657000000005747261696e0000000672756e5f69"
     "640000001432303236313230312d3132303030302d61623132000000066a6f625f6964000000066578702d3432000000"
     "04726f6c6500000007747261696e65720000000772756e5f6469720000002f2f7368617265642f776f726b2f2e666c6f"
     "7772756e2f72756e732f32303236313230312d3132303030302d6162313200000003656e7600000018444154413d2f64"
     "61746100454d5054593d0045513d613d620000000a776f726c645f73697a650000000138000000056e6f646573000000"
     "0134000000096e6f64655f72616e6b00000001320000000c6d61785f726573746172747300000001330000000b6d6173"
     "7465725f616464720000000831302e302e302e310000000b6d61737465725f706f727400000005323935303000000007"
     "6465766963657300000003736574000000146e63636c5f666c696768745f7265636f7264657200000001300000000777"
     "6f726b6469720000000c2f7368617265642f776f726b00000004617267760000001a707974686f6e3300747261696e2e"
     "7079002d2d6c7200007820790000000572616e6b7300000001320000000272300000003f0000000472616e6b00000001"
     "340000000a6c6f63616c5f72616e6b0000000130000000076465766963657300000001300000000675706c6f61640000"
     "0001310000000272310000003f0000000472616e6b00000001350000000a6c6f63616c5f72616e6b0000000131000000"
     "076465766963657300000001310000000675706c6f61640000000130"},
    {"start",
     "00000222100700000007617474656d70740000000131000000047374657000000005747261696e0000000672756e5f69"
     "640000001432303236313230312d3132303030302d61623132000000066a6f625f6964000000066578702d3432000000"
     "04726f6c6500000007747261696e65720000000772756e5f6469720000002f2f7368617265642f776f726b2f2e666c6f"
     "7772756e2f72756e732f32303236313230312d3132303030302d6162313200000003656e7600000018444154413d2f64"
     "61746100454d5054593d0045513d613d620000000a776f726c645f73697a650000000138000000056e6f646573000000"
     "0134000000096e6f64655f72616e6b00000001320000000c6d61785f726573746172747300000001330000000b6d6173"
     "7465725f616464720000000831302e302e302e310000000b6d61737465725f706f727400000005323935303000000007"
     "646576696365730000000c69665f696e68657269746564000000146e63636c5f666c696768745f7265636f7264657200"
     "0000013100000007776f726b6469720000000c2f7368617265642f776f726b00000004617267760000001a707974686f"
     "6e3300747261696e2e7079002d2d6c7200007820790000000572616e6b73000000013100000002723000000049000000"
     "0472616e6b00000001340000000a6c6f63616c5f72616e6b000000013000000007646576696365730000000b4750552d"
     "312c4750552d320000000675706c6f61640000000130"},
    {"start",
     "00000129100700000007617474656d707400000001300000000473746570000000000000000672756e5f696400000000"
     "000000066a6f625f69640000000000000004726f6c65000000000000000772756e5f6469720000000000000003656e76"
     "000000000000000a776f726c645f73697a650000000130000000056e6f6465730000000130000000096e6f64655f7261"
     "6e6b00000001300000000c6d61785f726573746172747300000001300000000b6d61737465725f616464720000000000"
     "00000b6d61737465725f706f727400000001300000000764657669636573000000056c65617665000000146e63636c5f"
     "666c696768745f7265636f72646572000000013000000007776f726b6469720000000000000004617267760000000000"
     "00000572616e6b730000000130"},
    {"output",
     "0000003c10080000000472616e6b00000001330000000673747265616d00000006737464657272000000046461746100"
     "00000d6c6f7373200020302e31320aff"},
    {"output",
     "0000002f10080000000472616e6b00000001300000000673747265616d000000067374646f7574000000046461746100"
     "000000"},
    {"exited",
     "0000017410090000000472616e6b0000000137000000046b696e64000000087369676e616c656400000004636f646500"
     "000001390000000b737061776e5f6572726f72000000000000000370696400000004343234320000000873746172745f"
     "6e73000000133137303030303030303031323334353637383900000006656e645f6e7300000013313730303030303130"
     "303030303030303030300000000d6572726f725f66696c655f6e73000000133137303030303030393937353030303030"
     "3031000000077273735f6b696200000007343139343330340000000773746f7070656400000001310000000973696c65"
     "6e745f6d730000000536313030300000000973757370656e6465640000000131000000077374616c6c65640000000131"
     "00000007636f6d6d616e6400000007707974686f6e330000000770726f6772616d000000102f7573722f62696e2f7079"
     "74686f6e330000000b706174685f707974686f6e000000102f7573722f62696e2f707974686f6e33"},
    {"exited",
     "0000012f10090000000472616e6b0000000130000000046b696e640000000c737061776e5f6661696c65640000000463"
     "6f646500000001310000000b737061776e5f6572726f7200000022707974686f6e343a204e6f20737563682066696c65"
     "206f72206469726563746f72790000000370696400000001300000000873746172745f6e73000000013000000006656e"
     "645f6e7300000001300000000d6572726f725f66696c655f6e730000000130000000077273735f6b6962000000013000"
     "00000773746f7070656400000001300000000973696c656e745f6d73000000000000000973757370656e646564000000"
     "0130000000077374616c6c6564000000013000000007636f6d6d616e64000000000000000770726f6772616d00000000"
     "0000000b706174685f707974686f6e00000000"},
    {"heartbeat", "00000002100a"},
    {"stop",
     "00000046100b00000006726561736f6e0000001a697473206167656e74207265636569766564205349475445524d0000"
     "00046b696c6c000000013000000006737461636b730000000130"},
    {"stop",
     "00000032100b00000006726561736f6e000000066b696c6c6564000000046b696c6c000000013100000006737461636b"
     "730000000130"},
    {"stop",
     "0000004f100b00000006726561736f6e0000002372616e6b2031206f6e206e6f64652d61206578697465642077697468"
     "20636f64652033000000046b696c6c000000013000000006737461636b730000000131"},
    {"stalled", "0000002810160000000572616e6b73000000193020363130303020300a31203336303030303030303020310a"},
    {"stalled", "0000000f10160000000572616e6b7300000000"},
    {"upload_begin",
     "0000003f100c0000000472616e6b000000013200000004706174680000000e6f75742f726573756c742e747874000000"
     "0473697a650000000a35303030303030303030"},
    {"upload_chunk", "00000018100d00000004646174610000000a0001022062696e617279"},
    {"upload_end",
     "00000032100e00000004706174680000000e6f75742f726573756c742e74787400000006637263333263000000086533"
     "303639323833"},
    {"upload_hole", "0000001c10190000000562797465730000000d31303939353131363237373736"},
    {"bye",
     "00000034100f000000097375636365656465640000000131000000046b656570000000013000000009666c6f775f6578"
     "6974000000022d31"},
    {"bye",
     "00000034100f000000097375636365656465640000000130000000046b656570000000013000000009666c6f775f6578"
     "6974000000022d31"},
    {"bye",
     "00000034100f000000097375636365656465640000000131000000046b656570000000013100000009666c6f775f6578"
     "6974000000022d31"},
    {"bye",
     "00000033100f000000097375636365656465640000000130000000046b656570000000013000000009666c6f775f6578"
     "69740000000133"},
    {"done",
     "00000050101100000007617474656d70740000000131000000066572726f72730000003072616e6b20323a2063616e6e"
     "6f742072656164206f75742f783a205065726d697373696f6e2064656e6965640074776f"},
    {"done", "00000020101100000007617474656d70740000000130000000066572726f727300000000"},
    {"preflight",
     "000000bd1012000000076465766963657300000007302c312c322c33000000066e72616e6b7300000001380000000a66"
     "697273745f72616e6b0000000134000000076e63636c5f6964000000046d616b65000000096d696e5f62797465730000"
     "000138000000096d61785f62797465730000000d3130393935313136323737373600000006666163746f720000000132"
     "000000067761726d757000000001350000000569746572730000000232300000000974696d656f75745f730000000236"
     "30"},
    {"preflight_id",
     "000001111013000000076e63636c5f696400000100666666666666666666666666666666666666666666666666666666"
     "666666666666666666666666666666666666666666666666666666666666666666666666666666666666666666666666"
     "666666666666666666666666666666666666666666666666666666666666666666666666666666666666666666666666"
     "666666666666666666666666666666666666666666666666666666666666666666666666666666666666666666666666"
     "666666666666666666666666666666666666666666666666666666666666666666666666666666666666666666666666"
     "66666666666666666666666666666666666666666666666666666666666666666666666666"},
    {"preflight_done", "000000251014000000056661637473000000167b22686f73746e616d65223a20226e6f64652d61227d"},
    {"signal", "000000171015000000067369676e616c0000000753494755535231"},
    {"take_stacks", "00000012101700000007726571756573740000000133"},
    {"stacks",
     "000000fd10180000000772657175657374000000013000000006736f757263650000000670792d737079000000057261"
     "6e6b730000000132000000027230000000660000000472616e6b00000001320000000464756d70000000305468726561"
     "642037202869646c65293a20224d61696e546872656164220a202020206620282f772f742e70793a31290a000000066b"
     "65726e656c00000000000000076d697373696e67000000000000000272310000004f0000000472616e6b000000013300"
     "00000464756d7000000000000000066b65726e656c00000000000000076d697373696e670000001970792d7370793a20"
     "5065726d697373696f6e2064656e696564"},
    {"stacks",
     "0000009b10180000000772657175657374000000013400000006736f75726365000000066b65726e656c000000057261"
     "6e6b7300000001310000000272300000005d0000000472616e6b00000001310000000464756d7000000000000000066b"
     "65726e656c0000002766757465785f776169745f71756575652028737461746520532c2073797363616c6c2032303229"
     "000000076d697373696e6700000000"},
    {"stacks",
     "0000002e10180000000772657175657374000000013500000006736f75726365000000000000000572616e6b73000000"
     "0130"},
    {"ship_begin",
     "0000003b101a00000004706174680000000a646174612f782e7478740000000562797465730000000731303438353737"
     "000000046d6f646500000003343933"},
    {"ship_chunk", "00000018101b00000004646174610000000a0001022062696e617279"},
    {"ship_end", "00000018101c00000006637263333263000000086533303639323833"},
    {"ship_done", "00000024101d0000000566696c657300000001330000000562797465730000000731323538323931"},
    {"ship_ack", "0000001a101e000000026f6b0000000131000000056572726f7200000000"},
    {"ship_ack",
     "0000004a101e000000026f6b0000000130000000056572726f7200000030646174612f782e7478743a20697473206368"
     "65636b73756d20646966666572732066726f6d2074686520686561642773"},
    {"shares",
     "0000007e101f00000007617474656d707400000001320000000572616e6b730000005f30203430203330203220333420"
     "32313030303030302036303030303030300a36206c6f61645f62617463682028646174612e70793a3838290a3420666f"
     "72776172642028747261696e2e70793a3335290a312033203320302033203020300a"},
    {"shares", "0000001f101f00000007617474656d707400000001300000000572616e6b7300000000"},
    {"sample_rate", "0000001f102000000007617474656d7074000000013300000004726174650000000138"},
};

TEST_CASE("every message's frame is byte for byte what protocol 16 sends", "[messages]") {
  const std::vector<Message> messages = samples();
  REQUIRE(messages.size() == kGoldenFrames.size());
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const auto& [name, frame] = kGoldenFrames[i];
    INFO("sample " << i << ": " << name);
    CHECK(message_type_name(type_of(messages[i])) == name);
    CHECK(hex(to_wire(encode(messages[i]))) == frame);
  }
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
                                         "error_file_ns", "rss_kib", "stopped", "silent_ms", "suspended",
                                         "stalled", "command", "program", "path_python"});
  CHECK(exited[1].second == "exited");
  CHECK(exited[10].second == "");  // silent_ms: none
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

TEST_CASE("upload chunks come in without a copy, as the same bytes", "[messages]") {
  const std::string data = "chunk \0 of a file"s;
  const Frame frame = encode(UploadChunk{data});
  CHECK(upload_chunk_data(frame.payload) == std::optional<std::string_view>(data));
  CHECK_FALSE(upload_chunk_data(encode_fields({{"data", "x"}, {"more", "y"}})));
}

TEST_CASE("a chunk frame read into in place, and cut after a short read, is the frame of its bytes",
          "[messages]") {
  const std::string data = "chunk \0 of a file"s;
  std::string ship = ship_chunk_frame_to_fill(data.size());
  data.copy(ship.data() + (ship.size() - data.size()), data.size());
  CHECK(ship == to_wire(encode(ShipChunk{data})));
  std::string upload = upload_chunk_frame_to_fill(data.size() + 100);
  data.copy(upload.data() + (upload.size() - 100 - data.size()), data.size());
  chunk_frame_cut(upload, data.size());
  CHECK(upload == to_wire(encode(UploadChunk{data})));
  chunk_frame_cut(upload, 0);
  CHECK(upload == to_wire(encode(UploadChunk{""})));
  CHECK_THROWS(chunk_frame_cut(upload, 1));
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

TEST_CASE("a node's shares are checked line by line", "[messages]") {
  const auto shares = [](const std::string& lines) {
    return refusal(MessageType::shares, {{"attempt", "0"}, {"ranks", lines}});
  };
  const std::string form = "RANK SAMPLES WAITS FRAMES IDLES BLOCKED_US SPAN_US";
  CHECK(shares("1 2 3\n") == "field 'ranks': line 1 '1 2 3' is not '" + form + "'");
  CHECK(shares("1 2 1 0\n") == "field 'ranks': line 1 '1 2 1 0' is not '" + form + "'");  // protocol 13's
  CHECK(shares("1 2 1 1 1 0 0\n") == "field 'ranks': 1 frame lines missing");
  CHECK(shares("1 2 1 1 1 0 0\nx f (a.py:1)\n") == "field 'ranks' is 'x', not a number");
  CHECK(shares("1 2 1 1 1 0 0\nnospace\n") == "field 'ranks': line 2 'nospace' is not 'COUNT WHERE'");
  CHECK(shares("1 9 1 65 1 0 0\n") == "field 'ranks': line 1 has 65 frames; expected 0 to 64");
  CHECK(shares("1 9 1 -1 1 0 0\n") == "field 'ranks': line 1 has -1 frames; expected 0 to 64");
  CHECK(shares("1 9 1 0 1 x 0\n") == "field 'ranks' is 'x', not a number");
  CHECK(shares("1 2 1 0 1 0 0") == "field 'ranks': line 1 '1 2 1 0 1 0 0' is not '" + form + "'");
  // A place with spaces and colons comes back whole; a newline in one goes as a space.
  const Shares sent{1, {{4, 10, 2, {{"f (/a b/c.py:3)", 8}, {"g\nh", 1}}, 5, 1'234'567, 9'876'543}}};
  const Message back = through_the_wire(sent);
  const auto& ranks = std::get<Shares>(back).ranks;
  REQUIRE(ranks.size() == 1);
  CHECK(ranks[0].frames ==
        std::vector<std::pair<std::string, std::int64_t>>{{"f (/a b/c.py:3)", 8}, {"g h", 1}});
  CHECK(ranks[0].idles == 5);
  CHECK(ranks[0].blocked_us == 1'234'567);
  CHECK(ranks[0].span_us == 9'876'543);
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
