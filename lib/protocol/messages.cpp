#include "flowrun/messages.h"

#include <array>
#include <charconv>
#include <limits>
#include <type_traits>
#include <utility>

#include "flowrun/error.h"

namespace flowrun {

namespace {

// Start carries one field per rank of its node; a node has at most a few
// hundred GPUs, far fewer than this.
constexpr std::size_t kMaxStartFields = std::size_t{1} << 16;

// A peer's bytes in an error: short, and only printable ASCII.
std::string shown(std::string_view text) {
  constexpr std::size_t kShown = 64;
  std::string out;
  for (char c : text.substr(0, kShown)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (text.size() > kShown) out += "...";
  return out;
}

// Appends fields as encode_fields does, without building a Fields first.
class Writer {
 public:
  void put(std::string_view key, std::string_view value) {
    put_u32(key.size());
    out_.append(key);
    put_u32(value.size());
    out_.append(value);
  }
  template <class Int>
  requires std::is_integral_v<Int>
  void put(std::string_view key, Int value) { put(key, std::string_view(std::to_string(value))); }
  void put(std::string_view key, bool value) { put(key, std::string_view(value ? "1" : "0")); }
  void put(std::string_view key, const std::optional<std::int64_t>& value) {
    put(key, value ? std::to_string(*value) : std::string());
  }
  void put(std::string_view key, const std::vector<std::string>& items) {
    if (items.size() == 1 && items[0].empty())
      throw Error("field '" + std::string(key) + "': a list of one empty item cannot be sent");
    std::string joined;
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (items[i].find('\0') != std::string::npos)
        throw Error("field '" + std::string(key) + "': a list item holds a NUL");
      if (i > 0) joined += '\0';
      joined += items[i];
    }
    put(key, std::string_view(joined));
  }
  std::string take() { return std::move(out_); }

 private:
  void put_u32(std::size_t n) {
    if (n > std::numeric_limits<std::uint32_t>::max()) throw Error("a field over 4 GiB cannot be sent");
    for (int shift = 24; shift >= 0; shift -= 8) out_.push_back(static_cast<char>((n >> shift) & 0xff));
  }
  std::string out_;
};

// Reads the fields of one message: each named field exactly once, every
// field used. The first problem is kept in *why; after it every read gives a
// default value and finish() is false. str() moves the value out of the
// fields (an output's data is not copied again).
class Reader {
 public:
  Reader(Fields& fields, std::string* why) : fields_(fields), used_(fields.size(), false), why_(why) {}

  std::string str(std::string_view key) {
    std::string* value = find(key);
    return value ? std::move(*value) : std::string();
  }

  template <class Int>
  Int integer(std::string_view key) {
    const std::string* value = find(key);
    if (!value) return Int{};
    return number<Int>(key, *value).value_or(Int{});
  }

  bool boolean(std::string_view key) {
    const std::string* value = find(key);
    if (!value) return false;
    if (*value == "1") return true;
    if (*value != "0") fail("field '" + std::string(key) + "' is '" + shown(*value) + "', not 1 or 0");
    return false;
  }

  std::optional<std::int64_t> optional_integer(std::string_view key) {
    const std::string* value = find(key);
    if (!value || value->empty()) return std::nullopt;
    return number<std::int64_t>(key, *value);
  }

  std::vector<std::string> list(std::string_view key) {
    std::vector<std::string> out;
    const std::string* value = find(key);
    if (!value || value->empty()) return out;
    std::size_t pos = 0;
    while (true) {
      const std::size_t end = value->find('\0', pos);
      out.push_back(value->substr(pos, end == std::string::npos ? std::string::npos : end - pos));
      if (end == std::string::npos) break;
      pos = end + 1;
    }
    return out;
  }

  // The raw value of a field that is read further by its message.
  const std::string* raw(std::string_view key) { return find(key); }

