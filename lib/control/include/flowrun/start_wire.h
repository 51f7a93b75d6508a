// A node's part of a step's launch (the plan module's NodeWork) on the wire:
// the head sends each node its NodeWork in a Start, and the agent makes its
// ranks' environment from the NodeWork it reads back. Shared by the head
// and the agent, which never link each other.
#pragma once

#include "flowrun/messages.h"
#include "flowrun/worker_env.h"

namespace flowrun::cluster {

// The Start that carries `work`. The caller adds the workdir, the argv and
// each rank's upload flag, which worker_env does not read.
Start start_of(const NodeWork& work);

// The NodeWork a Start carries: start_of's inverse. A decoded Start's env
// entries are all NAME=value (decode_message checks them).
NodeWork node_work_of(const Start& start);

}  // namespace flowrun::cluster
