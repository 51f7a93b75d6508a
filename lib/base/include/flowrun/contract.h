// The environment contract: the variables flowrun computes for every worker,
// the same ones torchrun sets (see docs/environment in docs/plan.md).
//
// One list, used by the planner to set them and by the spec checker to refuse
// a spec `env:` that would overwrite one flowrun must control.
#pragma once

#include <string_view>
#include <vector>

namespace flowrun {

struct ContractVariable {
  std::string_view name;
  // A spec's env may set it (flowrun then keeps the user's value). False for
  // variables whose value must match the plan (RANK, WORLD_SIZE, ...).
  bool user_may_set;
  std::string_view meaning;
};

// Every variable flowrun sets, in the order worker_env() sets them.
const std::vector<ContractVariable>& contract_variables();

// The entry for `name`, or nullptr when flowrun does not set it.
const ContractVariable* find_contract_variable(std::string_view name);

}  // namespace flowrun
