#include "flowrun/messages.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "flowrun/error.h"

#include "field_io.h"

namespace flowrun {

// ---- each message's fields, written once for both ways ----------------------
// In the order they go on the wire, under their names (messages.h). They sit
// in the namespace of the Writer and the Reader (field_io.h), whose items()
// find an item's fields() there.
namespace protocol_detail {

template <class Io, maybe_const<Hello> M>
void fields(Io& io, M& m) {
  io("node", m.node);
  io("flowrun", m.flowrun);
  io("nonce", m.nonce);
  io("node_rank", m.node_rank);
  io("pid", m.pid);
  io("gpus", m.gpus);
  io("stays", m.stays);
  io("address", m.address);
  io("reach_port", m.reach_port);
}

template <class Io, maybe_const<Challenge> M>
void fields(Io& io, M& m) {
  io("nonce", m.nonce);
}

template <class Io, maybe_const<Auth> M>
void fields(Io& io, M& m) {
  io("proof", m.proof);
}

template <class Io, maybe_const<Welcome> M>
void fields(Io& io, M& m) {
  io("proof", m.proof);
  io("node_rank", m.node_rank);
  io("heartbeat_ms", m.heartbeat_ms);
  io("timeout_ms", m.timeout_ms);
}

template <class Io, maybe_const<Refused> M>
void fields(Io& io, M& m) {
  io("reason", m.reason);
}

template <class Io, maybe_const<Assign> M>
void fields(Io& io, M& m) {
  io("step", m.step);
  io("run_id", m.run_id);
  io("attempt", m.attempt);
  io("node_rank", m.node_rank);
  io("nodes", m.nodes);
  io("workdir", m.workdir);
  io("marker_path", m.marker_path);
  io("marker_text", m.marker_text);
  io("want_port", m.want_port);
  io("grace_ms", m.grace_ms);
  io("stall_ms", m.stall_ms);
  io("forensics_ms", m.forensics_ms);
  io("sample_ms", m.sample_ms);
  io("node_checks", m.node_checks);
  io("node_gpus", m.node_gpus);
  io("python", m.python);
  io("node0_name", m.node0_name);
  io("node0_address", m.node0_address);
  io("node0_port", m.node0_port);
}

template <class Io, maybe_const<NodeCheck> M>
void fields(Io& io, M& m) {
  io("name", m.name);
  io("ok", m.ok);
  io("detail", m.detail);
}

template <class Io, maybe_const<Ready> M>
void fields(Io& io, M& m) {
  io("workdir_ok", m.workdir_ok);
  io("workdir_error", m.workdir_error);
  io("address", m.address);
  io("port", m.port);
  io("gpus", m.gpus);
  io("check_ms", m.check_ms);
  io.items("ready", m.checks);
}

template <class Io, maybe_const<StartRank> M>
void fields(Io& io, M& m) {
  io("rank", m.rank);
  io("local_rank", m.local_rank);
  io("devices", m.devices);
  io("upload", m.upload);
}

constexpr Named<Start::Devices, 3> kDeviceRules{{{
    {Start::Devices::leave, "leave"},
    {Start::Devices::set, "set"},
    {Start::Devices::if_inherited, "if_inherited"},
}}};

// Start's env: a list whose every entry is NAME=value, with a name.
std::string write_env(std::string_view key, const std::vector<std::string>& env) {
  return join_list(key, env);
}
void read_env(Reader& r, std::string_view key, std::string_view text, std::vector<std::string>& env) {
  env = split_list(text);
  for (const auto& entry : env) {
    const auto eq = entry.find('=');
    if (eq == 0 || eq == std::string::npos) {
      r.fail("field '" + std::string(key) + "' has the entry '" + shown(entry) + "', not NAME=value");
      return;
    }
  }
}
constexpr TextForm<std::vector<std::string>> kEnv{write_env, read_env};

template <class Io, maybe_const<Start> M>
void fields(Io& io, M& m) {
  io("attempt", m.attempt);
  io("step", m.step);
  io("run_id", m.run_id);
  io("job_id", m.job_id);
  io("role", m.role);
  io("run_dir", m.run_dir);
  io("env", m.env, kEnv);
  io("world_size", m.world_size);
  io("nodes", m.nodes);
  io("node_rank", m.node_rank);
  io("max_restarts", m.max_restarts);
  io("master_addr", m.master_addr);
  io("master_port", m.master_port);
  io("devices", m.devices, kDeviceRules);
  io("nccl_flight_recorder", m.nccl_flight_recorder);
  io("workdir", m.workdir);
  io("argv", m.argv);
  io.items("start", m.ranks);
}

constexpr Named<bool, 2> kStreams{{{{false, "stdout"}, {true, "stderr"}}}};

template <class Io, maybe_const<Output> M>
void fields(Io& io, M& m) {
  io("rank", m.rank);
  io("stream", m.is_stderr, kStreams);
  io("data", m.data);
}

constexpr Named<Exited::Kind, 3> kExitKinds{{{
    {Exited::Kind::exited, "exited"},
    {Exited::Kind::signaled, "signaled"},
    {Exited::Kind::spawn_failed, "spawn_failed"},
}}};

template <class Io, maybe_const<Exited> M>
void fields(Io& io, M& m) {
  io("rank", m.rank);
  io("kind", m.kind, kExitKinds);
  io("code", m.code);
  io("spawn_error", m.spawn_error);
  io("pid", m.pid);
  io("start_ns", m.start_ns);
  io("end_ns", m.end_ns);
  io("error_file_ns", m.error_file_ns);
  io("rss_kib", m.rss_kib);
  io("stopped", m.stopped);
  io("silent_ms", m.silent_ms);
  io("suspended", m.suspended);
  io("stalled", m.stalled);
  io("command", m.command);
  io("program", m.program);
  io("path_python", m.path_python);
}

template <class Io, maybe_const<Heartbeat> M>
void fields(Io&, M&) {}

template <class Io, maybe_const<Stop> M>
void fields(Io& io, M& m) {
  io("reason", m.reason);
  io("kill", m.kill);
  io("stacks", m.stacks);
}

template <class Io, maybe_const<TakeStacks> M>
void fields(Io& io, M& m) {
  io("request", m.request);
}

template <class Io, maybe_const<StackEntry> M>
void fields(Io& io, M& m) {
  io("rank", m.rank);
  io("dump", m.dump);
  io("kernel", m.kernel);
  io("missing", m.missing);
}

template <class Io, maybe_const<Stacks> M>
void fields(Io& io, M& m) {
  io("request", m.request);
  io("source", m.source);
  io.items("stacks", m.ranks);
}

// Stalled's ranks: a line "RANK SILENT_MS SUSPENDED\n" each.
std::string write_stall_lines(std::string_view, const std::vector<Stalled::Rank>& ranks) {
  std::string lines;
  for (const auto& rank : ranks)
    lines += std::to_string(rank.rank) + " " + std::to_string(rank.silent_ms) + " " +
             (rank.suspended ? "1" : "0") + "\n";
  return lines;
}
void read_stall_lines(Reader& r, std::string_view key, std::string_view text,
                      std::vector<Stalled::Rank>& ranks) {
  std::size_t pos = 0;
  for (int line = 1; pos < text.size(); ++line) {
    const std::size_t end = text.find('\n', pos);
    const std::string_view row = text.substr(pos, end == std::string_view::npos ? end : end - pos);
    pos = end == std::string_view::npos ? text.size() : end + 1;
    const std::size_t a = row.find(' ');
    const std::size_t b = a == std::string_view::npos ? a : row.find(' ', a + 1);
    if (end == std::string_view::npos || b == std::string_view::npos ||
        (row.substr(b + 1) != "0" && row.substr(b + 1) != "1")) {
      r.fail("field '" + std::string(key) + "': line " + std::to_string(line) + " '" + shown(row) +
             "' is not 'RANK SILENT_MS SUSPENDED'");
      return;
    }
    const auto rank = r.number<int>(key, row.substr(0, a));
    const auto silent_ms = r.number<std::int64_t>(key, row.substr(a + 1, b - a - 1));
    if (!rank || !silent_ms) return;
    ranks.push_back({*rank, *silent_ms, row.substr(b + 1) == "1"});
  }
}
constexpr TextForm<std::vector<Stalled::Rank>> kStallLines{write_stall_lines, read_stall_lines};

template <class Io, maybe_const<Stalled> M>
void fields(Io& io, M& m) {
  io("ranks", m.ranks, kStallLines);
}

// Shares' ranks: "RANK SAMPLES WAITS FRAMES IDLES BLOCKED_US SPAN_US\n",
// then a line "COUNT WHERE\n" per frame. A newline in WHERE (none comes from
// py-spy's lines) is sent as a space.
constexpr std::size_t kMaxShareLines = 64;  // frames per rank
std::string write_share_lines(std::string_view, const std::vector<Shares::Rank>& ranks) {
  std::string lines;
  for (const auto& r : ranks) {
    lines += std::to_string(r.rank) + " " + std::to_string(r.samples) + " " + std::to_string(r.waits) + " " +
             std::to_string(r.frames.size()) + " " + std::to_string(r.idles) + " " +
             std::to_string(r.blocked_us) + " " + std::to_string(r.span_us) + "\n";
    for (const auto& [where, n] : r.frames) {
      std::string text = where;
      std::replace(text.begin(), text.end(), '\n', ' ');
      lines += std::to_string(n) + " " + text + "\n";
    }
  }
  return lines;
}
void read_share_lines(Reader& r, std::string_view key, std::string_view text,
                      std::vector<Shares::Rank>& ranks) {
  std::size_t pos = 0, frames_left = 0;
  for (int line = 1; pos < text.size(); ++line) {
    const std::size_t end = text.find('\n', pos);
    const std::string_view row = text.substr(pos, end == std::string_view::npos ? end : end - pos);
    pos = end == std::string_view::npos ? text.size() : end + 1;
    const char* form = frames_left > 0 ? "COUNT WHERE" : "RANK SAMPLES WAITS FRAMES IDLES BLOCKED_US SPAN_US";
    const auto bad = [&] {
      r.fail("field '" + std::string(key) + "': line " + std::to_string(line) + " '" + shown(row) +
             "' is not '" + form + "'");
    };
    if (end == std::string_view::npos) return bad();
    if (frames_left > 0) {
      const std::size_t space = row.find(' ');
      if (space == std::string_view::npos) return bad();
      const auto n = r.number<std::int64_t>(key, row.substr(0, space));
      if (!n) return;
      ranks.back().frames.emplace_back(std::string(row.substr(space + 1)), *n);
      --frames_left;
      continue;
    }
    std::vector<std::string_view> words;
    for (std::size_t at = 0; at <= row.size();) {
      const std::size_t space = std::min(row.find(' ', at), row.size());
      words.push_back(row.substr(at, space - at));
      at = space + 1;
    }
    if (words.size() != 7) return bad();
    const auto rank = r.number<int>(key, words[0]);
    const auto samples = r.number<std::int64_t>(key, words[1]);
    const auto waits = r.number<std::int64_t>(key, words[2]);
    const auto frames = r.number<int>(key, words[3]);
    const auto idles = r.number<std::int64_t>(key, words[4]);
    const auto blocked = r.number<std::int64_t>(key, words[5]);
    const auto span = r.number<std::int64_t>(key, words[6]);
    if (!rank || !samples || !waits || !frames || !idles || !blocked || !span) return;
    if (*frames < 0 || static_cast<std::size_t>(*frames) > kMaxShareLines) {
      r.fail("field '" + std::string(key) + "': line " + std::to_string(line) + " has " +
             std::to_string(*frames) + " frames; expected 0 to " + std::to_string(kMaxShareLines));
      return;
    }
    ranks.push_back({*rank, *samples, *waits, {}, *idles, *blocked, *span});
    frames_left = static_cast<std::size_t>(*frames);
  }
  if (frames_left > 0)
    r.fail("field '" + std::string(key) + "': " + std::to_string(frames_left) + " frame lines missing");
}
constexpr TextForm<std::vector<Shares::Rank>> kShareLines{write_share_lines, read_share_lines};

template <class Io, maybe_const<Shares> M>
void fields(Io& io, M& m) {
  io("attempt", m.attempt);
  io("ranks", m.ranks, kShareLines);
}

template <class Io, maybe_const<SampleRate> M>
void fields(Io& io, M& m) {
  io("attempt", m.attempt);
  io("rate", m.rate);
}

template <class Io, maybe_const<UploadBegin> M>
void fields(Io& io, M& m) {
  io("rank", m.rank);
  io("path", m.path);
  io("size", m.size);
}

template <class Io, maybe_const<UploadChunk> M>
void fields(Io& io, M& m) {
  io("data", m.data);
}

template <class Io, maybe_const<UploadEnd> M>
void fields(Io& io, M& m) {
  io("path", m.path);
  io("crc32c", m.crc32c);
}

template <class Io, maybe_const<UploadHole> M>
void fields(Io& io, M& m) {
  io("bytes", m.bytes);
}

template <class Io, maybe_const<ShipBegin> M>
void fields(Io& io, M& m) {
  io("path", m.path);
  io("bytes", m.bytes);
  io("mode", m.mode);
}

template <class Io, maybe_const<ShipChunk> M>
void fields(Io& io, M& m) {
  io("data", m.data);
}

template <class Io, maybe_const<ShipEnd> M>
void fields(Io& io, M& m) {
  io("crc32c", m.crc32c);
}

template <class Io, maybe_const<ShipDone> M>
void fields(Io& io, M& m) {
  io("files", m.files);
  io("bytes", m.bytes);
}

template <class Io, maybe_const<ShipAck> M>
void fields(Io& io, M& m) {
  io("ok", m.ok);
  io("error", m.error);
}

template <class Io, maybe_const<Bye> M>
void fields(Io& io, M& m) {
  io("succeeded", m.succeeded);
  io("keep", m.keep);
  io("flow_exit", m.flow_exit);
}

template <class Io, maybe_const<Done> M>
void fields(Io& io, M& m) {
  io("attempt", m.attempt);
  io("errors", m.errors);
}

// Preflight's devices: "0,1,2".
std::string write_device_list(std::string_view, const std::vector<int>& devices) {
  std::string text;
  for (std::size_t i = 0; i < devices.size(); ++i) text += (i > 0 ? "," : "") + std::to_string(devices[i]);
  return text;
}
void read_device_list(Reader& r, std::string_view key, std::string_view text, std::vector<int>& devices) {
  if (text.empty()) return;
  std::size_t pos = 0;
  while (true) {
    const std::size_t comma = text.find(',', pos);
    const auto device =
        r.number<int>(key, text.substr(pos, comma == std::string_view::npos ? comma : comma - pos));
    if (!device) return;
    devices.push_back(*device);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
}
constexpr TextForm<std::vector<int>> kDeviceList{write_device_list, read_device_list};

template <class Io, maybe_const<Preflight> M>
void fields(Io& io, M& m) {
  io("devices", m.devices, kDeviceList);
  io("nranks", m.nranks);
  io("first_rank", m.first_rank);
  io("nccl_id", m.nccl_id);
  io("min_bytes", m.min_bytes);
  io("max_bytes", m.max_bytes);
  io("factor", m.factor);
  io("warmup", m.warmup);
  io("iters", m.iters);
  io("timeout_s", m.timeout_s);
}

template <class Io, maybe_const<PreflightId> M>
void fields(Io& io, M& m) {
  io("nccl_id", m.nccl_id);
}

template <class Io, maybe_const<PreflightDone> M>
void fields(Io& io, M& m) {
  io("facts", m.facts);
}

template <class Io, maybe_const<Signal> M>
void fields(Io& io, M& m) {
  io("signal", m.signal);
}

}  // namespace protocol_detail

namespace {

using protocol_detail::kMaxStartFields;

// ---- the table over Message -------------------------------------------------

template <class M>
Frame encode_one(const M& m) {
  protocol_detail::Writer w;
  fields(w, m);
  return Frame{M::kType, w.take()};
}

template <class M>
std::optional<Message> decode_one(const Frame& frame, std::string* why) {
  const std::size_t max_fields =
      std::is_same_v<M, Start> || std::is_same_v<M, Stacks> ? kMaxStartFields : kMaxFields;
  auto decoded = decode_fields(frame.payload, why, max_fields);
  if (!decoded) return std::nullopt;
  M m;
  protocol_detail::Reader r(*decoded, why);
  fields(r, m);
  if (!r.finish()) return std::nullopt;
  return Message(std::move(m));
}

using Decoder = std::optional<Message> (*)(const Frame&, std::string*);

template <std::size_t... I>
constexpr std::array<Decoder, sizeof...(I)> decoders(std::index_sequence<I...>) {
  return {&decode_one<std::variant_alternative_t<I, Message>>...};
}

constexpr auto kDecoders = decoders(std::make_index_sequence<std::variant_size_v<Message>>());

// The alternative at index i is the message of type i + 1.
template <std::size_t... I>
constexpr bool types_in_order(std::index_sequence<I...>) {
  return ((static_cast<std::size_t>(std::variant_alternative_t<I, Message>::kType) == I + 1) && ...);
}
static_assert(types_in_order(std::make_index_sequence<std::variant_size_v<Message>>()));
static_assert(std::variant_size_v<Message> == kLastMessageType);

}  // namespace

Frame encode(const Hello& m) { return encode_one(m); }
Frame encode(const Challenge& m) { return encode_one(m); }
Frame encode(const Auth& m) { return encode_one(m); }
Frame encode(const Welcome& m) { return encode_one(m); }
Frame encode(const Refused& m) { return encode_one(m); }
Frame encode(const Assign& m) { return encode_one(m); }
Frame encode(const Ready& m) { return encode_one(m); }
Frame encode(const Start& m) { return encode_one(m); }
Frame encode(const Output& m) { return encode_one(m); }
Frame encode(const Exited& m) { return encode_one(m); }
Frame encode(const Heartbeat& m) { return encode_one(m); }
Frame encode(const Stop& m) { return encode_one(m); }
Frame encode(const TakeStacks& m) { return encode_one(m); }
Frame encode(const Stacks& m) { return encode_one(m); }
Frame encode(const Stalled& m) { return encode_one(m); }
Frame encode(const Shares& m) { return encode_one(m); }
Frame encode(const SampleRate& m) { return encode_one(m); }
Frame encode(const UploadBegin& m) { return encode_one(m); }
Frame encode(const UploadChunk& m) { return encode_one(m); }
Frame encode(const UploadEnd& m) { return encode_one(m); }
Frame encode(const UploadHole& m) { return encode_one(m); }
Frame encode(const Bye& m) { return encode_one(m); }
Frame encode(const Done& m) { return encode_one(m); }
Frame encode(const Preflight& m) { return encode_one(m); }
Frame encode(const PreflightId& m) { return encode_one(m); }
Frame encode(const PreflightDone& m) { return encode_one(m); }
Frame encode(const Signal& m) { return encode_one(m); }
Frame encode(const ShipBegin& m) { return encode_one(m); }
Frame encode(const ShipChunk& m) { return encode_one(m); }
Frame encode(const ShipEnd& m) { return encode_one(m); }
Frame encode(const ShipDone& m) { return encode_one(m); }
Frame encode(const ShipAck& m) { return encode_one(m); }
Frame encode(const Message& m) {
  return std::visit([](const auto& one) { return encode_one(one); }, m);
}

std::optional<Message> decode_message(const Frame& frame, std::string* why) {
  const auto index = static_cast<std::size_t>(frame.type);
  if (index < 1 || index > kDecoders.size()) {
    *why = "unknown message type " + std::to_string(index);
    return std::nullopt;
  }
  try {
    return kDecoders[index - 1](frame, why);
  } catch (const std::exception& e) {  // std::bad_alloc: a value, as every other refusal
    *why = e.what();
    return std::nullopt;
  }
}

MessageType type_of(const Message& m) {
  return std::visit([](const auto& one) { return std::decay_t<decltype(one)>::kType; }, m);
}

std::optional<std::string_view> upload_chunk_data(std::string_view payload) {
  return one_field_view(payload, "data");
}

std::optional<std::string_view> ship_chunk_data(std::string_view payload) {
  return one_field_view(payload, "data");
}

std::string upload_chunk_frame_to_fill(std::size_t bytes) {
  return one_field_frame_to_fill(MessageType::upload_chunk, "data", bytes);
}

std::string ship_chunk_frame_to_fill(std::size_t bytes) {
  return one_field_frame_to_fill(MessageType::ship_chunk, "data", bytes);
}

void chunk_frame_cut(std::string& frame, std::size_t bytes) {
  // length:u32 version type | key length:u32 "data" | value length:u32 value
  constexpr std::size_t kValueAt = kFrameHeaderBytes + 4 + 4 + 4;
  if (frame.size() < kValueAt || bytes > frame.size() - kValueAt)
    throw Error("chunk_frame_cut: not a chunk frame of that many bytes");
  frame.resize(kValueAt + bytes);
  auto put = [&](std::size_t at, std::size_t value) {
    for (std::size_t i = 0; i < 4; ++i) frame[at + i] = static_cast<char>((value >> (8 * (3 - i))) & 0xff);
  };
  put(0, frame.size() - 4);
  put(kValueAt - 4, bytes);
}

std::string upload_hole_crc_bytes(std::int64_t bytes) {
  std::string out(1, '\0');
  for (int shift = 56; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((static_cast<std::uint64_t>(bytes) >> shift) & 0xff));
  return out;
}

std::string to_wire(const Frame& frame) { return encode_frame(frame.type, frame.payload); }

}  // namespace flowrun
