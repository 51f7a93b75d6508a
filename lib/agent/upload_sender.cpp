#include "upload_sender.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <unistd.h>

#include "flowrun/join.h"
#include "flowrun/messages.h"
#include "flowrun/protocol.h"

namespace flowrun::cluster {

namespace {

// As the head's ShipChunk (kShipChunk): a chunk small enough to stay in a
// core's cache from the read to the socket.
constexpr std::size_t kUploadChunk = 256 << 10;

}  // namespace

void UploadSender::send_rank(int rank, const std::string& scratch, const std::string& dir, bool outputs,
                             const std::string& nccl_trace, std::vector<std::string>& errors) {
  // The rank's directory is reached from the scratch directory without
  // following a symlink, and error.json and the dump are read only when
  // each is a regular file there (a FIFO in its place is not opened). A
  // failed attempt's dump is what the head's report points at, so it goes
  // up whether or not the attempt succeeded.
  const BeneathRoot root = BeneathRoot::open_under(scratch, dir, false);
  for (const std::string& name : {std::string("error.json"), nccl_trace}) {
    struct stat st {};
    if (name.empty()) continue;
    if (const int fd = root.open_regular(name, Links::none, &st); fd >= 0) {
      if (!upload_file(rank, name, UniqueFd(fd), st, errors)) return;
    }
  }
  if (outputs) upload_tree(rank, scratch, dir, errors);
}

// Waits while kQueueHighWater bytes or more are queued (the head reads at
// its pace; memory stays bounded).
void UploadSender::wait_for_queue() {
  while (conn_.is_open() && !lost_() && conn_.queued() >= kQueueHighWater) io_.run_one();
}

namespace {

// Where the data at or after `at` in `fd` starts and ends, within `size`:
// {size, size} when only a hole is left. A file system without SEEK_DATA
// has no holes to tell: the rest is data.
std::pair<std::int64_t, std::int64_t> next_data(int fd, std::int64_t at, std::int64_t size) {
  off_t data = lseek(fd, at, SEEK_DATA);
  if (data < 0) data = errno == ENXIO ? size : at;
  data = std::min<off_t>(data, size);
  off_t hole = data < size ? lseek(fd, data, SEEK_HOLE) : size;
  if (hole <= data || hole > size) hole = size;  // no SEEK_HOLE, or the file changed: read on
  return {data, hole};
}

}  // namespace

// Sends the open regular file `fd` (`st` its fstat) as rank's `rel`: its
// data in chunks, its holes (SEEK_HOLE) as UploadHole, never as zeros.
// Returns false when the upload stopped (the head is gone).
bool UploadSender::upload_file(int rank, const std::string& rel, UniqueFd fd, const struct stat& st,
                               std::vector<std::string>& errors) {
  conn_.send(UploadBegin{rank, rel, st.st_size});
  Crc32c crc;
  std::int64_t sent = 0;  // data and holes
  int read_error = 0;
  while (sent < st.st_size) {
    wait_for_queue();  // the next chunk is read only once the queue is below the mark
    if (lost_()) break;
    const auto [data, hole] = next_data(fd.get(), sent, st.st_size);
    if (data > sent) {
      conn_.send(UploadHole{data - sent});
      crc.update(upload_hole_crc_bytes(data - sent));
      sent = data;
      continue;
    }
    const auto want = static_cast<std::size_t>(std::min<std::int64_t>(kUploadChunk, hole - sent));
    std::string frame = upload_chunk_frame_to_fill(want);  // the file is read into it in place
    char* into = frame.data() + (frame.size() - want);
    const ssize_t n = pread(fd.get(), into, want, sent);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) read_error = errno;  // EAGAIN too: the fd is O_NONBLOCK, a read that would wait is no content
    if (n <= 0) break;
    const auto got = static_cast<std::size_t>(n);  // at most want, which stops at the size fstat gave
    if (got < want) chunk_frame_cut(frame, got);
    crc.update(std::string_view(into, got));
    conn_.send_frame(std::move(frame));
    sent += static_cast<std::int64_t>(got);
  }
  conn_.send(UploadEnd{rel, crc.hex()});
  if (read_error != 0)
    errors.push_back(fmt::format("rank {}: cannot read {}: {}", rank, rel, std::strerror(read_error)));
  else if (sent != st.st_size)
    errors.push_back(fmt::format("rank {}: {} changed while it was uploaded", rank, rel));
  return !lost_();
}

// The rank's FLOWRUN_OUTPUT_DIR, walked as gathering on one node walks it
// (scan_rank_output: the same refusals in the same words), each file read
// through an fd opened beneath it. Stops between files, and says so, when
// the head goes away or stops the step, or the agent is interrupted.
void UploadSender::upload_tree(int rank, const std::string& scratch, const std::string& dir,
                               std::vector<std::string>& errors) {
  auto stop = [this] { return !stop_reason_().empty(); };
  RankOutput out = scan_rank_output(rank, scratch, dir + "/out", stop);
  for (auto& e : out.errors) errors.push_back(std::move(e));
  std::size_t done = 0;
  for (const auto& f : out.files) {
    if (stop()) break;
    ++done;
    struct stat st {};
    const int fd = out.root.open_regular(f.rel, Links::beneath, &st);
    if (fd == kNotRegular) {
      errors.push_back(fmt::format("rank {}: FLOWRUN_OUTPUT_DIR/{} is now {}, not a regular file; refused",
                                   rank, f.rel, file_type_name(st.st_mode)));
    } else if (fd < 0) {
      errors.push_back(fmt::format("rank {}: cannot read out/{}: {}", rank, f.rel, std::strerror(errno)));
    } else if (!upload_file(rank, "out/" + f.rel, UniqueFd(fd), st, errors)) {
      return;
    }
  }
  if (const std::string why = stop_reason_();
      !why.empty() && !lost_() && (out.stopped || done < out.files.size()))
    errors.push_back(
        fmt::format("rank {}: the upload of FLOWRUN_OUTPUT_DIR stopped ({}); {} of its {} files not uploaded",
                    rank, why, out.files.size() - done, out.files.size()));
}

}  // namespace flowrun::cluster
