// The ranks of a multi-node step's attempt as the head sees them, by global
// rank: each one's record (what its agent reported), whether it exited or
// was stopped, and its log files and console lines (RankLog). Internal to
// lib/head.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "flowrun/messages.h"
#include "flowrun/rank_output.h"
#include "flowrun/remote_group.h"
#include "flowrun/result.h"

#include "node_table.h"
#include "rank_files.h"

namespace flowrun::cluster {

struct RankState {
  WorkerRecord record;
  bool stopped = false;
  bool exited = false;
  std::unique_ptr<RankLog> log;  // from the attempt's start
  std::string end_file;          // its end.json, written when it ends (RunLayout::end_file)
};

class RankTable {
 public:
  RankTable(const NodeStep& job, ConsoleBatch& batch);

  // Rank `rank` if node `node` runs it, else null (a node's report of a rank
  // not its own).
  RankState* of(const Node& node, int rank);

  // Output `m` of a rank of `n`: kept in its log (`failed` when the file
  // cannot be written) and shown; false when no such rank writes.
  bool output(const Node& n, const Output& m, const std::function<void(const RankLog::WriteError&)>& failed);
  // A rank of `n` ended as `m` says: its record, or null for no such rank
  // or one that had ended.
  const WorkerRecord* exited(const Node& n, const Exited& m);

  // Closes the last attempt's files and forgets its ranks.
  void reset();
  // Attempt `attempt`, started at `start_ns` with `ctx`: every rank running
  // on its node, its log files opened (and emptied) when it first writes.
  void start(const LaunchContext& ctx, const NodeTable& nodes, int attempt, std::int64_t start_ns);
  // Closes the attempt's log files; a stream that never wrote gets its
  // (empty) file through the lanes.
  void close_files();
  // Returns once the file work handed to the lanes so far is done: the
  // ranks' end records and logs all exist. Any thread.
  void settle() { files_.settle(); }
  // Node `n` is lost: its ranks that had not exited are lost with it.
  void lose(const Node& n, const std::string& why, std::int64_t now_ns);

  // What the attempt's ranks did, into `attempt`, in rank order, with the
  // ranks that were stopped in `stopped`. A rank that died of Slurm's
  // signal on a node whose agent was signalled counts as stopped.
  struct Summary {
    std::vector<int> stopped;
    bool failed = false;     // a rank did not succeed
    bool signalled = false;  // a node's agent was signalled
  };
  Summary record(const NodeTable& nodes, AttemptRecord& attempt);

 private:
  void open_log(RankState& r, const Node& n);
  void write_end(const RankState& r);

  const NodeStep& job_;
  const StepPlan& plan_;
  ConsoleBatch& batch_;
  std::vector<RankState> ranks_;
  RankFiles files_;  // last: its lanes end before what they write about
};

}  // namespace flowrun::cluster
