#include "ship_receiver.h"

#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <unistd.h>

#include "flowrun/beneath.h"
#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/path.h"
#include "flowrun/text.h"
#include "flowrun/util.h"

namespace flowrun::cluster {

void ShipReceiver::fail(std::string why) {
  if (error_.empty()) error_ = std::move(why);
  drop_open_file();
}

void ShipReceiver::drop_open_file() {
  if (!open_) return;
  if (open_->fd) {
    open_->fd.reset();
    unlinkat(open_->dir.get(), open_->leaf.c_str(), 0);
  }
  open_.reset();
}

void ShipReceiver::begin(const ShipBegin& m) {
  if (open_) fail(fmt::format("{}: a new file began before it ended", open_->path));
  if (!error_.empty()) return;  // the shipment failed: the rest is not written
  std::string why;
  const auto safe = safe_relative_path(m.path, &why);
  if (!safe) {
    fail(fmt::format("shipped file '{}' refused: {}", printable(m.path), why));
    return;
  }
  const std::string path = printable(*safe);
  if (!seen_.insert(*safe).second) {
    fail(fmt::format("{}: shipped twice", path));
    return;
  }
  if (m.bytes < 0) {
    fail(fmt::format("{}: a size of {} bytes", path, m.bytes));
    return;
  }
  // The directory is the agent's own (mkdtemp's, under the scratch), and
  // every component below it is made or reached without following a link.
  try {
    make_dirs(root_, 0700);
  } catch (const Error& e) {
    fail(fmt::format("cannot make {}: {}", root_, e.what()));
    return;
  }
  const BeneathRoot root = BeneathRoot::open(root_, false);
  if (!root.ok()) {
    fail(fmt::format("cannot open {}: {}", root_, std::strerror(root.error())));
    return;
  }
  File f;
  f.path = path;
  f.bytes = m.bytes;
  // Its owner's permission bits, at most rwxr-xr-x: a shipped script stays
  // executable, nothing becomes writable by others or set-id.
  const auto mode = static_cast<mode_t>(m.mode) & 0755;
  f.fd.reset(root.create_file(*safe, mode | 0600, 0700, &f.dir));
  if (!f.fd) {
    const int err = errno;
    fail(fmt::format("cannot create {} in {}: {}", path, root_,
                     err == EEXIST ? "it exists already" : std::strerror(err)));
    return;
  }
  f.leaf = std::string(base_name(*safe));
  open_ = std::move(f);
}

void ShipReceiver::data(std::string_view data) {
  if (!open_) {
    if (error_.empty()) fail("a shipped chunk came outside a file");
    return;
  }
  File& f = *open_;
  f.got += static_cast<std::int64_t>(data.size());
  if (f.got > f.bytes) {
    fail(fmt::format("{}: more than the {} bytes announced", f.path, f.bytes));
    return;
  }
  f.crc.update(data);
  if (!write_all(f.fd.get(), data)) {
    const int err = errno;
    fail(fmt::format("cannot write {} in {}: {}", f.path, root_, std::strerror(err)));
  }
}

void ShipReceiver::end(const ShipEnd& m) {
  if (!open_) {
    if (error_.empty()) fail("a shipped file ended that had not begun");
    return;
  }
  File& f = *open_;
  if (f.got != f.bytes) {
    fail(fmt::format("{}: {} of the {} bytes announced came", f.path, f.got, f.bytes));
    return;
  }
  if (f.crc.hex() != m.crc32c) {
    fail(
        fmt::format("{}: its checksum differs from the head's: the file changed on the head while it was "
                    "shipped, or was damaged on the way",
                    f.path));
    return;
  }
  ++files_;
  bytes_ += f.bytes;
  open_.reset();
}

ShipAck ShipReceiver::done(const ShipDone& m) {
  if (open_) fail(fmt::format("{}: the shipment ended inside it", open_->path));
  if (error_.empty() && (m.files != files_ || m.bytes != bytes_))
    fail(fmt::format("the head shipped {} ({} bytes), {} ({} bytes) arrived", plural(m.files, "file"),
                     m.bytes, plural(files_, "file"), bytes_));
  received_ = error_.empty();
  return ShipAck{received_, error_};
}

bool StepShipment::take_chunk(const Frame& frame) {
  if (frame.type != MessageType::ship_chunk || !receiver_) return false;
  auto data = ship_chunk_data(frame.payload);
  if (data) receiver_->data(*data);
  return bool(data);
}

void StepShipment::take(const ShipBegin& m) {
  if (!receiver_ && error_.empty()) {
    try {
      receiver_.emplace(scratch_() + "/work");
    } catch (const Error& e) {
      error_ = e.what();
    }
  }
  if (receiver_) receiver_->begin(m);
}

void StepShipment::take(const ShipChunk& m) {
  if (receiver_) receiver_->data(m.data);
}

void StepShipment::take(const ShipEnd& m) {
  if (receiver_) receiver_->end(m);
}

ShipAck StepShipment::take(const ShipDone& m) {
  if (receiver_) return receiver_->done(m);
  return ShipAck{false, error_.empty() ? "no file came before the shipment's end" : error_};
}

void StepShipment::forget() {
  if (receiver_) (void)remove_tree(receiver_->root());
  receiver_.reset();
  error_.clear();
}

std::optional<std::string> StepShipment::workdir() const {
  if (receiver_ && receiver_->received()) return receiver_->root();
  return std::nullopt;
}

std::vector<std::string> StepShipment::in_copy(std::vector<std::string> argv,
                                               const std::string& head_workdir) const {
  const auto copy = workdir();
  if (!copy || head_workdir.empty() || head_workdir == "/") return argv;
  // Where the head's workdir starts a path: at a word's start or after a
  // character that cannot be part of one ('=', a quote, a space, ':').
  const std::string from = head_workdir + "/";
  for (std::string& word : argv) {
    std::string out;
    std::size_t at = 0;
    for (std::size_t hit = word.find(from); hit != std::string::npos; hit = word.find(from, hit + 1)) {
      if (hit > 0 && std::string_view("=\"' :\t\n(").find(word[hit - 1]) == std::string_view::npos) continue;
      out.append(word, at, hit - at);
      out += *copy + "/";
      at = hit + from.size();
    }
    if (at > 0) word = out + word.substr(at);
  }
  return argv;
}

}  // namespace flowrun::cluster
