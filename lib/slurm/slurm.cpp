#include "flowrun/slurm.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdint>

namespace flowrun {

namespace {

void set_error(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
}

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

// A decimal number of at most 18 digits (no sign, no blanks), so it fits an
// uint64_t without overflow checks on the way.
std::optional<std::uint64_t> parse_decimal(std::string_view s) {
  if (s.empty() || s.size() > 18) return std::nullopt;
  std::uint64_t value = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return value;
}

// Splits at `sep` outside brackets. An unclosed '[' runs to the end, so the
// entry holding it reports the mistake.
std::vector<std::string_view> split_outside_brackets(std::string_view list, char sep) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  int depth = 0;
  for (std::size_t i = 0; i < list.size(); ++i) {
    char c = list[i];
    if (c == '[') {
      ++depth;
    } else if (c == ']') {
      if (depth > 0) --depth;
    } else if (c == sep && depth == 0) {
      parts.push_back(list.substr(start, i - start));
      start = i + 1;
    }
  }
  parts.push_back(list.substr(start));
  return parts;
}

// The numbers of one bracket group, formatted as Slurm prints them: each
// range padded to the width of its first number as written.
std::optional<std::vector<std::string>> expand_group(std::string_view entry, std::string_view group,
                                                     std::string* error) {
  std::vector<std::string> values;
  std::string bracketed = "[" + std::string(group) + "]";
  for (std::string_view range : split_outside_brackets(group, ',')) {
    std::string prefix = "host list entry " + quoted(entry) + ": ";
    if (range.empty()) {
      set_error(error, prefix + "empty range in " + quoted(bracketed));
      return std::nullopt;
    }
    std::size_t dash = range.find('-');
    std::string_view lo_text = range.substr(0, dash);
    std::string_view hi_text = dash == std::string_view::npos ? lo_text : range.substr(dash + 1);
    auto lo = parse_decimal(lo_text);
    auto hi = parse_decimal(hi_text);
    if (!lo || !hi) {
      set_error(error,
                prefix + quoted(range) + " in " + quoted(bracketed) + " is not a number or a lo-hi range");
      return std::nullopt;
    }
    if (*lo > *hi) {
      set_error(error, prefix + "range " + quoted(range) + " goes down");
      return std::nullopt;
    }
    if (*hi - *lo + 1 > kSlurmMaxListSize - values.size()) {
      set_error(error, prefix + quoted(bracketed) + " has more than " + std::to_string(kSlurmMaxListSize) +
                           " numbers");
      return std::nullopt;
    }
    for (std::uint64_t n = *lo; n <= *hi; ++n) {
      std::string digits = std::to_string(n);
      if (digits.size() < lo_text.size()) digits.insert(0, lo_text.size() - digits.size(), '0');
      values.push_back(std::move(digits));
    }
  }
  return values;
}

// One entry of a host list: literal text around bracket groups, expanded in
// Slurm's order (see the header). Appends to `hosts`, keeping its total
// within kSlurmMaxListSize.
bool expand_entry(std::string_view list, std::string_view entry, std::vector<std::string>& hosts,
                  std::string* error) {
  std::string prefix = "host list entry " + quoted(entry) + ": ";
  std::vector<std::string> literals(1);
  std::vector<std::vector<std::string>> groups;
  for (std::size_t i = 0; i < entry.size(); ++i) {
    char c = entry[i];
    if (static_cast<unsigned char>(c) <= ' ' || c == '\x7f') {
      set_error(error, prefix + "whitespace or a control character in a host name");
      return false;
    }
    if (c == ']') {
      set_error(error, prefix + "']' without an opening '['");
      return false;
    }
    if (c != '[') {
      literals.back() += c;
      continue;
    }
    std::size_t close = entry.find(']', i + 1);
    std::size_t nested = entry.find('[', i + 1);
    if (close == std::string_view::npos) {
      set_error(error, prefix + "'[' without a closing ']'");
      return false;
    }
    if (nested < close) {
      set_error(error, prefix + "'[' inside brackets");
      return false;
    }
    auto values = expand_group(entry, entry.substr(i + 1, close - i - 1), error);
    if (!values) return false;
    groups.push_back(std::move(*values));
    literals.emplace_back();
    i = close;
  }
  if (!groups.empty() && !literals.back().empty()) {
    set_error(error, prefix + "text " + quoted(literals.back()) + " after the last ']'");
    return false;
  }

  // Every factor is at most kSlurmMaxListSize, and so is `count` before each
  // product: no overflow.
  std::size_t count = 1;
  for (const auto& values : groups) {
    count *= values.size();
    if (count > kSlurmMaxListSize - hosts.size()) break;
  }
  if (count > kSlurmMaxListSize - hosts.size()) {
    set_error(error,
              "host list " + quoted(list) + " has more than " + std::to_string(kSlurmMaxListSize) + " hosts");
    return false;
  }

  // Loops from slowest to fastest: groups k-2, k-3, ..., 0, then k-1.
  const std::size_t k = groups.size();
  std::vector<std::size_t> order;
  for (std::size_t g = k >= 2 ? k - 1 : k; g-- > 0;) order.push_back(g);
  if (k >= 2) order.push_back(k - 1);
  std::vector<std::size_t> index(k, 0);
  for (std::size_t n = 0; n < count; ++n) {
    std::string host = literals[0];
    for (std::size_t g = 0; g < k; ++g) host += groups[g][index[g]] + literals[g + 1];
    hosts.push_back(std::move(host));
    for (std::size_t o = order.size(); o-- > 0;) {
      std::size_t g = order[o];
      if (++index[g] < groups[g].size()) break;
      index[g] = 0;
    }
  }
  return true;
}

// `[type:]count`, or a ',' list of them, summed.
std::optional<int> parse_gpus_per_node(std::string_view value) {
  if (value.empty()) return std::nullopt;
  std::uint64_t total = 0;
  for (std::string_view entry : split_outside_brackets(value, ',')) {
    std::size_t colon = entry.rfind(':');
    if (colon == 0) return std::nullopt;
    auto count = parse_decimal(colon == std::string_view::npos ? entry : entry.substr(colon + 1));
    if (!count) return std::nullopt;
    total += *count;
    if (total > INT_MAX) return std::nullopt;
  }
  return static_cast<int>(total);
}

}  // namespace

