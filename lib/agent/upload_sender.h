// The agent's uploads after an attempt: each rank's error file and its
// collected outputs (FLOWRUN_OUTPUT_DIR), read beneath the scratch
// directory, sent in chunks with a CRC-32C each, never more than the
// connection's high-water mark queued at once. Internal to lib/agent.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <functional>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "flowrun/beneath.h"
#include "flowrun/connection.h"

namespace flowrun::cluster {

// Flow control: what the agent sends the head (its ranks' output, uploads)
// waits in the connection's queue (Connection::queued) until the socket
// takes it. Past kQueueHighWater queued bytes the agent stops reading its
// ranks' pipes (a rank that fills its pipe then blocks in write(2), as under
// a slow terminal) and reads them again once the queue is down to
// kQueueLowWater; an upload reads its next chunk only below kQueueHighWater.
// So the queue holds at most the mark plus one pipe read (256 KiB) or one
// upload chunk (256 KiB), however fast the ranks write and however slow the
// head or the network. Why 4 MiB:
// - memory: a few MiB per node, whatever the ranks write;
// - throughput: 4 MiB is 3 ms of a 10 Gbit/s link, on top of the kernel's
//   socket buffer, so a fast link never waits while the agent refills (it
//   resumes with 1 MiB still queued, and the ranks' pipes hold 1 MiB each);
// - latency: frames are not reordered, so a rank's exit, a stop or done
//   queued behind a full queue waits until at most 5 MiB (42 Mbit) are
//   written: 42 ms at 1 Gbit/s, 0.42 s at 100 Mbit/s, over the default
//   heartbeat_timeout (10 s) only below 4.2 Mbit/s. That delays the head's
//   decisions (stopping the other nodes), never its heartbeat check.
// Heartbeats do not need to jump the queue: the head counts every byte it
// reads from an agent as hearing from it (Connection::last_heard_ns), and
// the agent sends a heartbeat only when its queue is empty, so a link that
// moves the queue, however slowly, is never silent; the head's heartbeats
// come the other way, where output never queues.
constexpr std::size_t kQueueHighWater = 4 << 20;
constexpr std::size_t kQueueLowWater = 1 << 20;

class UploadSender {
 public:
  // `conn`: the connection to the head, whose loop `io` runs while the
  // queue is full. `lost`: whether the head is gone. `stop_reason`: why an
  // upload stops early (the head went away or said stop, or the agent
  // received SIGINT or SIGTERM); empty while it may go on.
  UploadSender(Connection& conn, boost::asio::io_context& io, std::function<bool()> lost,
               std::function<std::string()> stop_reason)
      : conn_(conn), io_(io), lost_(std::move(lost)), stop_reason_(std::move(stop_reason)) {}

  // Rank `rank`'s error.json in `dir` (a directory beneath `scratch`), and
  // its flight-recorder dump `nccl_trace` there (a file name; empty: none),
  // each when it is a regular file, then, with `outputs`, its out/ tree.
  // What could not be sent goes to `errors`, in the words the head reports.
  void send_rank(int rank, const std::string& scratch, const std::string& dir, bool outputs,
                 const std::string& nccl_trace, std::vector<std::string>& errors);

 private:
  void wait_for_queue();
  bool upload_file(int rank, const std::string& rel, UniqueFd fd, const struct stat& st,
                   std::vector<std::string>& errors);
  void upload_tree(int rank, const std::string& scratch, const std::string& dir,
                   std::vector<std::string>& errors);

  Connection& conn_;
  boost::asio::io_context& io_;
  std::function<bool()> lost_;
  std::function<std::string()> stop_reason_;
};

}  // namespace flowrun::cluster
