// What the doctor's reports share: one host's verdict (doctor_report.cpp),
// its text (doctor_text.cpp) and the verdict across nodes with its text
// (cluster_doctor.cpp): the words, the all-reduce's figures and the tables
// both reports print. No other module sees it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "flowrun/doctor.h"

namespace flowrun::doctor_detail {

// "12.8" from cudaRuntimeGetVersion's 12080; "none" when there is none.
std::string cuda_version(int version);

// "2.28.9" from ncclGetVersion's 22809; "unknown" when there is none.
std::string nccl_version(int version);

// The large-message figure: the best bus bandwidth among correct sizes of
// kLargeMessageBytes and more, and the row it came from; null when none.
const AllReduceRow* best_large_row(const AllReduceFacts& allreduce, int gpus);

// "1 MiB (3 elements)" for each size whose sums were wrong.
std::vector<std::string> wrong_sizes(const AllReduceFacts& allreduce);

// In doctor_text.cpp, the rest in doctor_report.cpp.

// The sweep's table, as nccl-tests prints one.
std::string allreduce_table(const AllReduceFacts& ar);

// "Checks:", a line each, and the verdict.
std::string checks_and_verdict(const DoctorReport& report);

}  // namespace flowrun::doctor_detail
