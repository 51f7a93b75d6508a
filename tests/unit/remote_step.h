// One multi-node step planned as the head plans it, for the head's tests:
// the spec of `text` (read in `dir`), its plan on a head with no GPU, and
// the NodeStep the head is given (run directory `dir`/run, grace 1 s, no
// rank shown on the console, the step's stall_timeout). Not copyable: the
// NodeStep points into the spec and the plan.
#pragma once

#include <catch2/catch.hpp>
#include <string>

#include "flowrun/gpu.h"
#include "flowrun/plan.h"
#include "flowrun/remote_group.h"
#include "flowrun/spec.h"

namespace flowrun::testing {

struct RemoteStep {
  RemoteStep(const std::string& text, const std::string& dir) {
    SpecParse parse = parse_spec(text, "flow.yaml", dir);
    INFO(text);
    REQUIRE(parse.diagnostics.empty());
    spec = std::move(*parse.spec);
    SystemGpus none;
    none.source = "none";
    const auto plans = plan_flow(spec, HostFacts{"head", select_gpus(none, {}), {}, {}, {}}, {});
    REQUIRE(plans.size() == 1);
    plan = plans.front();
    REQUIRE(plan.mode == PlanMode::multi_node);
    job.spec = &spec;
    job.step = &spec.steps.front();
    job.plan = &plan;
    job.ctx.run_id = "t-1";
    job.ctx.layout.run_dir = dir + "/run";
    job.ctx.parent_env = {{"PATH", "/usr/bin:/bin"}};
    job.argv = job.step->argv;
    job.group.step = job.step->name;
    job.group.grace_s = 1;
    if (job.step->stall_timeout_s) job.group.stall_timeout_s = job.step->stall_timeout_s;
    job.shows = [](int, int) { return ConsoleShows::none(); };
  }
  RemoteStep(const RemoteStep&) = delete;
  RemoteStep& operator=(const RemoteStep&) = delete;

  Spec spec;
  StepPlan plan;
  NodeStep job;
};

}  // namespace flowrun::testing
