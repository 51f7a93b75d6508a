// Which gang a node is a node of, across the head's restarts: what a
// restarted head's `flowrun SPEC` finds its earlier run by, as a requeued
// Slurm job's finds its own by SLURM_JOB_ID.
#include "flowrun/gang.h"

namespace flowrun {

namespace {

// A positive decimal count, as AWS_BATCH_JOB_ATTEMPT is written.
std::optional<int> parse_attempt(std::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  int value = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (value == 0) return std::nullopt;
  return value;
}

// An id fit for run.json and a message: not empty, no blank or control character.
bool is_id(std::string_view s) {
  if (s.empty() || s.size() > 512) return false;
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u <= ' ' || u == 0x7f) return false;
  }
  return true;
}

}  // namespace

std::optional<GangIdentity> read_gang_identity(const GangRead& gang, const EnvMap& env, std::string* error) {
  auto fail = [&](const std::string& message) -> std::optional<GangIdentity> {
    if (error != nullptr) *error = message;
    return std::nullopt;
  };
  auto take = [&](std::string_view name) -> std::optional<GangIdentity> {
    const auto value = env_get(env, std::string(name));
    if (!value) return std::nullopt;
    if (!is_id(*value))
      return fail(
          std::string(name) + "='" + printable(*value) +
          "' is no gang id: set it to the gang's one identity (a Kubernetes Job's uid), with no blank");
    return GangIdentity{*value, std::nullopt, std::string(name) + "=" + *value};
  };
  if (gang.platform == GangPlatform::none) return std::nullopt;
  // Empty is unset: the downward API gives a label the pod lacks as "".
  if (const auto id = env_get(env, std::string(kGangIdVariable)); id && !id->empty())
    return take(kGangIdVariable);
  if (gang.platform == GangPlatform::aws_batch) {
    auto id = take("AWS_BATCH_JOB_ID");
    if (!id) return id;
    // A node's own job is <job id>#<node index>; the gang is the job.
    id->id = id->id.substr(0, id->id.find('#'));
    if (const auto attempt = env_get(env, "AWS_BATCH_JOB_ATTEMPT")) {
      id->attempt = parse_attempt(*attempt);
      if (!id->attempt)
        return fail("AWS_BATCH_JOB_ATTEMPT='" + printable(*attempt) +
                    "' is not an attempt number (1, 2, ...): unset it, or leave it as AWS Batch sets it");
      id->said += ", AWS_BATCH_JOB_ATTEMPT=" + *attempt;
    }
    return id;
  }
  if (gang.platform == GangPlatform::skypilot) return take("SKYPILOT_TASK_ID");
  return std::nullopt;
}

}  // namespace flowrun
