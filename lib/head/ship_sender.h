// The head's side of a shipment: what a node that does not share the
// workdir needs for a step's ranks (the step's inputs: globs, the outputs
// of the parallel steps it needs, the script its command names), listed once
// per step (ship_list), and each node's copy sent over its link file by
// file, in chunks, never more than kShipHighWater queued at once, each file
// with its CRC-32C (ShipSender). The agent's side is
// lib/agent/ship_receiver.cpp. Internal to lib/head.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "flowrun/fd.h"
#include "flowrun/node_link.h"
#include "flowrun/protocol.h"
#include "flowrun/remote_group.h"

namespace flowrun::cluster {

// One file to ship: where the ranks find it (relative to the workdir) and
// where the head reads it.
struct ShipFile {
  std::string rel;
  std::string path;
  std::int64_t bytes = 0;
  int mode = 0;
  // Its CRC-32C, computed once for every node: every node's sender reads
  // the file in the same chunks, and the one furthest on adds each next
  // chunk (`summed` bytes so far); `crc32c` is set when it reached the end.
  // A node whose sender read other bytes (the file changed in between)
  // finds that its copy's checksum differs.
  struct Digest {
    std::int64_t summed = 0;
    Crc32c crc;
    std::string crc32c;
  };
  std::shared_ptr<Digest> digest = std::make_shared<Digest>();
};

struct ShipList {
  std::vector<ShipFile> files;  // sorted by rel, each once
  std::int64_t bytes = 0;
  std::vector<std::string> errors;  // what is refused (a symlink out of the workdir), by name
};

// What a step's ranks need on a node without the workdir, read from the
// head's disk: every regular file under the step's workdir that one of its
// inputs: globs matches (a symlink that stays in the workdir as its target's
// content; one that leaves it refused), the collected outputs of each
// parallel step it needs (the run directory's <dep>/outputs, at its path
// relative to the workdir), and each word of its command that names a file
// in the workdir (`python3 train.py`: train.py).
ShipList ship_list(const NodeStep& job);

// The text of a shipment's size: "3 files (1.2 MiB)".
std::string ship_size_text(const ShipList& list);

// Bytes a shipment leaves queued on a link before it waits for the link to
// write them (the agent's uploads pace on the same mark, upload_sender.h).
inline constexpr std::size_t kShipHighWater = 4 << 20;
// The data of one ShipChunk: small enough that its bytes stay in a core's
// cache from the read through sealing, hashing and the socket's copy on
// each side (a 1 MiB chunk does not).
inline constexpr std::size_t kShipChunk = 256 << 10;

// One node's shipment: ShipBegin, ShipChunk..., ShipEnd for each file of
// `list`, then ShipDone; the next chunk is read as the link's queue drains
// (NodeLink::set_sent_handler). A file that cannot be read, or that changed
// size, is `failed` with its name; the rest is not sent.
class ShipSender {
 public:
  ShipSender(std::shared_ptr<NodeLink> link, const ShipList& list,
             std::function<void(const std::string&)> failed);
  ~ShipSender();  // the link's sent handler goes with it
  ShipSender(const ShipSender&) = delete;
  ShipSender& operator=(const ShipSender&) = delete;

  // Sends until the queue is full; the link's sent handler goes on.
  void start();
  bool finished() const { return finished_; }

 private:
  void pump();
  bool open_next();

  std::shared_ptr<NodeLink> link_;
  const ShipList& list_;
  std::function<void(const std::string&)> failed_;
  std::size_t next_ = 0;  // the file after the one open
  UniqueFd fd_;
  std::int64_t at_ = 0;
  bool finished_ = false;
};

}  // namespace flowrun::cluster
