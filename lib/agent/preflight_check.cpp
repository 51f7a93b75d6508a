#include "preflight_check.h"

#include <boost/asio/post.hpp>
#include <exception>
#include <vector>

#include "flowrun/doctor.h"
#include "flowrun/gpu.h"
#include "flowrun/preflight_wire.h"

namespace flowrun::cluster {

namespace asio = boost::asio;

void PreflightCheck::start(const Preflight& p, int fake_gpus, const EnvMap& env, const std::string& node,
                           std::function<void(std::string)> on_id, std::function<void(std::string)> on_done) {
  if (thread_.joinable()) return;  // one check at a time
  const std::vector<int> devices = p.devices;
  DoctorOptions options;
  options.fake_gpus = fake_gpus;
  options.sweep = sweep_of(p);
  options.part = part_of(p);
  options.on_line = [this, on_id = std::move(on_id)](std::string_view line) {
    if (!line.starts_with("nccl_id\t")) return;
    asio::post(io_, [on_id, id = std::string(line.substr(8))] { on_id(id); });
  };
  options.cancel = &cancel_;
  cancel_ = false;
  thread_ = std::thread([this, devices, options, env, node, on_done = std::move(on_done)] {
    Inventory inventory;
    std::string facts;
    try {
      inventory = select_gpus(make_probe(env, options.fake_gpus, /*topology=*/true)->probe(), env);
      const PreflightResult result = run_preflight(inventory, devices, options, node);
      facts = format_doctor_json(result.facts, evaluate_doctor(result.facts));
    } catch (const std::exception& e) {
      DoctorFacts none;
      none.hostname = node;
      none.inventory = inventory;
      none.allreduce.status = "failed";
      none.allreduce.reason = e.what();
      facts = format_doctor_json(none, evaluate_doctor(none));
    }
    asio::post(io_, [this, on_done, facts = std::move(facts)] {
      if (thread_.joinable()) thread_.join();
      on_done(facts);
    });
  });
}

void PreflightCheck::stop() {
  cancel_ = true;
  if (thread_.joinable()) thread_.join();
}

}  // namespace flowrun::cluster
