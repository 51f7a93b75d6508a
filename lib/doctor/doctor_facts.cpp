// The doctor's facts and verdict as JSON, and the facts read back from it.
//
// Every number is an integer (bytes, nanoseconds, MB/s), so a report read
// back gives the same text to the last digit.
#include <cmath>
#include <string>
#include <vector>

#include "flowrun/doctor.h"
#include "flowrun/error.h"
#include "flowrun/json.h"

namespace flowrun {

namespace {

constexpr int kFactsVersion = 1;

Json library_json(const LibraryFacts& library) {
  return {
      {"found", library.found}, {"path", library.path}, {"error", library.error}, {"tried", library.tried}};
}

Json facts_json(const DoctorFacts& facts) {
  const Inventory& inv = facts.inventory;
  Json json;
  json["flowrun_doctor_facts"] = kFactsVersion;
  json["hostname"] = facts.hostname;
  json["gpu_support"] = facts.gpu_support;
  json["runtime_skipped"] = facts.runtime_skipped;
  Json inventory;
  inventory["source"] = inv.source;
  inventory["driver_version"] = inv.driver_version;
  inventory["cuda_driver_version"] = inv.cuda_driver_version;
  inventory["system_count"] = static_cast<std::uint64_t>(inv.system_count);
  inventory["selected_by"] = inv.selected_by;
  inventory["unavailable_reason"] = inv.unavailable_reason;
  inventory["notes"] = inv.notes;
  inventory["nvswitch"] = inv.nvswitch;
  Json& gpus = inventory["gpus"] = Json::array();
  for (const Gpu& gpu : inv.gpus) {
    Json g = gpu_identity(gpu);
    g["compute_capability"] = gpu.details.compute_capability;
    g["pcie_gen_max"] = gpu.details.pcie_gen_max;
    g["pcie_width_max"] = gpu.details.pcie_width_max;
    g["pcie_width"] = gpu.details.pcie_width;
    g["nvlinks"] = gpu.details.nvlinks;
    g["nvswitch_links"] = gpu.details.nvswitch_links;
    gpus.push_back(std::move(g));
  }
  Json& links = inventory["links"] = Json::array();
  for (const auto& row : inv.links) {
    Json& names = links.emplace_back(Json::array());
    for (const GpuLink& link : row) names.push_back(gpu_link_name(link));
  }
  json["inventory"] = std::move(inventory);

  json["cuda"] = {{"library", library_json(facts.cuda.library)},
                  {"runtime_version", facts.cuda.runtime_version},
                  {"driver_version", facts.cuda.driver_version},
                  {"device_count", facts.cuda.device_count},
                  {"error", facts.cuda.error}};
  json["nccl"] = {{"library", library_json(facts.nccl.library)}, {"version", facts.nccl.version}};

  const AllReduceFacts& ar = facts.allreduce;
  Json allreduce;
  allreduce["status"] = ar.status;
  allreduce["reason"] = ar.reason;
  allreduce["gpus"] = ar.gpus;
  allreduce["warmup"] = ar.warmup;
  allreduce["iters"] = ar.iters;
  allreduce["timeout_s"] = ar.timeout_s;
  allreduce["notes"] = ar.notes;
  allreduce["warnings"] = ar.warnings;
  if (!ar.network.empty()) allreduce["network"] = ar.network;
  if (ar.stopped_slow) allreduce["stopped_slow"] = true;
  Json& rows = allreduce["rows"] = Json::array();
  for (const AllReduceRow& row : ar.rows) {
    rows.push_back({{"bytes", row.bytes},
                    {"time_ns", row.time_ns},
                    {"algorithm", row.algorithm},
                    {"protocol", row.protocol},
                    {"wrong", row.wrong}});
  }
  json["allreduce"] = std::move(allreduce);
  json["memcpy"] = {{"bytes", facts.memcpy.bytes}, {"time_ns", facts.memcpy.time_ns}};
  return json;
}

std::int64_t mb_per_s(double gbps) { return static_cast<std::int64_t>(std::llround(gbps * 1000)); }

const char* status_name(CheckStatus status) {
  switch (status) {
    case CheckStatus::ok: return "ok";
    case CheckStatus::warn: return "warn";
    case CheckStatus::fail: return "fail";
    case CheckStatus::skip: return "skip";
  }
  return "unknown";
}

// --- reading ----------------------------------------------------------------

class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw Error(file_ + ": " + key + ": " + what +
                    " (a facts file is what 'flowrun doctor --json' writes; see docs/gpu.md)",
                kExitUsage);
  }