  // `text`, a part of field `key`, as a number: only the text std::to_string
  // writes (no '+', spaces or extra zeros).
  template <class Int>
  std::optional<Int> number(std::string_view key, std::string_view text) {
    Int value{};
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || std::to_string(value) != text) {
      fail("field '" + std::string(key) + "' is '" + shown(text) + "', not a number" +
           (ec == std::errc::result_out_of_range ? " in range" : ""));
      return std::nullopt;
    }
    return value;
  }

  void fail(std::string what) {
    if (ok_) *why_ = std::move(what);
    ok_ = false;
  }

  // Whether every read succeeded and every field was read.
  bool finish() {
    for (std::size_t i = 0; ok_ && i < fields_.size(); ++i)
      if (!used_[i]) fail("unexpected field '" + shown(fields_[i].first) + "'");
    return ok_;
  }

 private:
  // Looks from the field after the last one found: fields in the order
  // write() puts them (a start's thousands of ranks) cost one comparison each.
  std::string* find(std::string_view key) {
    if (!ok_) return nullptr;
    for (std::size_t n = 0; n < fields_.size(); ++n) {
      const std::size_t i = (next_ + n) % fields_.size();
      if (fields_[i].first != key) continue;
      used_[i] = true;
      next_ = i + 1;
      return &fields_[i].second;
    }
    fail("field '" + std::string(key) + "' is missing");
    return nullptr;
  }