std::optional<std::vector<std::string>> expand_hostlist(std::string_view list, std::string* error) {
  if (list.empty()) {
    set_error(error, "host list is empty");
    return std::nullopt;
  }
  std::vector<std::string> hosts;
  for (std::string_view entry : split_outside_brackets(list, ',')) {
    if (entry.empty()) {
      set_error(error, "host list " + quoted(list) + " has an empty entry");
      return std::nullopt;
    }
    if (!expand_entry(list, entry, hosts, error)) return std::nullopt;
  }
  return hosts;
}

std::optional<std::vector<int>> expand_counts(std::string_view list, std::string* error) {
  if (list.empty()) {
    set_error(error, "count list is empty");
    return std::nullopt;
  }
  std::vector<int> counts;
  for (std::string_view entry : split_outside_brackets(list, ',')) {
    if (entry.empty()) {
      set_error(error, "count list " + quoted(list) + " has an empty entry");
      return std::nullopt;
    }
    std::string prefix = "count list entry " + quoted(entry) + ": ";
    std::string_view value_text = entry;
    std::uint64_t repeat = 1;
    if (std::size_t open = entry.find("(x"); open != std::string_view::npos) {
      std::optional<std::uint64_t> parsed;
      if (entry.back() == ')') parsed = parse_decimal(entry.substr(open + 2, entry.size() - open - 3));
      if (!parsed) {
        set_error(error, prefix + "expected N or N(xR)");
        return std::nullopt;
      }
      if (*parsed == 0) {
        set_error(error, prefix + "a repeat count must be at least 1");
        return std::nullopt;
      }
      repeat = *parsed;
      value_text = entry.substr(0, open);
    }
    auto value = parse_decimal(value_text);
    if (!value) {
      set_error(error, prefix + "expected N or N(xR)");
      return std::nullopt;
    }
    if (*value > INT_MAX) {
      set_error(error, prefix + "count too large");
      return std::nullopt;
    }
    if (repeat > kSlurmMaxListSize - counts.size()) {
      set_error(error, "count list " + quoted(list) + " has more than " + std::to_string(kSlurmMaxListSize) +
                           " counts");
      return std::nullopt;
    }
    counts.insert(counts.end(), repeat, static_cast<int>(*value));
  }
  return counts;
}

