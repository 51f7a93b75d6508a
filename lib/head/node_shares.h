// The samples of a multi-node step's ranks as the head gathers them: each
// node's agent samples its own ranks' stacks (forensics' sample) and sends
// their tallies (Shares), each one whole; the head keeps every node's
// together, names the slow rank once the evidence across all ranks does
// (once per attempt, with its node), rewrites the step's shares.json for
// flowrun status, and gives the attempt's shares to its record. Internal to
// lib/head.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "flowrun/messages.h"
#include "flowrun/plan.h"
#include "flowrun/result.h"
#include "flowrun/wait_shares.h"

namespace flowrun::cluster {

class NodeShares {
 public:
  using Say = std::function<void(const std::string& line)>;
  // Every node is told to sample `rate` times as often (SampleRate).
  using Hurry = std::function<void(int rate)>;
  NodeShares(const StepPlan& plan, std::string shares_file, Say say, Hurry hurry)
      : plan_(plan), shares_file_(std::move(shares_file)), say_(std::move(say)), hurry_(std::move(hurry)) {}

  // A new attempt, sampled every `sample_s` (0: not sampled).
  void reset(int attempt, double sample_s);
  // Node `node` (`name`) sent `m`. Returns what is wrong with it (a rank that
  // does not run there), or nullopt; tallies of an earlier attempt are
  // dropped. A suspect among every node's ranks, not yet named, makes every
  // node sample kSuspectRate times as often, until one is named or the
  // suspicion goes: an agent sees only its own node's ranks, and so cannot
  // suspect one itself.
  std::optional<std::string> take(int node, const std::string& name, const Shares& m);
  // The attempt's shares; nullopt when no node sent any.
  std::optional<WaitShares> record();

 private:
  void write_file();

  const StepPlan& plan_;
  std::string shares_file_;
  Say say_;
  Hurry hurry_;
  ShareTally tally_;
  std::map<int, std::string> node_of_;  // rank -> its node's name
  int attempt_ = 0;
  int rate_ = 1;  // what the nodes were told
  double sample_s_ = 0;
  bool said_ = false;
  std::int64_t written_mono_ = 0;
};

}  // namespace flowrun::cluster
