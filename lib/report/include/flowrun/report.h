// What flowrun shows people and machines: the plan (`flowrun plan`), the GPU
// inventory (`flowrun gpus`) and a validated spec (`flowrun validate`), as
// text and as JSON. Pure formatting: every function returns a string.
#pragma once

#include <string>
#include <vector>

#include "flowrun/plan.h"

namespace flowrun {

struct PlanView {
  const Spec& spec;
  const HostFacts& host;
  const std::vector<StepPlan>& plans;  // one per parallel step, in flow order
  const LaunchContext& ctx;            // run id, run directory, parent env
  bool show_env = false;               // text: every worker's variables, not a summary
};

// `flowrun plan`: where every rank runs and why, in plain words and tables.
std::string format_plan_text(const PlanView& view);

// `flowrun plan --json` (and a run's plan.json): the same, with every
// worker's environment. The first key is "format": "flowrun.plan/1"; later
// versions only add keys.
std::string format_plan_json(const PlanView& view);

// `flowrun gpus` and `flowrun gpus --json` (its first key "format":
// "flowrun.gpus/1").
std::string format_gpus_text(const Inventory& inventory, const std::string& hostname);
std::string format_gpus_json(const Inventory& inventory, const std::string& hostname);

// `flowrun validate`: "FILE: ok: 3 steps: prepare, train (parallel), evaluate (join of train)".
std::string format_validate_ok(const Spec& spec);

}  // namespace flowrun