namespace {

// SLURM_JOB_ID: nullopt outside a job, or when it is set but empty (then
// `error` says so); `error` is cleared first.
std::optional<std::string> job_id_of(const EnvMap& env, std::string* error) {
  set_error(error, "");
  auto job_id = env_get(env, "SLURM_JOB_ID");
  if (job_id && job_id->empty()) {
    set_error(error, "SLURM_JOB_ID is set but empty");
    return std::nullopt;
  }
  return job_id;
}

}  // namespace

std::optional<SlurmJob> read_slurm_job(const EnvMap& env, std::string* error) {
  const auto job_id = job_id_of(env, error);
  if (!job_id) return std::nullopt;
  SlurmJob job;
  job.job_id = *job_id;

  std::string list_name = "SLURM_JOB_NODELIST";
  auto list = env_get(env, list_name);
  if (!list) {
    list_name = "SLURM_NODELIST";
    list = env_get(env, list_name);
  }
  if (!list) {
    set_error(error, "SLURM_JOB_ID=" + *job_id + " is set but SLURM_JOB_NODELIST is not");
    return std::nullopt;
  }
  std::string inner;
  auto nodes = expand_hostlist(*list, &inner);
  if (!nodes) {
    set_error(error, list_name + ": " + inner);
    return std::nullopt;
  }
  job.nodes = std::move(*nodes);
  job.num_nodes = static_cast<int>(job.nodes.size());

  std::string count_name = "SLURM_JOB_NUM_NODES";
  auto count = env_get(env, count_name);
  if (!count) {
    count_name = "SLURM_NNODES";
    count = env_get(env, count_name);
  }
  if (count) {
    auto parsed = parse_decimal(*count);
    if (!parsed || *parsed == 0) {
      set_error(error, count_name + "=" + quoted(*count) + ": expected a positive count");
      return std::nullopt;
    }
    if (*parsed != job.nodes.size()) {
      set_error(error, count_name + "=" + *count + " but " + list_name + " " + quoted(*list) + " names " +
                           std::to_string(job.nodes.size()) + " node" + (job.nodes.size() == 1 ? "" : "s"));
      return std::nullopt;
    }
  }

  if (auto cpus = env_get(env, "SLURM_JOB_CPUS_PER_NODE")) {
    auto counts = expand_counts(*cpus, &inner);
    if (!counts) {
      set_error(error, "SLURM_JOB_CPUS_PER_NODE: " + inner);
      return std::nullopt;
    }
    if (counts->size() != job.nodes.size()) {
      set_error(error, "SLURM_JOB_CPUS_PER_NODE " + quoted(*cpus) + " gives " +
                           std::to_string(counts->size()) + " count" + (counts->size() == 1 ? "" : "s") +
                           " for " + std::to_string(job.nodes.size()) + " node" +
                           (job.nodes.size() == 1 ? "" : "s"));
      return std::nullopt;
    }
    job.cpus_per_node = std::move(*counts);
  }

  if (auto gpus = env_get(env, "SLURM_GPUS_PER_NODE")) {
    job.gpus_per_node = parse_gpus_per_node(*gpus);
    if (!job.gpus_per_node) {
      set_error(error,
                "SLURM_GPUS_PER_NODE=" + quoted(*gpus) + ": expected [type:]count, such as 4 or h100:4");
      return std::nullopt;
    }
  }
  return job;
}

std::optional<SlurmRestart> read_slurm_restart(const EnvMap& env, std::string* error) {
  const auto job_id = job_id_of(env, error);
  if (!job_id) return std::nullopt;
  SlurmRestart restart{*job_id, 0};
  if (auto count = env_get(env, "SLURM_RESTART_COUNT")) {
    auto parsed = parse_decimal(*count);
    if (!parsed || *parsed > 1'000'000) {
      set_error(error, "SLURM_RESTART_COUNT=" + quoted(*count) + ": expected a count of restarts");
      return std::nullopt;
    }
    restart.restart_count = static_cast<int>(*parsed);
  }
  return restart;
}

