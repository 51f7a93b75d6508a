// What the result module's files share and no other module sees: the names
// results.json and the failure report both give (defined in result.cpp).
#pragma once

#include "flowrun/result.h"

namespace flowrun::result_detail {

// How a rank that flowrun stopped ended: "exited", "signaled" or "killed";
// nullptr for a rank flowrun did not stop, or one that never ran.
const char* teardown_name(const WorkerRecord& w);

// "succeeded", "failed", "timed_out", "interrupted", "stalled".
const char* outcome_name(Outcome outcome);

}  // namespace flowrun::result_detail
