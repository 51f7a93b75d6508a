#include "flowrun/start_wire.h"

namespace flowrun::cluster {

namespace {

Start::Devices wire_devices(DeviceRule rule) {
  switch (rule) {
    case DeviceRule::set: return Start::Devices::set;
    case DeviceRule::if_inherited: return Start::Devices::if_inherited;
    case DeviceRule::leave: break;
  }
  return Start::Devices::leave;
}

DeviceRule device_rule(Start::Devices devices) {
  switch (devices) {
    case Start::Devices::set: return DeviceRule::set;
    case Start::Devices::if_inherited: return DeviceRule::if_inherited;
    case Start::Devices::leave: break;
  }
  return DeviceRule::leave;
}

}  // namespace

Start start_of(const NodeWork& work) {
  Start m;
  m.attempt = work.restart_count;
  m.step = work.step;
  m.run_id = work.run_id;
  m.job_id = work.job_id;
  m.role = work.role;
  m.run_dir = work.run_dir;
  for (const auto& [name, value] : work.env) m.env.push_back(name + "=" + value);
  m.world_size = work.world_size;
  m.nodes = work.nodes;
  m.node_rank = work.node_rank;
  m.max_restarts = work.max_restarts;
  m.master_addr = work.master_addr;
  m.master_port = work.master_port;
  m.devices = wire_devices(work.devices);
  m.nccl_flight_recorder = work.nccl_flight_recorder;
  for (const auto& rank : work.ranks) {
    StartRank& r = m.ranks.emplace_back();
    r.rank = rank.rank;
    r.local_rank = rank.local_rank;
    r.devices = rank.devices;
  }
  return m;
}

NodeWork node_work_of(const Start& start) {
  NodeWork work;
  work.step = start.step;
  work.run_id = start.run_id;
  work.job_id = start.job_id;
  work.role = start.role;
  work.run_dir = start.run_dir;
  for (const auto& entry : start.env) {
    const auto eq = entry.find('=');
    work.env.emplace_back(entry.substr(0, eq),
                          eq == std::string::npos ? std::string() : entry.substr(eq + 1));
  }
  work.world_size = start.world_size;
  work.nodes = start.nodes;
  work.node_rank = start.node_rank;
  work.max_restarts = start.max_restarts;
  work.restart_count = start.attempt;
  work.master_addr = start.master_addr;
  work.master_port = start.master_port;
  work.devices = device_rule(start.devices);
  work.nccl_flight_recorder = start.nccl_flight_recorder;
  for (const auto& rank : start.ranks) work.ranks.push_back({rank.rank, rank.local_rank, rank.devices});
  return work;
}

}  // namespace flowrun::cluster
