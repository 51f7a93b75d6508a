#include "rank_table.h"

#include <cerrno>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include "flowrun/beneath.h"
#include "flowrun/files.h"
#include "flowrun/logmux.h"

namespace flowrun::cluster {

namespace {

// A rank's end, as its agent reported it.
void record_exit(WorkerRecord& rec, const Exited& m) {
  rec.status.kind = m.kind == Exited::Kind::signaled       ? ExitStatus::Kind::signaled
                    : m.kind == Exited::Kind::spawn_failed ? ExitStatus::Kind::spawn_failed
                                                           : ExitStatus::Kind::exited;
  rec.status.code = m.code;
  rec.status.spawn_error = m.spawn_error;
  rec.pid = m.pid;
  rec.start_unix_ns = m.start_ns;
  rec.end_unix_ns = m.end_ns;
  rec.error_file_unix_ns = m.error_file_ns;
  rec.peak_rss_kib = m.rss_kib;
  if (m.silent_ms) rec.silent_s = static_cast<double>(*m.silent_ms) / 1000;
  rec.suspended = m.suspended;
  rec.stalled = m.stalled;
  rec.command = m.command;
  rec.program = m.program;
  rec.path_python = m.path_python;
}

}  // namespace

RankTable::RankTable(const NodeStep& job, ConsoleBatch& batch)
    : job_(job),
      plan_(*job.plan),
      batch_(batch),
      ranks_(static_cast<std::size_t>(plan_.world_size)),
      files_(static_cast<std::size_t>(plan_.world_size)) {}

// For flowrun status, as soon as the lanes get to it.
void RankTable::write_end(const RankState& r) {
  files_.post(r.record.rank, [path = r.end_file, record = r.record] { write_rank_end(path, record); });
}

RankState* RankTable::of(const Node& n, int rank) {
  if (rank < 0 || rank >= plan_.world_size) return nullptr;
  if (plan_.ranks[static_cast<std::size_t>(rank)].node != n.rank) return nullptr;
  return &ranks_[static_cast<std::size_t>(rank)];
}

bool RankTable::output(const Node& n, const Output& m,
                       const std::function<void(const RankLog::WriteError&)>& failed) {
  RankState* r = of(n, m.rank);
  if (r == nullptr || !r->log) return false;
  if (auto error = r->log->keep(m.is_stderr, m.data)) failed(*error);
  r->log->show(m.is_stderr, m.data, monotonic_now_ns());
  return true;
}

const WorkerRecord* RankTable::exited(const Node& n, const Exited& m) {
  RankState* r = of(n, m.rank);
  if (r == nullptr || r->exited) return nullptr;
  r->exited = true;
  record_exit(r->record, m);
  r->stopped = m.stopped;
  write_end(*r);
  return &r->record;
}

void RankTable::reset() {
  for (auto& r : ranks_) {
    if (r.log) r.log->close();
    r = RankState{};
  }
  // An elastic step's attempt may have fewer or more ranks than the one before.
  ranks_.resize(static_cast<std::size_t>(plan_.world_size));
}

void RankTable::start(const LaunchContext& ctx, const NodeTable& nodes, int attempt, std::int64_t start_ns) {
  for (const auto& rp : plan_.ranks) {
    RankState& r = ranks_[static_cast<std::size_t>(rp.rank)];
    const Node& n = nodes[static_cast<std::size_t>(rp.node)];
    r.record.rank = rp.rank;
    r.record.local_rank = rp.local_rank;
    r.record.node = n.name;
    r.record.status.kind = ExitStatus::Kind::running;
    r.record.start_unix_ns = start_ns;
    const std::string dir = ctx.layout.rank_dir(plan_.step, rp.rank);
    // The directories were made before the nodes joined; a restart makes
    // the output directory the kept attempt took along.
    if (attempt > 0) make_dirs(ctx.layout.output_dir(plan_.step, rp.rank));
    r.record.stdout_log = dir + "/stdout.log";
    r.record.stderr_log = dir + "/stderr.log";
    r.record.error_file = ctx.layout.error_file(plan_.step, rp.rank);
    r.end_file = ctx.layout.end_file(plan_.step, rp.rank);
    files_.post(rp.rank, [path = r.end_file] { unlink(path.c_str()); });  // an earlier attempt's
    open_log(r, n);
  }
}

void RankTable::close_files() {
  for (auto& r : ranks_) {
    if (r.log) r.log->close();
  }
}

void RankTable::lose(const Node& n, const std::string& why, std::int64_t now_ns) {
  for (auto& r : ranks_) {
    if (r.record.node != n.name || r.exited ||
        plan_.ranks[static_cast<std::size_t>(r.record.rank)].node != n.rank)
      continue;
    r.exited = true;
    r.record.status.kind = ExitStatus::Kind::lost;
    r.record.status.spawn_error = why;
    r.record.end_unix_ns = now_ns;
    r.stopped = false;  // lost with its node, not stopped by flowrun
    write_end(r);
  }
}

RankTable::Summary RankTable::record(const NodeTable& nodes, AttemptRecord& attempt) {
  Summary summary;
  for (std::size_t i = 0; i < ranks_.size(); ++i) {
    auto& r = ranks_[i];
    // Slurm signals a step's every process, the ranks with their agent: a
    // rank that died of it on a node whose agent was signalled did not fail.
    const Node& node = nodes[static_cast<std::size_t>(plan_.ranks[i].node)];
    if (node.signalled) {
      summary.signalled = true;
      if (r.record.status.kind == ExitStatus::Kind::signaled) r.stopped = true;
    }
    if (r.log) r.record.stderr_tail = r.log->tail();
    if (!r.record.status.ok()) summary.failed = true;
    if (r.stopped) summary.stopped.push_back(static_cast<int>(i));
    attempt.workers.push_back(r.record);
  }
  return summary;
}

// A rank's log files are opened (and emptied) when it first writes, so
// that thousands of ranks cost nothing until they print. Reached from the
// run directory without following a symlink, as uploads are: a rank on a
// node that shares this file system may have put a link in its place (to
// a file that O_TRUNC would empty).
void RankTable::open_log(RankState& r, const Node& n) {
  RankLog::Options o;
  o.stdout_log = r.record.stdout_log;
  o.stderr_log = r.record.stderr_log;
  o.style = job_.group.style;
  o.shows = job_.shows ? job_.shows(r.record.rank, r.record.local_rank) : ConsoleShows{};
  if (o.shows.any()) o.prefix = log_prefix(n.name + " " + plan_.step, r.record.rank, job_.group.style.color);
  o.rank = r.record.rank;
  o.who = fmt::format("rank {}'s ", r.record.rank);
  // The default opener, open_output_file: beneath the anchored run directory
  // with no link followed, and only a regular file (a FIFO a rank left on
  // the shared file system would block the head). The same for a stream
  // that never wrote, on its lane.
  o.create_later = [this, rank = r.record.rank](const std::string& path) {
    files_.post(rank, [path] {
      int err = 0;
      const int fd = open_output_file(path, false, &err);
      if (fd >= 0) close(fd);
    });
  };
  r.log = std::make_unique<RankLog>(std::move(o), batch_);
}

}  // namespace flowrun::cluster
