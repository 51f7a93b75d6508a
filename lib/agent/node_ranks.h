// What an agent asks of the host it runs on: mark and reap what it starts,
// and run this node's ranks of an attempt as one group, reporting to the
// agent as the group's observer (output, exits, stalls, stops). The real
// one is a Supervisor with the agent's guardian; a test gives the agent a
// fake that scripts the ranks' output and exits, so that the head and
// agents run in one process. Internal to lib/agent.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "flowrun/agent.h"
#include "flowrun/process.h"
#include "flowrun/supervisor.h"

namespace flowrun::cluster {

class NodeRanks {
 public:
  virtual ~NodeRanks() = default;

  // Once, before the agent dials the head: `agent_id` marks every process
  // the agent starts from here on (FLOWRUN_AGENT_ID).
  virtual void begin(const std::string& agent_id) = 0;
  // The loop every socket and timer of the agent runs on.
  virtual boost::asio::io_context& io() = 0;
  // Removes `dir` when the agent ends, however it ends.
  virtual void remove_on_exit(const std::string& dir) = 0;
  // The agent ends in order: nothing more to clean up after it.
  virtual void disarm() = 0;

  // As Supervisor's: the attempt's ranks, run until every one has ended.
  virtual AttemptRecord run_group(const std::vector<WorkerLaunch>& launches, const GroupOptions& options,
                                  GroupObserver* observer) = 0;
  virtual void stop_group(Outcome why, bool stacks_first) = 0;
  virtual void kill_group() = 0;
  // The live ranks' stacks, now: the observer's on_stacks gets them.
  virtual void take_stacks(int request) = 0;
  virtual void signal_workers(int sig) = 0;
  virtual void sample_faster(double rate) = 0;
  virtual void pause_output() = 0;
  virtual void resume_output() = 0;
  virtual bool stopping() const = 0;
  // Whether rank `index`, which has ended, was ended by the stop
  // (Supervisor::ended_by_stop), not by itself.
  virtual bool ended_by_stop(std::size_t index) const = 0;
  // The agent's first stop signal (0: none); interrupt_signal() also
  // delivers one that arrived while the loop did not run.
  virtual int interrupt_signal() = 0;
  virtual int interrupt_received() const = 0;
};

// The real one: the agent's guardian, and a Supervisor that does not take a
// repeated SIGINT as a kill (the agent's stops come from the head or from
// Slurm).
class SupervisedRanks : public NodeRanks {
 public:
  void begin(const std::string& agent_id) override;
  boost::asio::io_context& io() override { return supervisor_->io(); }
  void remove_on_exit(const std::string& dir) override { guardian_.remove_on_exit(dir); }
  void disarm() override { guardian_.disarm(); }
  AttemptRecord run_group(const std::vector<WorkerLaunch>& launches, const GroupOptions& options,
                          GroupObserver* observer) override {
    return supervisor_->run_group(launches, options, observer);
  }
  void stop_group(Outcome why, bool stacks_first) override { supervisor_->stop_group(why, stacks_first); }
  void kill_group() override { supervisor_->kill_group(); }
  void take_stacks(int request) override { supervisor_->take_stacks(request); }
  void signal_workers(int sig) override { supervisor_->signal_workers(sig); }
  void sample_faster(double rate) override { supervisor_->sample_faster(rate); }
  void pause_output() override { supervisor_->pause_output(); }
  void resume_output() override { supervisor_->resume_output(); }
  bool stopping() const override { return supervisor_->stopping(); }
  bool ended_by_stop(std::size_t index) const override { return supervisor_->ended_by_stop(index); }
  int interrupt_signal() override { return supervisor_->interrupt_signal(); }
  int interrupt_received() const override { return supervisor_->interrupt_received(); }

 private:
  Console console_;
  Guardian guardian_;
  std::optional<Supervisor> supervisor_;  // made in begin(), once the guardian runs
};

// run_agent over `ranks` (a SupervisedRanks, or a test's fake).
int run_agent_on(const AgentOptions& options, const EnvMap& env, NodeRanks& ranks);

}  // namespace flowrun::cluster
