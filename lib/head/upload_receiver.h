// The head's side of the agents' uploads (docs/multinode.md, "Uploads"): a
// rank's error.json and the files under its out/, sent one at a time per
// node, announced with their size and checked against their CRC-32C, and
// written beneath the rank's directory of the run without following a
// symlink. Internal to lib/head.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flowrun/beneath.h"
#include "flowrun/messages.h"
#include "flowrun/plan.h"
#include "flowrun/protocol.h"

namespace flowrun::cluster {

class UploadReceiver {
 public:
  // What went wrong with an upload of node `node_rank`, said once per upload
  // (the head records it, and stops the nodes while the ranks run).
  using ErrorHandler = std::function<void(int node_rank, const std::string& what)>;

  // The uploads of `plan`'s nodes, into `layout`'s rank directories.
  // `write_error` is the run's first file that could not be written: a
  // write that fails sets it when it is empty, and says the failure only
  // then (the uploads after it fail for the same reason).
  UploadReceiver(const StepPlan& plan, const RunLayout& layout, std::string& write_error,
                 ErrorHandler on_error);

  // UploadBegin from node `node_rank`: the file is made (error.json replaced)
  // or, for a rank that does not run there, a path that is not error.json or
  // under out/, or a directory that is a symlink, refused (said; its data is
  // then dropped). One upload still open is aborted first.
  void begin(int node_rank, const UploadBegin& m);
  // Its bytes: more than announced aborts it, as a failed write does.
  void data(int node_rank, std::string_view data);
  // UploadHole: the file's next `bytes` are a hole, left as one (skipped,
  // and the length set at the end); beyond the size announced, or not
  // positive, it aborts the upload.
  void hole(int node_rank, std::int64_t bytes);
  // UploadEnd: a file of the wrong size or checksum is removed and said.
  void end(int node_rank, const UploadEnd& m);
  // Ends the node's open upload, if any, removing the part that came, and
  // says `why` unless it was refused already.
  void abort(int node_rank, const std::string& why);
  // The node is lost: its open upload is removed, saying nothing.
  void cut_short(int node_rank);

 private:
  struct Upload {
    int rank = -1;
    std::string path;  // printable(), for messages
    UniqueFd fd;
    UniqueFd dir;      // the directory it is made in, to remove it from (unlinkat)
    std::string leaf;  // its name there
    std::int64_t size = 0;
    std::int64_t got = 0;
    Crc32c crc;
    bool refused = false;
  };

  const StepPlan& plan_;
  const RunLayout& layout_;
  std::string& write_error_;
  ErrorHandler on_error_;
  std::vector<std::optional<Upload>> open_;  // by node rank

  void write_failed(int node_rank, Upload& up, int err);
};

}  // namespace flowrun::cluster