  const Json& member(const Json& object, const std::string& path, const char* name) const {
    const Json* value = find(object, name);
    if (value == nullptr) fail(path + "." + name, "missing");
    return *value;
  }
  const Json& object(const Json& parent, const std::string& path, const char* name) const {
    const Json& value = member(parent, path, name);
    if (!value.is_object()) fail(path + "." + name, "expected an object");
    return value;
  }
  std::string string(const Json& parent, const std::string& path, const char* name) const {
    const Json& value = member(parent, path, name);
    if (!value.is_string()) fail(path + "." + name, "expected a string");
    return value.get<std::string>();
  }
  bool boolean(const Json& parent, const std::string& path, const char* name) const {
    const Json& value = member(parent, path, name);
    if (!value.is_boolean()) fail(path + "." + name, "expected true or false");
    return value.get<bool>();
  }
  // A whole number written as one ("12", not "12.0"), `min` or more.
  std::int64_t integer(const Json& parent, const std::string& path, const char* name,
                       std::int64_t min) const {
    const Json& value = member(parent, path, name);
    if (!value.is_number_integer() ||
        (value.is_number_unsigned() && value.get<std::uint64_t>() > INT64_MAX) ||
        value.get<std::int64_t>() < min)
      fail(path + "." + name, "expected a whole number" + (min == 0 ? std::string(" >= 0") : std::string()));
    return value.get<std::int64_t>();
  }
  std::vector<std::string> strings(const Json& parent, const std::string& path, const char* name) const {
    const Json& value = member(parent, path, name);
    if (!value.is_array()) fail(path + "." + name, "expected an array of strings");
    std::vector<std::string> out;
    for (const Json& item : value) {
      if (!item.is_string()) fail(path + "." + name, "expected an array of strings");
      out.push_back(item.get<std::string>());
    }
    return out;
  }
  const Json& array(const Json& parent, const std::string& path, const char* name) const {
    const Json& value = member(parent, path, name);
    if (!value.is_array()) fail(path + "." + name, "expected an array");
    return value;
  }

  LibraryFacts library(const Json& parent, const std::string& path) const {
    const Json& value = object(parent, path, "library");
    const std::string where = path + ".library";
    LibraryFacts library;
    library.found = boolean(value, where, "found");
    library.path = string(value, where, "path");
    library.error = string(value, where, "error");
    library.tried = strings(value, where, "tried");
    return library;
  }

 private:
  std::string file_;
};

}  // namespace

std::string format_doctor_json(const DoctorFacts& facts, const DoctorReport& report) {
  Json json;
  json["format"] = "flowrun.doctor/1";
  json["facts"] = facts_json(facts);
  Json& checks = json["checks"] = Json::array();
  for (const DoctorCheck& check : report.checks) {
    checks.push_back({{"name", check.name},
                      {"status", status_name(check.status)},
                      {"message", check.message},
                      {"advice", check.advice}});
  }
  // The sweep with its derived figures, nccl-tests' columns, bandwidths in MB/s.
  Json& allreduce = json["allreduce"] = Json::array();
  for (const AllReduceRow& row : facts.allreduce.rows) {
    allreduce.push_back({{"bytes", row.bytes},
                         {"time_ns", row.time_ns},
                         {"algbw_mb_s", mb_per_s(algbw_gbps(row.bytes, row.time_ns))},
                         {"busbw_mb_s", mb_per_s(busbw_gbps(row.bytes, row.time_ns, facts.allreduce.gpus))}});
  }
  json["large_busbw_mb_s"] = mb_per_s(report.large_busbw_gbps);
  if (report.ceiling) {
    json["ceiling"] = {{"id", report.ceiling->id},
                       {"link", report.ceiling->link},
                       {"busbw_mb_s", mb_per_s(report.ceiling->busbw_gbps)},
                       {"source", report.ceiling->source}};
  } else {
    json["ceiling"] = nullptr;
  }
  json["healthy"] = report.exit_code == 0;
  json["exit_code"] = report.exit_code;
  return to_document(json);
}

