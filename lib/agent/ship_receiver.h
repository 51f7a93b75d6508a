// The agent's side of a shipment: the files the head sends a node that does
// not share its workdir (ShipBegin, ShipChunk..., ShipEnd per file, then
// ShipDone), written beneath a directory of the agent's private scratch
// (<scratch>/work), where the node's ranks then run. Each path is checked
// (safe_relative_path) and created beneath that directory with nothing
// followed on the way; each file's size and CRC-32C are checked against
// the head's. Internal to lib/agent.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "flowrun/fd.h"
#include "flowrun/messages.h"
#include "flowrun/protocol.h"

namespace flowrun::cluster {

class ShipReceiver {
 public:
  // The files go beneath `root`, made (mode 0700) with the first file.
  explicit ShipReceiver(std::string root) : root_(std::move(root)) {}

  const std::string& root() const { return root_; }

  void begin(const ShipBegin& m);
  void data(std::string_view data);
  void end(const ShipEnd& m);
  // The shipment is complete: the answer for the head. Not ok with the
  // first thing that went wrong, naming its file ("data/x.txt: ..."); a
  // file that failed its checks is not left behind.
  ShipAck done(const ShipDone& m);

  // A shipment ended with ShipDone and every file arrived whole: the
  // node's ranks run in root().
  bool received() const { return received_; }

 private:
  struct File {
    std::string path;  // as checked, for messages
    std::int64_t bytes = 0;
    std::int64_t got = 0;
    UniqueFd fd;
    UniqueFd dir;      // the directory it is in, to unlink it
    std::string leaf;  // its last component
    Crc32c crc;
  };

  // Keeps the first error; the file being written, if any, is removed.
  void fail(std::string why);
  void drop_open_file();

  std::string root_;
  std::optional<File> open_;
  std::set<std::string> seen_;          // every path begun, checked
  std::string error_;                   // the first thing that went wrong
  std::int64_t files_ = 0, bytes_ = 0;  // complete files, and their bytes
  bool received_ = false;
};

// The shipment of the step an agent is assigned: its frames to a
// ShipReceiver beneath <scratch>/work, made on the first file, and forgotten
// (the directory removed) when the agent is assigned another step.
class StepShipment {
 public:
  // `scratch`: the agent's scratch directory, made on first use; it throws
  // Error when it cannot be made.
  explicit StepShipment(std::function<std::string()> scratch) : scratch_(std::move(scratch)) {}

  // A ship_chunk frame, read in place (true), or another frame (false).
  bool take_chunk(const Frame& frame);
  void take(const ShipBegin& m);
  void take(const ShipChunk& m);
  void take(const ShipEnd& m);
  ShipAck take(const ShipDone& m);

  // Another step: what was shipped is not its inputs. What cannot be
  // removed now goes with the scratch directory when the agent ends.
  void forget();

  // Where the node's ranks run: its copy of the inputs once one came whole.
  std::optional<std::string> workdir() const;

  // `argv` for a rank that runs in the copy: each path under the head's
  // `head_workdir` in it (${steps.NAME.outputs}, which the head expands to
  // its run directory's path) made the same path under the copy, where the
  // head shipped those files; as is when nothing came.
  std::vector<std::string> in_copy(std::vector<std::string> argv, const std::string& head_workdir) const;

 private:
  std::function<std::string()> scratch_;
  std::optional<ShipReceiver> receiver_;
  std::string error_;  // the scratch directory could not be made
};

}  // namespace flowrun::cluster
