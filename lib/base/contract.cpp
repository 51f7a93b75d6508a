#include "flowrun/contract.h"

namespace flowrun {

// The first block is what torchrun's LocalElasticAgent._start_workers sets,
// in its order; then what torchrun's process context adds (the error file),
// what torch.distributed.run sets (OMP_NUM_THREADS), the device selection,
// and flowrun's own variables.
const std::vector<ContractVariable>& contract_variables() {
  static const std::vector<ContractVariable> kVariables = {
      {"LOCAL_RANK", false, "rank of the worker on its node, 0..LOCAL_WORLD_SIZE-1"},
      {"RANK", false, "global rank, 0..WORLD_SIZE-1"},
      {"GROUP_RANK", false, "rank of the worker's node, 0..GROUP_WORLD_SIZE-1"},
      {"ROLE_RANK", false, "rank within the role; equals RANK (one role)"},
      {"ROLE_NAME", false, "the role: parallel.role (torchrun's --role), default 'default'"},
      {"LOCAL_WORLD_SIZE", false, "workers on this node"},
      {"WORLD_SIZE", false, "workers in the step, over all nodes"},
      {"GROUP_WORLD_SIZE", false, "nodes in the step"},
      {"ROLE_WORLD_SIZE", false, "workers in the role; equals WORLD_SIZE"},
      {"MASTER_ADDR", false, "where rank 0 listens for init_process_group(init_method='env://')"},
      {"MASTER_PORT", false, "a free port flowrun picks for each launch"},
      {"TORCHELASTIC_RESTART_COUNT", false, "how many times the step's workers were restarted"},
      {"TORCHELASTIC_MAX_RESTARTS", false, "parallel.max_restarts"},
      {"TORCHELASTIC_RUN_ID", false,
       "parallel.job_id (torchrun's --rdzv-id), else the run id; Lightning reads its presence as 'launched "
       "externally'"},
      {"TORCHELASTIC_USE_AGENT_STORE", false, "always False: workers create their own store"},
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", true,
       "1 unless set: NCCL errors abort instead of hanging (torch 2.x)"},
      {"NCCL_ASYNC_ERROR_HANDLING", true, "the same for torch 1.x"},
      {"PYTHONUNBUFFERED", true, "1 unless set: Python writes every line at once, as torchrun's python -u"},
      {"TORCHELASTIC_ERROR_FILE", false, "per-rank file where torch's @record writes a failure's traceback"},
      {"OMP_NUM_THREADS", true, "1 when unset and more than one worker runs on a node"},
      {"CUDA_VISIBLE_DEVICES", false, "the node's selected GPUs; select them with parallel.gpus"},
      {"FLOWRUN_RUN_ID", false, "the run id (TORCHELASTIC_RUN_ID too, unless parallel.job_id)"},
      {"FLOWRUN_STEP", false, "the step's name"},
      {"FLOWRUN_NODES", false, "nodes in the step (same as GROUP_WORLD_SIZE)"},
      {"FLOWRUN_NODE_RANK", false, "the worker's node (same as GROUP_RANK)"},
      {"FLOWRUN_RUN_DIR", false, "the run directory"},
      {"FLOWRUN_OUTPUT_DIR", false, "a private directory whose files count as the rank's outputs"},
      {"FLOWRUN_INPUTS", false, "join steps: the directory holding the joined step's outputs"},
  };
  return kVariables;
}

const ContractVariable* find_contract_variable(std::string_view name) {
  for (const auto& variable : contract_variables()) {
    if (variable.name == name) return &variable;
  }
  return nullptr;
}

}  // namespace flowrun