DoctorFacts parse_doctor_facts(std::string_view text, const std::string& file) {
  Reader r(file);
  std::optional<Json> document = parse_json(text);
  if (!document) throw Error(file + ": not valid JSON", kExitUsage);
  const Json* root = &*document;
  if (const Json* facts = find(*root, "facts")) root = facts;
  if (find(*root, "flowrun_doctor_facts") == nullptr)
    r.fail("flowrun_doctor_facts", "missing: not a facts file");
  const std::string top = "facts";
  if (r.integer(*root, top, "flowrun_doctor_facts", 0) != kFactsVersion)
    r.fail(top + ".flowrun_doctor_facts", "this flowrun reads version " + std::to_string(kFactsVersion));

  DoctorFacts facts;
  facts.hostname = r.string(*root, top, "hostname");
  facts.gpu_support = r.boolean(*root, top, "gpu_support");
  facts.runtime_skipped = r.string(*root, top, "runtime_skipped");

  const Json& inv_json = r.object(*root, top, "inventory");
  const std::string ip = top + ".inventory";
  Inventory& inv = facts.inventory;
  inv.source = r.string(inv_json, ip, "source");
  inv.driver_version = r.string(inv_json, ip, "driver_version");
  inv.cuda_driver_version = r.string(inv_json, ip, "cuda_driver_version");
  inv.system_count = static_cast<std::size_t>(r.integer(inv_json, ip, "system_count", 0));
  inv.selected_by = r.string(inv_json, ip, "selected_by");
  inv.unavailable_reason = r.string(inv_json, ip, "unavailable_reason");
  inv.notes = r.strings(inv_json, ip, "notes");
  inv.nvswitch = r.boolean(inv_json, ip, "nvswitch");
  const auto& gpus = r.array(inv_json, ip, "gpus");
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    const std::string gp = ip + ".gpus[" + std::to_string(i) + "]";
    if (!gpus[i].is_object()) r.fail(gp, "expected an object");
    Gpu gpu;
    gpu.index = static_cast<int>(r.integer(gpus[i], gp, "index", 0));
    gpu.name = r.string(gpus[i], gp, "name");
    gpu.uuid = r.string(gpus[i], gp, "uuid");
    gpu.memory_bytes = static_cast<std::uint64_t>(r.integer(gpus[i], gp, "memory_bytes", 0));
    gpu.pci_bus_id = r.string(gpus[i], gp, "pci_bus_id");
    gpu.select_token = std::to_string(gpu.index);
    gpu.details.compute_capability = r.string(gpus[i], gp, "compute_capability");
    gpu.details.pcie_gen_max = static_cast<int>(r.integer(gpus[i], gp, "pcie_gen_max", 0));
    gpu.details.pcie_width_max = static_cast<int>(r.integer(gpus[i], gp, "pcie_width_max", 0));
    gpu.details.pcie_width = static_cast<int>(r.integer(gpus[i], gp, "pcie_width", 0));
    gpu.details.nvlinks = static_cast<int>(r.integer(gpus[i], gp, "nvlinks", 0));
    gpu.details.nvswitch_links = static_cast<int>(r.integer(gpus[i], gp, "nvswitch_links", 0));
    inv.gpus.push_back(std::move(gpu));
  }
  const auto& links = r.array(inv_json, ip, "links");
  if (!links.empty() && links.size() != inv.gpus.size())
    r.fail(ip + ".links", "expected one row for each of the " + std::to_string(inv.gpus.size()) + " GPUs");
  for (std::size_t i = 0; i < links.size(); ++i) {
    const std::string lp = ip + ".links[" + std::to_string(i) + "]";
    if (!links[i].is_array() || links[i].size() != inv.gpus.size())
      r.fail(lp, "expected " + std::to_string(inv.gpus.size()) + " names such as \"NV18\" or \"SYS\"");
    std::vector<GpuLink> row;
    for (const Json& name : links[i]) {
      std::optional<GpuLink> link = name.is_string() ? parse_gpu_link(name.get<std::string>()) : std::nullopt;
      if (!link) r.fail(lp, "expected X, NV<count>, PIX, PXB, PHB, NODE, SYS or ?");
      row.push_back(*link);
    }
    inv.links.push_back(std::move(row));
  }

  const Json& cuda = r.object(*root, top, "cuda");
  facts.cuda.library = r.library(cuda, top + ".cuda");
  facts.cuda.runtime_version = static_cast<int>(r.integer(cuda, top + ".cuda", "runtime_version", 0));
  facts.cuda.driver_version = static_cast<int>(r.integer(cuda, top + ".cuda", "driver_version", 0));
  facts.cuda.device_count = static_cast<int>(r.integer(cuda, top + ".cuda", "device_count", -1));
  facts.cuda.error = r.string(cuda, top + ".cuda", "error");

  const Json& nccl = r.object(*root, top, "nccl");
  facts.nccl.library = r.library(nccl, top + ".nccl");
  facts.nccl.version = static_cast<int>(r.integer(nccl, top + ".nccl", "version", 0));

  const Json& ar_json = r.object(*root, top, "allreduce");
  const std::string ap = top + ".allreduce";
  AllReduceFacts& ar = facts.allreduce;
  ar.status = r.string(ar_json, ap, "status");
  if (ar.status != "ok" && ar.status != "failed" && ar.status != "hung" && ar.status != "skipped" &&
      ar.status != "not_run")
    r.fail(ap + ".status", "expected ok, failed, hung, skipped or not_run");
  ar.reason = r.string(ar_json, ap, "reason");
  ar.gpus = static_cast<int>(r.integer(ar_json, ap, "gpus", 0));
  ar.warmup = static_cast<int>(r.integer(ar_json, ap, "warmup", 0));
  ar.iters = static_cast<int>(r.integer(ar_json, ap, "iters", 0));
  ar.timeout_s = static_cast<int>(r.integer(ar_json, ap, "timeout_s", 0));
  ar.notes = r.strings(ar_json, ap, "notes");
  ar.warnings = r.strings(ar_json, ap, "warnings");
  if (find(ar_json, "network") != nullptr)
    ar.network = r.string(ar_json, ap, "network");  // across nodes only
  if (find(ar_json, "stopped_slow") != nullptr) ar.stopped_slow = r.boolean(ar_json, ap, "stopped_slow");
  const auto& rows = r.array(ar_json, ap, "rows");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::string rp = ap + ".rows[" + std::to_string(i) + "]";
    if (!rows[i].is_object()) r.fail(rp, "expected an object");
    AllReduceRow row;
    row.bytes = static_cast<std::uint64_t>(r.integer(rows[i], rp, "bytes", 0));
    row.time_ns = r.integer(rows[i], rp, "time_ns", 0);
    row.algorithm = r.string(rows[i], rp, "algorithm");
    row.protocol = r.string(rows[i], rp, "protocol");
    row.wrong = static_cast<std::uint64_t>(r.integer(rows[i], rp, "wrong", 0));
    ar.rows.push_back(std::move(row));
  }

  const Json& memcpy_json = r.object(*root, top, "memcpy");
  facts.memcpy.bytes = static_cast<std::uint64_t>(r.integer(memcpy_json, top + ".memcpy", "bytes", 0));
  facts.memcpy.time_ns = r.integer(memcpy_json, top + ".memcpy", "time_ns", 0);
  return facts;
}

}  // namespace flowrun
