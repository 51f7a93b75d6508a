// The restart policy of a parallel step: after an attempt ends, whether
// another starts, and why or why not, in the words the console's restart
// line, the failure report ("not restarting: ...") and results.json's
// restart_reason show. Pure: the step runner gathers the facts (the
// attempt's cause, classify_failure's; whether the progress file changed)
// and asks.
//
// The decision, in this order (the first that applies decides):
//   1. an attempt that succeeded, or any attempt of a step with
//      max_restarts 0: no restart, no reason (nothing was to decide);
//   2. one that timed out, stalled or was interrupted, or any attempt once
//      flowrun received a stop signal, never restarts;
//   3. nor one after flowrun's own trouble: a run directory it could not
//      write, its own errors (a node's, an upload's), a node gone (a restart
//      needs every node the step started with) unless a spare waits for
//      every node gone (parallel.spare_nodes): then the step restarts,
//      whatever the cause and max_restarts say, and that restart does not
//      count to max_restarts (the spares bound it); likewise an elastic
//      step (parallel.nodes: "MIN:MAX") whose nodes left are at least MIN
//      goes on with them (the range bounds it);
//   4. max_restarts restarts have run (not counting the spares' restarts,
//      nor the attempts of an earlier run the count continues);
//   5. without a `restart:` policy, torchrun's rule: every failure restarts;
//   6. with one, the cause must be one it restarts: restart.causes, or for
//      an exit code, restart.exit_codes when it lists any;
//   7. and the attempt must have made progress. The measures the user
//      states replace the built-in one:
//        - progress_file: it changed during the attempt;
//        - min_attempt: the attempt ran at least that long, or failed
//          otherwise than the attempt before it (failed_alike);
//        - neither: the attempt did not raise the same exception (type,
//          message, file and line) as the attempt before it.
//      With both stated, each must see progress.
#pragma once

#include <optional>
#include <string>

#include "flowrun/plan.h"
#include "flowrun/result.h"

namespace flowrun {

// What the step runner knows once an attempt has ended.
struct RestartQuestion {
  const AttemptRecord* last = nullptr;      // the attempt that ended, its cause classified
  const AttemptRecord* previous = nullptr;  // the attempt before it; nullptr for the first
  bool node_gone = false;                   // AttemptResult::node_gone
  bool spare_ready = false;                 // AttemptResult::spare_ready
  bool spares_planned = false;              // the step has parallel.spare_nodes
  // Of the restarts so far (last->restart_count), those that a spare's
  // taking a lost node's place started: they do not count to max_restarts.
  int spare_restarts = 0;
  // An elastic step (parallel.nodes: "MIN:MAX", min_nodes > 0): the nodes
  // the next attempt gets (AttemptResult::elastic_nodes), and of the
  // restarts so far those that went on without a node gone (not counted).
  std::optional<int> elastic_nodes;
  int min_nodes = 0, max_nodes = 0;
  int elastic_restarts = 0;
  // The count the step's first attempt in this run continued (a requeued
  // Slurm job's run): those attempts do not count to max_restarts either.
  int carried_restarts = 0;
  bool errors = false;  // flowrun's own errors, this attempt's or earlier
  int interrupt = 0;    // the first stop signal flowrun received (0: none)
  int max_restarts = 0;
  // Whether restart.progress_file changed during `last`; nullopt without one.
  std::optional<bool> progress_file_changed;
};

struct RestartDecision {
  bool restart = false;
  // "a signal restarts", "restart.causes leaves out exception", ...: reads
  // after "restarting ...: " or "not restarting: ". Empty when there was
  // nothing to decide (rule 1 above).
  std::string reason;
};

RestartDecision decide_restart(const RestartPolicy& policy, const RestartQuestion& question);

// Whether two failed attempts failed the same way: the same cause and, for
// an exception, the same one (type, message, file and line; else the same
// exit code), for an exit code or a signal the culprit's same code or signal.
// Which rank failed does not matter: ranks race to fail first.
bool failed_alike(const AttemptRecord& a, const AttemptRecord& b);

}  // namespace flowrun
