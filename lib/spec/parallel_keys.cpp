// A step's parallel: (spec_detail.h): its gpus, nodes (a count or an elastic
// range), processes per node, cpus, spare nodes, restarts and the rest of its
// settings; the restart: policy under it is read in restart_keys.cpp.

#include <algorithm>
#include <map>

#include "spec_detail.h"

namespace flowrun::spec_detail {

namespace {

bool is_gpu_uuid(std::string_view id) {
  if (!(id.starts_with("GPU-") || id.starts_with("MIG-")) || id.size() <= 4) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '/';
  });
}

}  // namespace

// `nodes: "MIN:MAX"`: torchrun's elastic range. "N:N" is the count N.
void Checker::node_range(const Entry& e, ParallelSpec& p) {
  const std::string& text = e.value.Scalar();
  const std::size_t colon = text.find(':');
  int lo = 0, hi = 0;
  const bool whole = parse_whole(std::string_view(text).substr(0, colon), lo) == Whole::ok &&
                     parse_whole(std::string_view(text).substr(colon + 1), hi) == Whole::ok;
  if (!whole || lo < 1 || hi < 1) {
    expected(e, "'auto', a positive whole number, or a range \"MIN:MAX\" of them (\"1:4\")");
    return;
  }
  if (lo > hi) {
    error(e.loc, e.path,
          "nodes: \"" + text + "\" has its minimum above its maximum; write \"" + std::to_string(hi) + ":" +
              std::to_string(lo) + "\"");
    return;
  }
  p.nodes.value = hi;
  if (lo < hi) p.min_nodes = lo;
}

void Checker::step_parallel(const Entry& e, Step& s) {
  ParallelSpec& p = s.parallel.emplace();
  p.loc = p.gpus.loc = p.nodes.loc = p.procs_per_node.loc = p.cpus_loc = e.key_loc;
  if (e.value.IsNull()) return;
  if (!e.value.IsMap()) {
    expected(e, "a mapping of parallel settings ('parallel: {}' for the defaults)");
    return;
  }
  auto keys = entries(e.value, e.loc, e.path, kParallelKeys, kParallelElsewhere);
  if (const Entry* g = find(keys, "gpus")) gpus(*g, p.gpus);
  for (auto [key, target] : {std::pair{"nodes", &p.nodes}, std::pair{"procs_per_node", &p.procs_per_node}}) {
    const Entry* n = find(keys, key);
    if (!n) continue;
    target->loc = n->loc;
    if (n->value.IsScalar() && n->value.Scalar() == "auto") continue;
    if (target == &p.nodes && n->value.IsScalar() && n->value.Scalar().find(':') != std::string::npos) {
      node_range(*n, p);
      continue;
    }
    if (auto value = count(*n, "a positive whole number", "auto", false)) target->value = *value;
  }
  if (const Entry* c = find(keys, "cpus")) {
    p.cpus_loc = c->loc;
    if (auto value = count(*c, "a positive whole number of CPU workers", "", false)) p.cpus = *value;
    if (find(keys, "gpus"))
      error(c->key_loc, c->path,
            "cpus and gpus cannot both be set; choose one: gpus for GPU workers, cpus for CPU workers");
  }
  if (const Entry* k = find(keys, "spare_nodes")) {
    p.spare_nodes_loc = k->loc;
    p.spare_nodes = count(*k, "a whole number of spare nodes (0 or more)", "", true).value_or(0);
    if (p.spare_nodes > 0 && p.min_nodes > 0)
      error(k->key_loc, k->path,
            "spare_nodes and an elastic nodes: \"" + std::to_string(p.min_nodes) + ":" +
                std::to_string(*p.nodes.value) +
                "\" cannot both be set: the range already takes nodes that join later and goes on without "
                "a lost one; give nodes: " +
                std::to_string(*p.nodes.value) + " with spare_nodes, or the range alone");
  }
  const Entry* m = find(keys, "max_restarts");
  std::optional<int> restarts;
  if (m) restarts = count(*m, "a whole number of restarts (0 or more)", "", true);
  p.max_restarts = restarts.value_or(0);
  if (const Entry* r = find(keys, "restart")) {
    restart(*r, s, p.restart);
    if (p.max_restarts == 0 && (!m || restarts))
      error(r->key_loc, r->path,
            "restart: chooses which failures restart the step, but max_restarts is " +
                std::string(m ? "0" : "not set (0)") +
                "; set max_restarts to how many restarts it may start (torchrun's --max-restarts)");
  }
  if (const Entry* v = find(keys, "visible_devices")) {
    static constexpr std::string_view kNames[] = {"node", "process"};
    static constexpr Visibility kValues[] = {Visibility::node, Visibility::process};
    p.visible_devices = choice<Visibility>(*v, kNames, kValues).value_or(Visibility::node);
  }
  for (auto [key, target] : {std::pair{"role", &p.role}, std::pair{"job_id", &p.job_id}}) {
    const Entry* n = find(keys, key);
    if (!n) continue;
    // A variable's value (ROLE_NAME, TORCHELASTIC_RUN_ID), on one line.
    const std::string name = std::string(key) == "role" ? "ROLE_NAME" : "TORCHELASTIC_RUN_ID";
    auto value = string(*n, "a name (it becomes every worker's " + name + ")");
    if (!value) continue;
    if (value->empty() || value->size() > 1000 ||
        value->find_first_of(std::string_view("\0\n", 2)) != std::string::npos) {
      expected(*n, "a name of 1 to 1000 characters on one line (it becomes every worker's " + name + ")");
      continue;
    }
    *target = *value;
  }
  if (const Entry* c = find(keys, "node_checks")) p.node_checks = boolean(*c).value_or(true);
  if (const Entry* f = find(keys, "preflight")) {
    p.preflight = boolean(*f).value_or(false);
    if (p.preflight && find(keys, "cpus"))
      error(
          f->key_loc, f->path,
          "preflight checks the step's GPUs, and a step of CPU workers (cpus) has none; remove one of them");
  }
}

