#include "upload_receiver.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include "flowrun/files.h"
#include "flowrun/path.h"
#include "flowrun/supervisor.h"
#include "flowrun/util.h"

namespace flowrun::cluster {

UploadReceiver::UploadReceiver(const StepPlan& plan, const RunLayout& layout, std::string& write_error,
                               ErrorHandler on_error)
    : plan_(plan), layout_(layout), write_error_(write_error), on_error_(std::move(on_error)) {
  open_.resize(plan_.nodes.size());
}

void UploadReceiver::begin(int node_rank, const UploadBegin& m) {
  auto& open = open_[static_cast<std::size_t>(node_rank)];
  if (open) abort(node_rank, "a new upload began before the last one ended");
  Upload up;
  up.rank = m.rank;
  up.path = m.path;
  up.size = m.size;
  const bool runs_here = m.rank >= 0 && m.rank < plan_.world_size &&
                         plan_.ranks[static_cast<std::size_t>(m.rank)].node == node_rank;
  std::string error;
  auto safe = safe_relative_path(up.path, &error);
  if (!runs_here) {
    error = fmt::format("upload for rank {}, which does not run on this node, refused", up.rank);
  } else if (!safe) {
    error = fmt::format("upload of '{}' refused: {}", printable(up.path), error);
  } else if (*safe != "error.json" && safe->rfind("out/", 0) != 0 && !is_nccl_trace_name(*safe, up.rank)) {
    error = fmt::format(
        "upload of '{}' refused: only error.json, the rank's flight-recorder dump and files under out/ are "
        "uploaded",
        printable(*safe));
  }
  if (error.empty()) {
    // The rank's directory is reached from the run directory, and the file
    // made beneath it, without following a symlink: a rank on a node that
    // shares this file system may have put one in either's place.
    const std::string root = layout_.rank_dir(plan_.step, up.rank);
    const BeneathRoot dir = BeneathRoot::open_under(layout_.run_dir, root, false);
    if (!dir.ok()) {
      error = fmt::format("upload of '{}' refused: cannot open {} without following a symlink: {}",
                          printable(*safe), root, std::strerror(dir.error()));
    } else {
      if (*safe == "error.json" || safe->find('/') == std::string::npos) unlinkat(dir.fd(), safe->c_str(), 0);
      up.fd.reset(dir.create_file(*safe, 0644, 0755, &up.dir));
      if (!up.fd)
        error = fmt::format("upload of '{}' refused: cannot create it in {} without following a symlink: {}",
                            printable(*safe), root, std::strerror(errno));
      up.leaf = std::string(base_name(*safe));
    }
    up.path = printable(*safe);  // only said: a rank named it (a newline cannot forge a line)
  }
  if (!error.empty()) {
    up.refused = true;
    on_error_(node_rank, error);
  }
  open = std::move(up);
}

void UploadReceiver::data(int node_rank, std::string_view data) {
  auto& open = open_[static_cast<std::size_t>(node_rank)];
  if (!open) return;
  Upload& up = *open;
  if (up.refused) return;
  up.got += static_cast<std::int64_t>(data.size());
  if (up.got > up.size) {
    abort(node_rank,
          fmt::format("upload of '{}' sent more than the {} bytes it announced", up.path, up.size));
    return;
  }
  up.crc.update(data);
  if (!write_all(up.fd.get(), data.data(), data.size())) write_failed(node_rank, up, errno);
}

void UploadReceiver::hole(int node_rank, std::int64_t bytes) {
  auto& open = open_[static_cast<std::size_t>(node_rank)];
  if (!open) return;
  Upload& up = *open;
  if (up.refused) return;
  if (bytes <= 0 || bytes > up.size - up.got) {
    abort(node_rank, bytes <= 0 ? fmt::format("upload of '{}' sent a hole of {} bytes", up.path, bytes)
                                : fmt::format("upload of '{}' sent more than the {} bytes it announced",
                                              up.path, up.size));
    return;
  }
  up.got += bytes;
  up.crc.update(upload_hole_crc_bytes(bytes));
  if (lseek(up.fd.get(), bytes, SEEK_CUR) < 0) write_failed(node_rank, up, errno);
}

void UploadReceiver::write_failed(int node_rank, Upload& up, int err) {
  const std::string what = fmt::format("cannot write rank {}'s {} in {}: {}", up.rank, up.path,
                                       layout_.rank_dir(plan_.step, up.rank), std::strerror(err));
  // Said once: the uploads after it fail for the same reason.
  if (!write_error_.empty()) up.refused = true;
  if (write_error_.empty()) write_error_ = what;
  abort(node_rank, what + write_failure_hint(err, layout_.run_dir));
}

void UploadReceiver::end(int node_rank, const UploadEnd& m) {
  auto& open = open_[static_cast<std::size_t>(node_rank)];
  if (!open) return;
  Upload up = std::move(*open);
  open.reset();
  if (up.refused) return;
  // A file that ends in a hole gets its length here: the hole was skipped.
  if (up.got == up.size && ftruncate(up.fd.get(), up.size) != 0) {
    const int err = errno;
    open = std::move(up);
    write_failed(node_rank, *open, err);
    return;
  }
  up.fd.reset();
  const std::string& expected = m.crc32c;
  const std::string got = up.crc.hex();
  if (up.got != up.size || expected != got) {
    if (up.dir) unlinkat(up.dir.get(), up.leaf.c_str(), 0);
    on_error_(node_rank,
              fmt::format("upload of rank {}'s '{}' is corrupt ({} of {} bytes, CRC-32C {}); rejected",
                          up.rank, up.path, up.got, up.size, up.got == up.size ? "differs" : "not checked"));
  }
}

void UploadReceiver::abort(int node_rank, const std::string& why) {
  auto& open = open_[static_cast<std::size_t>(node_rank)];
  if (!open) return;
  Upload& up = *open;
  if (up.fd) {
    up.fd.reset();
    unlinkat(up.dir.get(), up.leaf.c_str(), 0);
  }
  const bool refused = up.refused;
  open.reset();
  if (!refused) on_error_(node_rank, why);
}

void UploadReceiver::cut_short(int node_rank) {
  auto& open = open_[static_cast<std::size_t>(node_rank)];
  if (!open) return;
  open->refused = true;  // says nothing more than the loss
  abort(node_rank, {});
}

}  // namespace flowrun::cluster
