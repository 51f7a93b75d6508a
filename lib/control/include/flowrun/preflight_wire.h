// The preflight's sweep and communicator part on the wire: the protocol
// module mirrors them as plain fields of Preflight (it links nothing above
// flowrun_base); these are the one conversion, the head's way and the
// agent's way.
#pragma once

#include <utility>
#include <vector>

#include "flowrun/doctor.h"
#include "flowrun/messages.h"

namespace flowrun::cluster {

inline Preflight preflight_message(std::vector<int> devices, const AllReduceSweep& sweep,
                                   const NcclPart& part) {
  Preflight m;
  m.devices = std::move(devices);
  m.nranks = part.nranks;
  m.first_rank = part.first_rank;
  m.nccl_id = part.nccl_id;
  m.min_bytes = sweep.min_bytes;
  m.max_bytes = sweep.max_bytes;
  m.factor = sweep.factor;
  m.warmup = sweep.warmup;
  m.iters = sweep.iters;
  m.timeout_s = sweep.timeout_s;
  return m;
}

inline AllReduceSweep sweep_of(const Preflight& m) {
  return {m.min_bytes, m.max_bytes, m.factor, m.warmup, m.iters, m.timeout_s};
}

inline NcclPart part_of(const Preflight& m) { return {m.nranks, m.first_rank, m.nccl_id}; }

}  // namespace flowrun::cluster