void Checker::gpus(const Entry& e, GpuRequest& request) {
  request.loc = e.loc;
  request.is_set = true;
  constexpr std::string_view kExpected = "'all', a positive whole number or a list of GPU ids like [0, 1]";
  if (e.value.IsScalar() && e.value.Scalar() == "all") {
    request.kind = GpuRequest::Kind::all;
    return;
  }
  if (e.value.IsScalar()) {
    int value = 0;
    Whole status = parse_whole(e.value.Scalar(), value);
    if (status == Whole::too_large) {
      expected(e, "a positive whole number up to " + std::to_string(kMaxInt));
    } else if (status == Whole::bad) {
      expected(e, kExpected);
    } else if (value == 0) {
      error(e.loc, e.path, expected_text(kExpected, e.value) + "; for CPU workers use 'cpus'");
    } else {
      request.kind = GpuRequest::Kind::count;
      request.count = value;
    }
    return;
  }
  if (!e.value.IsSequence() || e.value.size() == 0) {
    expected(e, e.value.IsSequence() ? "a non-empty list of GPU ids" : kExpected);
    return;
  }
  request.kind = GpuRequest::Kind::ids;
  std::map<std::string, Location> seen;
  for (const YAML::Node& item : items(e.value)) {
    Location loc = to_location(item.Mark());
    if (loc.line == 0) loc = e.loc;
    std::string id;
    int ordinal = 0;
    if (item.IsScalar() && parse_whole(item.Scalar(), ordinal) == Whole::ok) {
      id = std::to_string(ordinal);
    } else if (item.IsScalar() && is_gpu_uuid(item.Scalar())) {
      id = item.Scalar();
    } else {
      error(loc, e.path,
            expected_text("a GPU index (0, 1, ...) or a UUID starting with 'GPU-' or 'MIG-'", item));
      continue;
    }
    auto [first, fresh] = seen.emplace(id, loc);
    if (!fresh) {
      error(loc, e.path, "GPU " + id + " is listed twice; expected each GPU once");
      continue;
    }
    request.ids.push_back(id);
  }
}

}  // namespace flowrun::spec_detail