const std::vector<std::string_view>& slurm_step_variables() {
  static const std::vector<std::string_view> names = {
      "SLURM_PROCID",         "SLURM_LOCALID",
      "SLURM_NODEID",         "SLURM_NTASKS*",
      "SLURM_NPROCS",         "SLURM_TASKS_PER_NODE",
      "SLURM_DISTRIBUTION",   "SLURM_STEP_*",
      "SLURM_STEPID",         "SLURM_TASK_PID",
      "SLURM_GTIDS",          "SLURM_CPU_BIND*",
      "SLURM_MEM_BIND*",      "SLURM_LAUNCH_NODE_IPADDR",
      "SLURM_SRUN_COMM_*",    "SLURM_UMASK",
      "SLURM_PRIO_PROCESS",   "SLURM_CPUS_PER_TASK",
      "SLURM_TOPOLOGY_ADDR*",
  };
  return names;
}

bool is_slurm_step_variable(std::string_view name) {
  for (std::string_view pattern : slurm_step_variables()) {
    if (pattern.ends_with('*')) {
      if (name.starts_with(pattern.substr(0, pattern.size() - 1))) return true;
    } else if (name == pattern) {
      return true;
    }
  }
  return false;
}

EnvMap strip_step_variables(const EnvMap& env) {
  EnvMap kept;
  for (const auto& [name, value] : env) {
    if (!is_slurm_step_variable(name)) kept.emplace(name, value);
  }
  return kept;
}

std::string compress_hostlist(const std::vector<std::string>& names) {
  // Each prefix (with the width of its number) and its numbers, in the order first seen.
  struct Group {
    std::string prefix;
    std::size_t width = 0;
    std::vector<unsigned long> numbers;
    std::string plain;  // a name without a trailing number
  };
  std::vector<Group> groups;
  for (const std::string& name : names) {
    std::size_t digits = 0;
    while (digits < name.size() && digits < 18 &&
           std::isdigit(static_cast<unsigned char>(name[name.size() - 1 - digits])))
      ++digits;
    if (digits == 0 || digits == name.size()) {
      if (std::none_of(groups.begin(), groups.end(), [&](const Group& g) { return g.plain == name; }))
        groups.push_back({{}, 0, {}, name});
      continue;
    }
    const std::string prefix = name.substr(0, name.size() - digits);
    const unsigned long number = std::stoul(name.substr(name.size() - digits));
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
      return g.plain.empty() && g.prefix == prefix && g.width == digits;
    });
    if (it == groups.end()) it = groups.insert(groups.end(), Group{prefix, digits, {}, {}});
    if (std::find(it->numbers.begin(), it->numbers.end(), number) == it->numbers.end())
      it->numbers.push_back(number);
  }
  std::string out;
  for (Group& g : groups) {
    if (!out.empty()) out += ',';
    if (!g.plain.empty()) {
      out += g.plain;
      continue;
    }
    auto padded = [&](unsigned long n) {
      std::string text = std::to_string(n);
      return std::string(g.width > text.size() ? g.width - text.size() : 0, '0') + text;
    };
    if (g.numbers.size() == 1) {
      out += g.prefix + padded(g.numbers.front());
      continue;
    }
    std::sort(g.numbers.begin(), g.numbers.end());
    std::string ranges;
    for (std::size_t i = 0; i < g.numbers.size();) {
      std::size_t j = i;
      while (j + 1 < g.numbers.size() && g.numbers[j + 1] == g.numbers[j] + 1) ++j;
      if (!ranges.empty()) ranges += ',';
      ranges += padded(g.numbers[i]);
      if (j > i) ranges += '-' + padded(g.numbers[j]);
      i = j + 1;
    }
    out += g.prefix + '[' + ranges + ']';
  }
  return out;
}

}  // namespace flowrun