  Fields& fields_;
  std::vector<bool> used_;
  std::string* why_;
  std::size_t next_ = 0;
  bool ok_ = true;
};

// ---- each message's fields, both ways ---------------------------------------

void write(Writer& w, const Hello& m) {
  w.put("node", m.node);
  w.put("flowrun", m.flowrun);
  w.put("nonce", m.nonce);
  w.put("node_rank", m.node_rank);
  w.put("pid", m.pid);
  w.put("gpus", m.gpus);
}
void read(Reader& r, Hello& m) {
  m.node = r.str("node");
  m.flowrun = r.str("flowrun");
  m.nonce = r.str("nonce");
  m.node_rank = r.integer<int>("node_rank");
  m.pid = r.integer<int>("pid");
  m.gpus = r.integer<int>("gpus");
}

void write(Writer& w, const Challenge& m) { w.put("nonce", m.nonce); }
void read(Reader& r, Challenge& m) { m.nonce = r.str("nonce"); }

void write(Writer& w, const Auth& m) { w.put("proof", m.proof); }
void read(Reader& r, Auth& m) { m.proof = r.str("proof"); }

void write(Writer& w, const Welcome& m) {
  w.put("proof", m.proof);
  w.put("node_rank", m.node_rank);
  w.put("heartbeat_ms", m.heartbeat_ms);
  w.put("timeout_ms", m.timeout_ms);
}
void read(Reader& r, Welcome& m) {
  m.proof = r.str("proof");
  m.node_rank = r.integer<int>("node_rank");
  m.heartbeat_ms = r.integer<std::int64_t>("heartbeat_ms");
  m.timeout_ms = r.integer<std::int64_t>("timeout_ms");
}

void write(Writer& w, const Refused& m) { w.put("reason", m.reason); }
void read(Reader& r, Refused& m) { m.reason = r.str("reason"); }

void write(Writer& w, const Assign& m) {
  w.put("step", m.step);
  w.put("run_id", m.run_id);
  w.put("attempt", m.attempt);
  w.put("node_rank", m.node_rank);
  w.put("nodes", m.nodes);
  w.put("workdir", m.workdir);
  w.put("marker_path", m.marker_path);
  w.put("marker_text", m.marker_text);
  w.put("want_port", m.want_port);
  w.put("grace_ms", m.grace_ms);
  w.put("stall_ms", m.stall_ms);
  w.put("forensics_ms", m.forensics_ms);
}
void read(Reader& r, Assign& m) {
  m.step = r.str("step");
  m.run_id = r.str("run_id");
  m.attempt = r.integer<int>("attempt");
  m.node_rank = r.integer<int>("node_rank");
  m.nodes = r.integer<int>("nodes");
  m.workdir = r.str("workdir");
  m.marker_path = r.str("marker_path");
  m.marker_text = r.str("marker_text");
  m.want_port = r.boolean("want_port");
  m.grace_ms = r.integer<std::int64_t>("grace_ms");
  m.stall_ms = r.optional_integer("stall_ms");
  m.forensics_ms = r.integer<std::int64_t>("forensics_ms");
}

void write(Writer& w, const Ready& m) {
  w.put("workdir_ok", m.workdir_ok);
  w.put("workdir_error", m.workdir_error);
  w.put("address", m.address);
  w.put("port", m.port);
  w.put("gpus", m.gpus);
}
void read(Reader& r, Ready& m) {
  m.workdir_ok = r.boolean("workdir_ok");
  m.workdir_error = r.str("workdir_error");
  m.address = r.str("address");
  m.port = r.integer<int>("port");
  m.gpus = r.integer<int>("gpus");
}

void write(Writer& w, const StackEntry& m);
void read(Reader& r, StackEntry& m);

// A list of structs (Start's ranks, Stacks' ranks): the field "ranks" (their
// count), then one field "r0", "r1", ... each, the encode_fields of one item.
template <class Item>
void write_items(Writer& w, const std::vector<Item>& items) {
  w.put("ranks", items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    Writer item;
    write(item, items[i]);
    w.put("r" + std::to_string(i), std::string_view(item.take()));
  }
}

// `message` names it in an error: "start field 'r0': field 'devices' is missing".
template <class Item>
void read_items(Reader& r, const char* message, std::vector<Item>& items) {
  const auto count = r.integer<std::size_t>("ranks");
  if (count >= kMaxStartFields) {
    r.fail("field 'ranks' is " + std::to_string(count) + ", more ranks than a " + message + " can hold");
    return;
  }
  for (std::size_t i = 0; i < count; ++i) {
    const std::string key = "r" + std::to_string(i);
    const std::string* value = r.raw(key);
    if (!value) return;
    std::string error;
    auto fields = decode_fields(*value, &error);
    Item item;
    if (fields) {
      Reader sub(*fields, &error);
      read(sub, item);
      if (sub.finish()) {
        items.push_back(std::move(item));
        continue;
      }
    }
    r.fail(std::string(message) + " field '" + key + "': " + error);
    return;
  }
}

void write(Writer& w, const StartRank& m) {
  w.put("rank", m.rank);
  w.put("local_rank", m.local_rank);
  w.put("devices", m.devices);
  w.put("upload", m.upload);
}
void read(Reader& r, StartRank& m) {
  m.rank = r.integer<int>("rank");
  m.local_rank = r.integer<int>("local_rank");
  m.devices = r.str("devices");
  m.upload = r.boolean("upload");
}

constexpr std::string_view devices_name(Start::Devices devices) {
  switch (devices) {
    case Start::Devices::set: return "set";
    case Start::Devices::if_inherited: return "if_inherited";
    case Start::Devices::leave: break;
  }
  return "leave";
}

void write(Writer& w, const Start& m) {
  w.put("attempt", m.attempt);
  w.put("step", m.step);
  w.put("run_id", m.run_id);
  w.put("job_id", m.job_id);
  w.put("role", m.role);
  w.put("run_dir", m.run_dir);
  w.put("env", m.env);
  w.put("world_size", m.world_size);
  w.put("nodes", m.nodes);
  w.put("node_rank", m.node_rank);
  w.put("max_restarts", m.max_restarts);
  w.put("master_addr", m.master_addr);
  w.put("master_port", m.master_port);
  w.put("devices", devices_name(m.devices));
  w.put("nccl_flight_recorder", m.nccl_flight_recorder);
  w.put("workdir", m.workdir);
  w.put("argv", m.argv);
  write_items(w, m.ranks);
}
void read(Reader& r, Start& m) {
  m.attempt = r.integer<int>("attempt");
  m.step = r.str("step");
  m.run_id = r.str("run_id");
  m.job_id = r.str("job_id");
  m.role = r.str("role");
  m.run_dir = r.str("run_dir");
  m.env = r.list("env");
  for (const auto& entry : m.env) {
    const auto eq = entry.find('=');
    if (eq == 0 || eq == std::string::npos) {
      r.fail("field 'env' has the entry '" + shown(entry) + "', not NAME=value");
      break;
    }
  }
  m.world_size = r.integer<int>("world_size");
  m.nodes = r.integer<int>("nodes");
  m.node_rank = r.integer<int>("node_rank");
  m.max_restarts = r.integer<int>("max_restarts");
  m.master_addr = r.str("master_addr");
  m.master_port = r.integer<int>("master_port");
  const std::string devices = r.str("devices");
  if (devices == "set")
    m.devices = Start::Devices::set;
  else if (devices == "if_inherited")
    m.devices = Start::Devices::if_inherited;
  else if (devices != "leave")
    r.fail("field 'devices' is '" + shown(devices) + "', not leave, set or if_inherited");
  m.nccl_flight_recorder = r.boolean("nccl_flight_recorder");
  m.workdir = r.str("workdir");
  m.argv = r.list("argv");
  read_items(r, "start", m.ranks);
}

void write(Writer& w, const Output& m) {
  w.put("rank", m.rank);
  w.put("stream", std::string_view(m.is_stderr ? "stderr" : "stdout"));
  w.put("data", m.data);
}
void read(Reader& r, Output& m) {
  m.rank = r.integer<int>("rank");
  const std::string stream = r.str("stream");
  m.is_stderr = stream == "stderr";
  if (!m.is_stderr && stream != "stdout")
    r.fail("field 'stream' is '" + shown(stream) + "', not stdout or stderr");
  m.data = r.str("data");
}

constexpr std::string_view kind_name(Exited::Kind kind) {
  switch (kind) {
    case Exited::Kind::signaled: return "signaled";
    case Exited::Kind::spawn_failed: return "spawn_failed";
    case Exited::Kind::exited: break;
  }
  return "exited";
}

void write(Writer& w, const Exited& m) {
  w.put("rank", m.rank);
  w.put("kind", kind_name(m.kind));
  w.put("code", m.code);
  w.put("spawn_error", m.spawn_error);
  w.put("pid", m.pid);
  w.put("start_ns", m.start_ns);
  w.put("end_ns", m.end_ns);
  w.put("rss_kib", m.rss_kib);
  w.put("stopped", m.stopped);
  w.put("silent_ms", m.silent_ms);
  w.put("suspended", m.suspended);
  w.put("stalled", m.stalled);
  w.put("command", m.command);
  w.put("program", m.program);
  w.put("path_python", m.path_python);
}
void read(Reader& r, Exited& m) {
  m.rank = r.integer<int>("rank");
  const std::string kind = r.str("kind");
  if (kind == "signaled") {
    m.kind = Exited::Kind::signaled;
  } else if (kind == "spawn_failed") {
    m.kind = Exited::Kind::spawn_failed;
  } else if (kind == "exited") {
    m.kind = Exited::Kind::exited;
  } else {
    r.fail("field 'kind' is '" + shown(kind) + "', not exited, signaled or spawn_failed");
  }
  m.code = r.integer<int>("code");
  m.spawn_error = r.str("spawn_error");
  m.pid = r.integer<int>("pid");
  m.start_ns = r.integer<std::int64_t>("start_ns");
  m.end_ns = r.integer<std::int64_t>("end_ns");
  m.rss_kib = r.integer<std::int64_t>("rss_kib");
  m.stopped = r.boolean("stopped");
  m.silent_ms = r.optional_integer("silent_ms");
  m.suspended = r.boolean("suspended");
  m.stalled = r.boolean("stalled");
  m.command = r.str("command");
  m.program = r.str("program");
  m.path_python = r.str("path_python");
}

void write(Writer&, const Heartbeat&) {}
void read(Reader&, Heartbeat&) {}

void write(Writer& w, const Stop& m) {
  w.put("reason", m.reason);
  w.put("kill", m.kill);
  w.put("stacks", m.stacks);
}
void read(Reader& r, Stop& m) {
  m.reason = r.str("reason");
  m.kill = r.boolean("kill");
  m.stacks = r.boolean("stacks");
}

void write(Writer& w, const TakeStacks& m) { w.put("request", m.request); }
void read(Reader& r, TakeStacks& m) { m.request = r.integer<int>("request"); }

void write(Writer& w, const StackEntry& m) {
  w.put("rank", m.rank);
  w.put("dump", m.dump);
  w.put("kernel", m.kernel);
  w.put("missing", m.missing);
}
void read(Reader& r, StackEntry& m) {
  m.rank = r.integer<int>("rank");
  m.dump = r.str("dump");
  m.kernel = r.str("kernel");
  m.missing = r.str("missing");
}

void write(Writer& w, const Stacks& m) {
  w.put("request", m.request);
  w.put("source", m.source);
  write_items(w, m.ranks);
}
void read(Reader& r, Stacks& m) {
  m.request = r.integer<int>("request");
  m.source = r.str("source");
  read_items(r, "stacks", m.ranks);
}

void write(Writer& w, const Stalled& m) {
  std::string lines;
  for (const auto& rank : m.ranks)
    lines += std::to_string(rank.rank) + " " + std::to_string(rank.silent_ms) + " " +
             (rank.suspended ? "1" : "0") + "\n";
  w.put("ranks", std::string_view(lines));
}
void read(Reader& r, Stalled& m) {
  const std::string* text = r.raw("ranks");
  if (!text) return;
  std::size_t pos = 0;
  for (int line = 1; pos < text->size(); ++line) {
    // "RANK SILENT_MS SUSPENDED\n", as write() puts it.
    const std::size_t end = text->find('\n', pos);
    const std::string_view row =
        std::string_view(*text).substr(pos, end == std::string::npos ? end : end - pos);
    pos = end == std::string::npos ? text->size() : end + 1;
    const std::size_t a = row.find(' ');
    const std::size_t b = a == std::string_view::npos ? a : row.find(' ', a + 1);
    if (end == std::string::npos || b == std::string_view::npos ||
        (row.substr(b + 1) != "0" && row.substr(b + 1) != "1")) {
      r.fail("field 'ranks': line " + std::to_string(line) + " '" + shown(row) +
             "' is not 'RANK SILENT_MS SUSPENDED'");
      return;
    }
    const auto rank = r.number<int>("ranks", row.substr(0, a));
    const auto silent_ms = r.number<std::int64_t>("ranks", row.substr(a + 1, b - a - 1));
    if (!rank || !silent_ms) return;
    m.ranks.push_back({*rank, *silent_ms, row.substr(b + 1) == "1"});
  }
}

void write(Writer& w, const UploadBegin& m) {
  w.put("rank", m.rank);
  w.put("path", m.path);
  w.put("size", m.size);
}
void read(Reader& r, UploadBegin& m) {
  m.rank = r.integer<int>("rank");
  m.path = r.str("path");
  m.size = r.integer<std::int64_t>("size");
}

void write(Writer& w, const UploadChunk& m) { w.put("data", m.data); }
void read(Reader& r, UploadChunk& m) { m.data = r.str("data"); }

void write(Writer& w, const UploadEnd& m) {
  w.put("path", m.path);
  w.put("crc32c", m.crc32c);
}
void read(Reader& r, UploadEnd& m) {
  m.path = r.str("path");
  m.crc32c = r.str("crc32c");
}

void write(Writer& w, const UploadHole& m) { w.put("bytes", m.bytes); }
void read(Reader& r, UploadHole& m) { m.bytes = r.integer<std::int64_t>("bytes"); }

void write(Writer& w, const Bye& m) { w.put("succeeded", m.succeeded); }
void read(Reader& r, Bye& m) { m.succeeded = r.boolean("succeeded"); }

void write(Writer& w, const Done& m) {
  w.put("attempt", m.attempt);
  w.put("errors", m.errors);
}
void read(Reader& r, Done& m) {
  m.attempt = r.integer<int>("attempt");
  m.errors = r.list("errors");
}

void write(Writer& w, const Preflight& m) {
  std::string devices;
  for (std::size_t i = 0; i < m.devices.size(); ++i)
    devices += (i > 0 ? "," : "") + std::to_string(m.devices[i]);
  w.put("devices", std::string_view(devices));
  w.put("nranks", m.nranks);
  w.put("first_rank", m.first_rank);
  w.put("nccl_id", m.nccl_id);
  w.put("min_bytes", m.min_bytes);
  w.put("max_bytes", m.max_bytes);
  w.put("factor", m.factor);
  w.put("warmup", m.warmup);
  w.put("iters", m.iters);
  w.put("timeout_s", m.timeout_s);
}
void read(Reader& r, Preflight& m) {
  if (const std::string* devices = r.raw("devices"); devices && !devices->empty()) {
    std::size_t pos = 0;
    while (true) {
      const std::size_t comma = devices->find(',', pos);
      const auto item =
          std::string_view(*devices).substr(pos, comma == std::string::npos ? comma : comma - pos);
      const auto device = r.number<int>("devices", item);
      if (!device) return;
      m.devices.push_back(*device);
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  m.nranks = r.integer<int>("nranks");
  m.first_rank = r.integer<int>("first_rank");
  m.nccl_id = r.str("nccl_id");
  m.min_bytes = r.integer<std::uint64_t>("min_bytes");
  m.max_bytes = r.integer<std::uint64_t>("max_bytes");
  m.factor = r.integer<int>("factor");
  m.warmup = r.integer<int>("warmup");
  m.iters = r.integer<int>("iters");
  m.timeout_s = r.integer<int>("timeout_s");
}

void write(Writer& w, const PreflightId& m) { w.put("nccl_id", m.nccl_id); }
void read(Reader& r, PreflightId& m) { m.nccl_id = r.str("nccl_id"); }

void write(Writer& w, const PreflightDone& m) { w.put("facts", m.facts); }
void read(Reader& r, PreflightDone& m) { m.facts = r.str("facts"); }

void write(Writer& w, const Signal& m) { w.put("signal", m.signal); }
void read(Reader& r, Signal& m) { m.signal = r.str("signal"); }

// ---- the table over Message -------------------------------------------------

template <class M>
Frame encode_one(const M& m) {
  Writer w;
  write(w, m);
  return Frame{M::kType, w.take()};
}

template <class M>
std::optional<Message> decode_one(const Frame& frame, std::string* why) {
  const std::size_t max_fields =
      std::is_same_v<M, Start> || std::is_same_v<M, Stacks> ? kMaxStartFields : kMaxFields;
  auto fields = decode_fields(frame.payload, why, max_fields);
  if (!fields) return std::nullopt;
  M m;
  Reader r(*fields, why);
  read(r, m);
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

std::string encode_upload_chunk_frame(std::string_view data) {
  return encode_one_field_frame(MessageType::upload_chunk, "data", data);
}

std::optional<std::string_view> upload_chunk_data(std::string_view payload) {
  return one_field_view(payload, "data");
}

std::string upload_hole_crc_bytes(std::int64_t bytes) {
  std::string out(1, '\0');
  for (int shift = 56; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((static_cast<std::uint64_t>(bytes) >> shift) & 0xff));
  return out;
}

std::string to_wire(const Frame& frame) { return encode_frame(frame.type, frame.payload); }

}  // namespace flowrun
