// What `flowrun SPEC` in a requeued Slurm job decides: which earlier run of
// the job it resumes, and which restart counts that resume carries on.
//
// Slurm reruns a requeued job's batch script with the same SLURM_JOB_ID and
// SLURM_RESTART_COUNT one higher; every run records both in its run.json, so
// the run is found by them, not by a run id of its own: a job may run several
// specs, or the same spec with other arguments, and each finds its own run.
#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <tuple>

#include "flowrun/error.h"
#include "flowrun/flow.h"

namespace flowrun {

namespace fs = std::filesystem;

const RunRecord* pick_requeued_run(const RequeueQuestion& q, const std::vector<RunRecord>& runs) {
  const RunRecord* best = nullptr;
  for (const auto& run : runs) {
    if (q.gang) {
      if (run.gang_id.empty() || run.gang_id != q.job_id) continue;
      if (q.attempt && run.gang_attempt && *run.gang_attempt >= *q.attempt) continue;
    } else if (run.slurm_job_id != q.job_id || run.slurm_restart_count >= q.restart_count) {
      continue;
    }
    if (run.spec_file.empty() || run.spec_file != q.spec_file || run.args != q.args) continue;
    if (best == nullptr || std::tie(run.start_unix_ns, run.slurm_restart_count, run.run_id) >
                               std::tie(best->start_unix_ns, best->slurm_restart_count, best->run_id))
      best = &run;
  }
  return best;
}

std::vector<RunRecord> read_run_records(const std::string& runs_dir) {
  std::vector<RunRecord> records;
  std::error_code ec;
  for (fs::directory_iterator it(runs_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == "latest" || name.starts_with(".") || it->is_symlink(ec) || !it->is_directory(ec)) continue;
    try {
      records.push_back(read_run_record(it->path().string()));
    } catch (const Error&) {
      // A damaged run, or a directory of something else: not the run sought.
    }
  }
  return records;
}

std::map<std::string, int> carried_restart_counts(const Spec& now,
                                                  const std::vector<ResumeDecision>& decisions,
                                                  const std::map<std::string, PriorStep>& prior,
                                                  const RunRecord& record) {
  std::map<std::string, int> carried;
  for (const auto& d : decisions) {
    const Step* step = now.find_step(d.step);
    if (d.reuse || step == nullptr || !step->is_parallel()) continue;
    if (auto p = prior.find(d.step); p != prior.end() && p->second.outcome == "succeeded") continue;
    for (const auto& [name, count] : record.attempts_started) {
      if (name == d.step && count > 0) carried[d.step] = count;
    }
  }
  return carried;
}

std::string requeue_line(const RequeueQuestion& q, const RunRecord& record,
                         const std::vector<ResumeDecision>& decisions,
                         const std::map<std::string, PriorStep>& prior,
                         const std::map<std::string, int>& carried) {
  std::vector<std::string> kept, again;
  for (const auto& d : decisions) {
    const std::string name = "'" + d.step + "'";
    if (d.reuse) {
      kept.push_back(name);
    } else if (auto c = carried.find(d.step); c != carried.end()) {
      again.push_back(fmt::format("{} restarts at TORCHELASTIC_RESTART_COUNT={}", name, c->second));
    } else if (auto p = prior.find(d.step);
               p != prior.end() && (!p->second.outcome.empty() || p->second.state == "running")) {
      again.push_back(name + " runs again");
    }
  }
  std::string line =
      q.gang ? fmt::format("flowrun: resuming run {}: the gang's head started again ({}); ", record.run_id,
                           q.said)
             : fmt::format("flowrun: resuming run {}: Slurm job {} was requeued (SLURM_RESTART_COUNT={}); ",
                           record.run_id, q.job_id, q.restart_count);
  line += kept.empty() ? "no step kept" : "kept " + join(kept, ", ");
  for (const auto& part : again) line += "; " + part;
  return line;
}

}  // namespace flowrun
