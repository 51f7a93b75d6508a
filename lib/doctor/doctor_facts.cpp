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
#include "flowrun/json_read.h"

namespace flowrun {

namespace {

constexpr int kFactsVersion = 1;

void write_library(JsonWriter& json, const LibraryFacts& library) {
  json.begin_object();
  json.key("found").value(library.found);
  json.key("path").value(library.path);
  json.key("error").value(library.error);
  json.key("tried").strings(library.tried);
  json.end_object();
}

void write_facts(JsonWriter& json, const DoctorFacts& facts) {
  const Inventory& inv = facts.inventory;
  json.begin_object();
  json.key("flowrun_doctor_facts").value(kFactsVersion);
  json.key("hostname").value(facts.hostname);
  json.key("gpu_support").value(facts.gpu_support);
  json.key("runtime_skipped").value(facts.runtime_skipped);
  json.key("inventory").begin_object();
  json.key("source").value(inv.source);
  json.key("driver_version").value(inv.driver_version);
  json.key("cuda_driver_version").value(inv.cuda_driver_version);
  json.key("system_count").value(static_cast<std::uint64_t>(inv.system_count));
  json.key("selected_by").value(inv.selected_by);
  json.key("unavailable_reason").value(inv.unavailable_reason);
  json.key("notes").strings(inv.notes);
  json.key("nvswitch").value(inv.nvswitch);
  json.key("gpus").begin_array();
  for (const Gpu& gpu : inv.gpus) {
    json.begin_object();
    write_gpu_identity(json, gpu);
    json.key("compute_capability").value(gpu.details.compute_capability);
    json.key("pcie_gen_max").value(gpu.details.pcie_gen_max);
    json.key("pcie_width_max").value(gpu.details.pcie_width_max);
    json.key("pcie_width").value(gpu.details.pcie_width);
    json.key("nvlinks").value(gpu.details.nvlinks);
    json.key("nvswitch_links").value(gpu.details.nvswitch_links);
    json.end_object();
  }
  json.end_array();
  json.key("links").begin_array();
  for (const auto& row : inv.links) {
    std::vector<std::string> names;
    for (const GpuLink& link : row) names.push_back(gpu_link_name(link));
    json.strings(names);
  }
  json.end_array();
  json.end_object();

  json.key("cuda").begin_object();
  json.key("library");
  write_library(json, facts.cuda.library);
  json.key("runtime_version").value(facts.cuda.runtime_version);
  json.key("driver_version").value(facts.cuda.driver_version);
  json.key("device_count").value(facts.cuda.device_count);
  json.key("error").value(facts.cuda.error);
  json.end_object();

  json.key("nccl").begin_object();
  json.key("library");
  write_library(json, facts.nccl.library);
  json.key("version").value(facts.nccl.version);
  json.end_object();

  const AllReduceFacts& ar = facts.allreduce;
  json.key("allreduce").begin_object();
  json.key("status").value(ar.status);
  json.key("reason").value(ar.reason);
  json.key("gpus").value(ar.gpus);
  json.key("warmup").value(ar.warmup);
  json.key("iters").value(ar.iters);
  json.key("timeout_s").value(ar.timeout_s);
  json.key("notes").strings(ar.notes);
  json.key("warnings").strings(ar.warnings);
  if (!ar.network.empty()) json.key("network").value(ar.network);
  if (ar.stopped_slow) json.key("stopped_slow").value(true);
  json.key("rows").begin_array();
  for (const AllReduceRow& row : ar.rows) {
    json.begin_object();
    json.key("bytes").value(row.bytes);
    json.key("time_ns").value(row.time_ns);
    json.key("algorithm").value(row.algorithm);
    json.key("protocol").value(row.protocol);
    json.key("wrong").value(row.wrong);
    json.end_object();
  }
  json.end_array();
  json.end_object();

  json.key("memcpy").begin_object();
  json.key("bytes").value(facts.memcpy.bytes);
  json.key("time_ns").value(facts.memcpy.time_ns);
  json.end_object();
  json.end_object();
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

  const JsonValue& member(const JsonValue& object, const std::string& path, const char* name) const {
    const JsonValue* value = object.find(name);
    if (value == nullptr) fail(path + "." + name, "missing");
    return *value;
  }
  const JsonValue& object(const JsonValue& parent, const std::string& path, const char* name) const {
    const JsonValue& value = member(parent, path, name);
    if (!value.is_object()) fail(path + "." + name, "expected an object");
    return value;
  }
  std::string string(const JsonValue& parent, const std::string& path, const char* name) const {
    const JsonValue& value = member(parent, path, name);
    if (!value.is_string()) fail(path + "." + name, "expected a string");
    return value.string;
  }
  bool boolean(const JsonValue& parent, const std::string& path, const char* name) const {
    const JsonValue& value = member(parent, path, name);
    if (value.type != JsonValue::Type::boolean) fail(path + "." + name, "expected true or false");
    return value.boolean;
  }
  std::int64_t integer(const JsonValue& parent, const std::string& path, const char* name,
                       std::int64_t min) const {
    const JsonValue& value = member(parent, path, name);
    if (value.type != JsonValue::Type::number || value.number != std::floor(value.number) ||
        value.number < static_cast<double>(min) || value.number > 9.0e18)
      fail(path + "." + name, "expected a whole number" + (min == 0 ? std::string(" >= 0") : std::string()));
    return static_cast<std::int64_t>(value.number);
  }
  std::vector<std::string> strings(const JsonValue& parent, const std::string& path, const char* name) const {
    const JsonValue& value = member(parent, path, name);
    if (!value.is_array()) fail(path + "." + name, "expected an array of strings");
    std::vector<std::string> out;
    for (const JsonValue& item : value.array) {
      if (!item.is_string()) fail(path + "." + name, "expected an array of strings");
      out.push_back(item.string);
    }
    return out;
  }
  const std::vector<JsonValue>& array(const JsonValue& parent, const std::string& path,
                                      const char* name) const {
    const JsonValue& value = member(parent, path, name);
    if (!value.is_array()) fail(path + "." + name, "expected an array");
    return value.array;
  }

  LibraryFacts library(const JsonValue& parent, const std::string& path) const {
    const JsonValue& value = object(parent, path, "library");
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
  JsonWriter json;
  json.begin_object();
  json.key("format").value("flowrun.doctor/1");
  json.key("facts");
  write_facts(json, facts);
  json.key("checks").begin_array();
  for (const DoctorCheck& check : report.checks) {
    json.begin_object();
    json.key("name").value(check.name);
    json.key("status").value(status_name(check.status));
    json.key("message").value(check.message);
    json.key("advice").value(check.advice);
    json.end_object();
  }
  json.end_array();
  // The sweep with its derived figures, nccl-tests' columns, bandwidths in MB/s.
  json.key("allreduce").begin_array();
  for (const AllReduceRow& row : facts.allreduce.rows) {
    json.begin_object();
    json.key("bytes").value(row.bytes);
    json.key("time_ns").value(row.time_ns);
    json.key("algbw_mb_s").value(mb_per_s(algbw_gbps(row.bytes, row.time_ns)));
    json.key("busbw_mb_s").value(mb_per_s(busbw_gbps(row.bytes, row.time_ns, facts.allreduce.gpus)));
    json.end_object();
  }
  json.end_array();
  json.key("large_busbw_mb_s").value(mb_per_s(report.large_busbw_gbps));
  if (report.ceiling) {
    json.key("ceiling").begin_object();
    json.key("id").value(report.ceiling->id);
    json.key("link").value(report.ceiling->link);
    json.key("busbw_mb_s").value(mb_per_s(report.ceiling->busbw_gbps));
    json.key("source").value(report.ceiling->source);
    json.end_object();
  } else {
    json.key("ceiling").null();
  }
  json.key("healthy").value(report.exit_code == 0);
  json.key("exit_code").value(report.exit_code);
  json.end_object();
  return json.str();
}

DoctorFacts parse_doctor_facts(std::string_view text, const std::string& file) {
  Reader r(file);
  std::optional<JsonValue> document = parse_json(text);
  if (!document) throw Error(file + ": not valid JSON", kExitUsage);
  const JsonValue* root = &*document;
  if (root->is_object() && root->find("facts") != nullptr) root = root->find("facts");
  if (!root->is_object() || root->find("flowrun_doctor_facts") == nullptr)
    r.fail("flowrun_doctor_facts", "missing: not a facts file");
  const std::string top = "facts";
  if (r.integer(*root, top, "flowrun_doctor_facts", 0) != kFactsVersion)
    r.fail(top + ".flowrun_doctor_facts", "this flowrun reads version " + std::to_string(kFactsVersion));

  DoctorFacts facts;
  facts.hostname = r.string(*root, top, "hostname");
  facts.gpu_support = r.boolean(*root, top, "gpu_support");
  facts.runtime_skipped = r.string(*root, top, "runtime_skipped");

  const JsonValue& inv_json = r.object(*root, top, "inventory");
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
    if (!links[i].is_array() || links[i].array.size() != inv.gpus.size())
      r.fail(lp, "expected " + std::to_string(inv.gpus.size()) + " names such as \"NV18\" or \"SYS\"");
    std::vector<GpuLink> row;
    for (const JsonValue& name : links[i].array) {
      std::optional<GpuLink> link = name.is_string() ? parse_gpu_link(name.string) : std::nullopt;
      if (!link) r.fail(lp, "expected X, NV<count>, PIX, PXB, PHB, NODE, SYS or ?");
      row.push_back(*link);
    }
    inv.links.push_back(std::move(row));
  }

  const JsonValue& cuda = r.object(*root, top, "cuda");
  facts.cuda.library = r.library(cuda, top + ".cuda");
  facts.cuda.runtime_version = static_cast<int>(r.integer(cuda, top + ".cuda", "runtime_version", 0));
  facts.cuda.driver_version = static_cast<int>(r.integer(cuda, top + ".cuda", "driver_version", 0));
  facts.cuda.device_count = static_cast<int>(r.integer(cuda, top + ".cuda", "device_count", -1));
  facts.cuda.error = r.string(cuda, top + ".cuda", "error");

  const JsonValue& nccl = r.object(*root, top, "nccl");
  facts.nccl.library = r.library(nccl, top + ".nccl");
  facts.nccl.version = static_cast<int>(r.integer(nccl, top + ".nccl", "version", 0));

  const JsonValue& ar_json = r.object(*root, top, "allreduce");
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
  if (ar_json.find("network") != nullptr) ar.network = r.string(ar_json, ap, "network");  // across nodes only
  if (ar_json.find("stopped_slow") != nullptr) ar.stopped_slow = r.boolean(ar_json, ap, "stopped_slow");
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

  const JsonValue& memcpy_json = r.object(*root, top, "memcpy");
  facts.memcpy.bytes = static_cast<std::uint64_t>(r.integer(memcpy_json, top + ".memcpy", "bytes", 0));
  facts.memcpy.time_ns = r.integer(memcpy_json, top + ".memcpy", "time_ns", 0);
  return facts;
}

}  // namespace flowrun
