#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <malloc.h>
#include <map>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flowrun/beneath.h"
#include "flowrun/cluster.h"
#include "flowrun/doctor.h"
#include "flowrun/error.h"
#include "flowrun/files.h"
#include "flowrun/logmux.h"
#include "flowrun/messages.h"
#include "flowrun/process.h"
#include "flowrun/protocol.h"
#include "flowrun/rank_output.h"
#include "flowrun/slurm.h"
#include "flowrun/step_runner.h"
#include "flowrun/util.h"
#include "flowrun/version.h"

#include "connection.h"
#include "engines.h"
#include "node_start.h"

namespace flowrun {

namespace asio = boost::asio;
using cluster::Connection;

namespace {

using Clock = std::chrono::steady_clock;

Clock::duration seconds_of(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::string plural(std::size_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

class Head : public GroupObserver {
 public:
  Head(Supervisor& supervisor, const Console& console, const NodeStep& job)
      : sup_(supervisor),
        console_(console),
        job_(job),
        plan_(*job.plan),
        cluster_(*job.spec->cluster),
        io_(supervisor.io()),
        heartbeat_timer_(io_),
        join_timer_(io_),
        flush_timer_(io_) {
    nodes_.resize(plan_.nodes.size());
    for (std::size_t i = 0; i < nodes_.size(); ++i) nodes_[i].rank = static_cast<int>(i);
    timeout_s_ = cluster_.heartbeat_timeout_s;
    interval_s_ = std::clamp(timeout_s_ / 4, 0.05, 5.0);
    ranks_.resize(static_cast<std::size_t>(plan_.world_size));
  }

  // Listens, starts the engine's processes (srun, ssh) that bring up the
  // agents, and returns: the agents join while the loop runs (preflight,
  // run_attempt).
  void begin() {
    const std::string step_dir = job_.ctx.layout.step_dir(plan_.step);
    std::string slurm_error;
    const auto slurm_job =
        cluster_.engine == Engine::slurm ? read_slurm_job(job_.ctx.parent_env, &slurm_error) : std::nullopt;
    if (!slurm_error.empty()) throw Error(slurm_error);
    std::vector<std::string> ssh{"ssh"};
    if (auto value = env_get(job_.ctx.parent_env, "FLOWRUN_SSH"); value && !value->empty()) {
      std::string error;
      auto words = split_shell_words(*value, &error);
      if (!words || words->empty())
        throw Error("FLOWRUN_SSH='" + *value + "': " + (error.empty() ? "no command" : error), kExitUsage);
      ssh = std::move(*words);
    }
    if (!cluster_.ssh_command.empty()) ssh = cluster_.ssh_command;
    token_ = make_token();
    std::string listening;  // the console's "ADDRESS:PORT (why)"
    if (!cluster_.rendezvous.empty()) {
      // flowrun run's rendezvous: the token goes where the other nodes'
      // flowrun run looks for it, before anyone can connect.
      write_private_file(cluster_.rendezvous_token_file, token_ + "\n");
      token_file_ = cluster_.rendezvous_token_file;
      const cluster::HeadAddress address{
          cluster_.address.value_or("0.0.0.0"),
          cluster_.address ? "--local-addr" : "every address of this host, as torchrun's store"};
      listen(address.address, rendezvous_port());
      endpoint_ = cluster_.rendezvous;
      listening = endpoint_ + " (" + address.why + ")";
    } else {
      candidates_ = cluster::choose_head_addresses(cluster_, slurm_job, hostname(), ssh);
      listen_on_candidates();
      listening = cluster::describe_head_addresses(candidates_, port_, [](const std::string& address) {
        return cluster::interface_of(address).value_or("");
      });
    }

    // The marker every agent must read at the same path (docs/multinode.md).
    marker_path_ = job_.step->workdir + "/.flowrun/node-check-" + job_.ctx.run_id + "-" + plan_.step;
    marker_text_ = make_nonce();
    make_dirs(job_.step->workdir + "/.flowrun");
    {
      const int fd = open(marker_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) throw Error("cannot write " + marker_path_ + ": " + std::strerror(errno));
      write_all(fd, marker_text_.data(), marker_text_.size());
      close(fd);
    }

    cluster::AgentCommand agent{job_.flowrun_path, endpoint_, job_.fake_gpus};
    const auto engines = job_.start_agents ? std::vector<cluster::EngineLaunch>{}
                                           : cluster::engine_launches(cluster_, plan_, slurm_job, agent, ssh);

    console_.message(fmt::format("flowrun: step '{}': {} workers on {} (engine: {}); the head listens on {}",
                                 plan_.step, plan_.world_size, plural(nodes_.size(), "node", "nodes"),
                                 engine_name(cluster_.engine), listening));
    if (!cluster_.rendezvous.empty()) {
      console_.message(fmt::format(
          "flowrun: this host is node 0; waiting for {} more: run the same `flowrun run` command on {} "
          "({}), from this directory on the shared filesystem",
          plural(nodes_.size() - 1, "node", "nodes"), nodes_.size() == 2 ? "it" : "each",
          nodes_.size() == 2 ? std::string("--node-rank 1")
                             : fmt::format("--node-rank 1 to {}", nodes_.size() - 1)));
    } else if (cluster_.engine == Engine::manual) {
      const std::string token_file = step_dir + "/agent.token";
      write_private_file(token_file, token_ + "\n");
      token_file_ = token_file;
      std::string command;
      for (const auto& word : cluster::agent_argv(agent, -1))
        command += (command.empty() ? "" : " ") + shell_quote(word);
      command += " --token-file " + shell_quote(token_file);
      console_.message(
          fmt::format("flowrun: waiting for {}; on each node run (add --node-rank N to choose its rank):\n"
                      "flowrun:   {}",
                      plural(nodes_.size(), "agent", "agents"), command));
    }

    for (const auto& e : engines) {
      WorkerLaunch launch;
      launch.argv = e.argv;
      EnvMap env = job_.ctx.parent_env;
      env["FLOWRUN_RUN_ID"] = job_.ctx.run_id;  // spawn_process adds the guardian's mark
      for (const auto& [k, v] : env) launch.env.push_back(k + "=" + v);
      launch.workdir = job_.step->workdir;
      launch.label = e.label;
      launch.stdin_text = token_ + "\n";
      const std::string base = step_dir + "/" +
                               (cluster_.engine == Engine::manual ? fmt::format("agent-node{}", e.node)
                                : e.node >= 0                     ? fmt::format("ssh-node{}", e.node)
                                                                  : "srun");
      launch.stdout_log = base + ".stdout.log";
      launch.stderr_log = base + ".stderr.log";
      engine_node_.push_back(e.node);
      engine_what_.push_back(e.what);
      engine_tail_.emplace_back(20, 4096);
      launches_.push_back(std::move(launch));
    }

    // Every rank's directory now, while the engine brings the agents up.
    for (const auto& rp : plan_.ranks) make_dirs(job_.ctx.layout.output_dir(plan_.step, rp.rank));

    accept_next();
    if (job_.start_agents) job_.start_agents(endpoint_, token_);
    start_join_timer(cluster_.join_timeout_s);
    tick_heartbeats();

    GroupOptions group = job_.group;
    group.master_port = 0;
    group.note_leftovers = false;   // srun's own helper process outlives it for a moment
    group.stall_timeout_s.reset();  // the ranks' silence counts (on their nodes), not srun's or ssh's
    // A stop: the agents stop their ranks with the grace and report, and may
    // be a heartbeat late; srun and ssh are killed only after that.
    group.observer_margin_s = 5 + timeout_s_;
    sup_.start_group(launches_, group, this);
  }

  // Every node joined and is ready (then true), or the step ended first.
  bool wait_ready() {
    sup_.run_until([this] { return phase_ == Phase::ready || phase_ == Phase::finished; });
    return phase_ == Phase::ready;
  }

  // preflight: true: once every node is ready, the NCCL check across them.
  std::optional<AttemptResult> preflight() {
    if (wait_ready()) {
      start_preflight();
      if (wait_ready()) return std::nullopt;
    }
    return not_started();
  }

  // One attempt: the first once every node is ready; a restart assigns
  // every node again first. Returns when every node said done or was lost.
  AttemptResult run_attempt(const Attempt& attempt) {
    if (phase_ == Phase::between) {
      attempt_ = attempt.restart;
      assign();
    }
    if (!wait_ready()) return not_started();
    attempt_ = attempt.restart;
    keep_previous_ = attempt.keep_previous;
    start_attempt();
    sup_.run_until([this] { return phase_ != Phase::running; });
    AttemptResult result;
    result.record = attempt_recorded_ ? std::move(last_) : record_attempt();
    result.node_gone = node_gone();
    take_news(result);
    return result;
  }

  // Ends the step on the nodes (bye) and waits until the engine's processes
  // have ended; returns the notes and errors since the last attempt.
  AttemptResult end_step() {
    if (phase_ != Phase::finished) {
      finish();
      if (node_gone()) sup_.stop_group(Outcome::failed);  // srun or ssh of a lost node may hang: stop them
    }
    sup_.finish_group();
    for (auto& n : nodes_) {
      if (n.conn) n.conn->close();
    }
    close_acceptors();
    close_pending();
    heartbeat_timer_.cancel();
    join_timer_.cancel();
    flush_timer_.cancel();
    for (auto& r : ranks_) close_rank_files(r);
    flush_console();
    io_.poll();
    unlink(marker_path_.c_str());
    if (!token_file_.empty()) unlink(token_file_.c_str());
    AttemptResult rest;
    take_news(rest);
    return rest;
  }

  int interrupt_signal() const { return sup_.interrupt_received(); }
  std::string placement() const { return plural(nodes_.size(), "node", "nodes"); }

  // ---- GroupObserver ------------------------------------------------------

  void on_output(std::size_t index, bool is_err, std::string_view data) override {
    (void)is_err;
    engine_tail_[index].feed(data);
    // srun waiting for resources: the join timeout counts from the grant.
    if (data.find("queued and waiting for resources") != std::string_view::npos) {
      join_timer_.cancel();
      waiting_for_grant_ = true;
    } else if (waiting_for_grant_ && data.find("has been allocated resources") != std::string_view::npos) {
      waiting_for_grant_ = false;
      if (phase_ == Phase::joining) start_join_timer(cluster_.join_timeout_s);
    }
  }

  bool on_exit(std::size_t index, const WorkerRecord& record) override {
    if (phase_ == Phase::finished) return false;
    const int node = engine_node_[index];
    std::string tail = engine_tail_[index].text();
    while (!tail.empty() && tail.back() == '\n') tail.pop_back();
    const std::string what = fmt::format("{} {}", engine_what_[index], record.status.describe());
    if (phase_ == Phase::joining && (node < 0 || !nodes_[static_cast<std::size_t>(node)].joined)) {
      std::string message =
          what + " before " + (node < 0 ? std::string("every agent") : std::string("its agent")) + " joined";
      if (!tail.empty()) {
        message += "; its last output:";
        for (const auto& line : split_lines(tail)) message += "\n    " + line;
      }
      fail_before_start(message);
      return false;
    }
    if (phase_ == Phase::running || phase_ == Phase::assigning || phase_ == Phase::checking) {
      engine_note_ = what + (tail.empty() ? "" : ": " + split_lines(tail).back());
    }
    return false;
  }

  bool on_stop(Outcome why) override {
    if (phase_ == Phase::running) {
      if (!stopping_) {
        stopping_ = true;
        outcome_ = why;
        for (auto& n : nodes_) {
          if (n.conn && n.conn->is_open())
            n.conn->send(Stop{why == Outcome::timed_out ? "timeout" : "interrupted"});
        }
      }
      return true;
    }
    // Nothing runs on the nodes yet: end the agents, and let the supervisor
    // stop srun or ssh.
    if (phase_ != Phase::finished) {
      outcome_ = why;
      outcome_before_start_ = why;
      if (why == Outcome::timed_out)
        errors_.push_back(fmt::format("the step's timeout ran out before {} joined",
                                      phase_ == Phase::joining ? "every node" : "the ranks started"));
      finish();
    }
    return false;
  }

  void on_kill() override {
    for (auto& n : nodes_) {
      if (n.conn && n.conn->is_open()) n.conn->send(Stop{"killed", true});
    }
  }

  // SIGUSR1, SIGUSR2: every agent gives it to its ranks. srun and ssh, the
  // head's own processes, never get it (srun would pass it on a second time;
  // ssh would die of it).
  bool on_signal(int sig) override {
    if (phase_ != Phase::running) return true;  // no rank runs yet
    for (auto& n : nodes_) {
      if (n.conn && n.conn->is_open() && !n.lost) n.conn->send(Signal{signal_name(sig)});
    }
    return true;
  }

 private:
  // ready: every node is ready for an attempt; between: an attempt ended,
  // and the step runner decides what comes next.
  enum class Phase { joining, assigning, checking, ready, running, between, finished };

  struct Upload {
    int rank = -1;
    std::string path;
    UniqueFd fd;
    UniqueFd dir;      // the directory it is made in, to remove it from (unlinkat)
    std::string leaf;  // its name there
    std::int64_t size = 0;
    std::int64_t got = 0;
    Crc32c crc;
    bool refused = false;
  };

  struct Node {
    int rank = 0;
    std::shared_ptr<Connection> conn;
    std::string name;     // the host name its agent reported
    std::string peer_ip;  // where it connected from
    std::string via;      // the head's address it reached (one of candidates_)
    bool joined = false;
    bool ready = false;
    bool done = false;
    bool lost = false;
    bool closed = false;     // its connection ended after its done
    bool signalled = false;  // its agent was told to stop by a signal (Slurm's scancel, preemption)
    std::string address;     // node 0: MASTER_ADDR
    int port = 0;            // node 0: MASTER_PORT
    int gpus = -1;
    std::optional<Upload> upload;
  };

  // A connection that has not authenticated yet: it may read at most
  // kMaxHandshakeFrame per frame and has cluster.heartbeat_timeout to prove
  // the token; at most kMaxPending of them are open at once.
  struct Pending {
    std::shared_ptr<Connection> conn;
    std::unique_ptr<asio::steady_timer> deadline;
    std::string node;
    std::string agent_nonce;
    std::string head_nonce;
    int claim = -1;
    int gpus = -1;
    std::string ip;
    std::string via;             // the head's address it dialed
    bool authenticated = false;  // its auth proved the token
    bool settled = false;        // admitted, refused or gone
  };
  // Connections in their handshake at once: in all (a few hundred bytes and a
  // timer each), and from one address (1024 agents on one host, or behind one
  // NAT, dial at once: the rendezvous benchmark; a flowrun agent refused
  // for want of room tries again, rdzv_clients does not).
  static constexpr std::size_t kMaxPending = 2048;
  static constexpr std::size_t kMaxPendingPerSource = 1024;

  struct RankState {
    WorkerRecord record;
    bool stopped = false;
    bool exited = false;
    std::unique_ptr<RankLog> log;  // from the attempt's start
  };

  static std::string hostname() {
    char name[256] = {};
    gethostname(name, sizeof name - 1);
    return name;
  }

  static std::vector<std::string> split_lines(const std::string& text) {
    std::vector<std::string> lines;
    std::size_t pos = 0;
    while (pos < text.size()) {
      std::size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      lines.push_back(text.substr(pos, end - pos));
      pos = end + 1;
    }
    return lines;
  }

  std::string node_name(const Node& n) const {
    if (!n.name.empty()) return n.name;
    const auto& host = plan_.nodes[static_cast<std::size_t>(n.rank)].host;
    return host.empty() ? fmt::format("node rank {}", n.rank) : host;
  }

  // ---- listening -----------------------------------------------------------

  std::uint16_t rendezvous_port() const {
    const auto colon = cluster_.rendezvous.rfind(':');
    return static_cast<std::uint16_t>(std::stoi(cluster_.rendezvous.substr(colon + 1)));
  }

  // A file only this user can read (the run's token), replacing any old one.
  static void write_private_file(const std::string& path, const std::string& text) {
    const auto slash = path.rfind('/');
    if (slash != std::string::npos && slash > 0) {
      make_dirs(path.substr(0, slash));
      chmod(path.substr(0, slash).c_str(), 0700);
    }
    unlink(path.c_str());
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) throw Error("cannot write " + path + ": " + std::strerror(errno));
    const bool ok = write_all(fd, text.data(), text.size());
    close(fd);
    if (!ok) throw Error("cannot write " + path + ": " + std::strerror(errno));
  }

  // Thousands of agents are thousands of sockets. The workers still get the
  // limit flowrun started with (raise_open_file_limit keeps it for them).
  static void raise_fd_limit() { raise_open_file_limit(); }

  void listen(const std::string& address, std::uint16_t port) {
    raise_fd_limit();
    boost::system::error_code ec;
    const auto ip = asio::ip::make_address(address, ec);
    if (ec) {
      // A host name: listen on the address it resolves to.
      asio::ip::tcp::resolver resolver(io_);
      auto found = resolver.resolve(address, "0", ec);
      if (ec || found.empty())
        throw Error("cannot resolve the head's address '" + address + "': " + ec.message());
      open_acceptor(found.begin()->endpoint().address(), port);
    } else {
      open_acceptor(ip, port);
    }
  }

  void open_acceptor(const asio::ip::address& ip, std::uint16_t port) {
    boost::system::error_code ec;
    auto acceptor = open_acceptor_at(ip, port, ec);
    if (ec)
      throw Error("cannot listen on " + ip.to_string() + (port ? ":" + std::to_string(port) : "") + ": " +
                  ec.message() +
                  (port ? " (is another job using that port? choose another)" : " (set cluster.address)"));
    port_ = acceptor->local_endpoint().port();
    endpoint_ = (ip.is_v6() ? "[" + ip.to_string() + "]" : ip.to_string()) + ":" + std::to_string(port_);
    acceptors_.push_back(std::move(acceptor));
  }

  std::unique_ptr<asio::ip::tcp::acceptor> open_acceptor_at(const asio::ip::address& ip, std::uint16_t port,
                                                            boost::system::error_code& ec) {
    auto acceptor = std::make_unique<asio::ip::tcp::acceptor>(io_);
    asio::ip::tcp::endpoint where(ip, port);
    acceptor->open(where.protocol(), ec);
    if (!ec && port != 0) acceptor->set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor->bind(where, ec);
    if (!ec) acceptor->listen(4096, ec);
    return acceptor;
  }

  // One port on every candidate address, and on no other: the first takes a
  // free port, the others bind the same one; when one of them finds it taken
  // (another program listens there on that address) all start again.
  void listen_on_candidates() {
    if (candidates_.size() == 1) {
      // cluster.address may be a host name: the console shows the address it resolved to.
      listen(candidates_.front().address, 0);
      candidates_.front().address = acceptors_.front()->local_endpoint().address().to_string();
      return;
    }
    raise_fd_limit();
    std::string last_error;
    for (int round = 0; round < 20; ++round) {
      acceptors_.clear();
      std::vector<cluster::HeadAddress> kept;
      boost::system::error_code ec;
      for (const auto& c : candidates_) {
        const auto ip = asio::ip::make_address(c.address, ec);
        if (ec) break;
        auto acceptor = open_acceptor_at(ip, port_, ec);
        if (ec == asio::error::address_in_use && port_ != 0) break;
        if (ec) {
          // Not this host's after all (it changed meanwhile): the others still serve.
          last_error = c.address + ": " + ec.message();
          ec.clear();
          continue;
        }
        if (port_ == 0) port_ = acceptor->local_endpoint().port();
        acceptors_.push_back(std::move(acceptor));
        kept.push_back(c);
      }
      if (!ec && !kept.empty()) {
        candidates_ = std::move(kept);
        std::string list;
        for (const auto& c : candidates_)
          list += (list.empty() ? "" : ",") + c.address + ":" + std::to_string(port_);
        endpoint_ = list;
        return;
      }
      if (ec && ec != asio::error::address_in_use) last_error = ec.message();
      port_ = 0;
    }
    acceptors_.clear();
    throw Error("cannot listen on this host's addresses: " +
                (last_error.empty() ? "no port free" : last_error) + " (set cluster.address)");
  }

  void close_acceptors() {
    boost::system::error_code ignored;
    for (auto& a : acceptors_) a->close(ignored);
  }

  void accept_next() {
    for (auto& a : acceptors_) accept_next(*a);
  }

  void accept_next(asio::ip::tcp::acceptor& acceptor) {
    acceptor.async_accept(
        [this, &acceptor](const boost::system::error_code& ec, asio::ip::tcp::socket socket) {
          if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
          if (!ec) on_accept(std::move(socket));
          accept_next(acceptor);
        });
  }

  void on_accept(asio::ip::tcp::socket socket) {
    boost::system::error_code ec;
    const auto remote = socket.remote_endpoint(ec);
    const std::string ip = ec ? std::string("?") : remote.address().to_string();
    const auto local = socket.local_endpoint(ec);
    const std::string via = ec ? std::string() : local.address().to_string();
    std::erase_if(pending_, [](const std::shared_ptr<Pending>& p) { return p->settled; });
    const auto from_ip = static_cast<std::size_t>(std::count_if(
        pending_.begin(), pending_.end(), [&](const std::shared_ptr<Pending>& p) { return p->ip == ip; }));
    if (from_ip >= kMaxPendingPerSource || pending_.size() >= kMaxPending) {
      // Full: the connection silent longest (no hello yet, nothing unread)
      // makes room, so that one that holds connections open without a word
      // cannot keep the agents out (they
      // answer within a round trip; an agent dropped anyway tries again
      // within its connect timeout). Over the per-source cap only that
      // source's own are candidates; over the total, those of the source that
      // holds the most.
      std::string source = ip;
      if (from_ip < kMaxPendingPerSource) {
        std::map<std::string, std::size_t> count;
        for (const auto& p : pending_) ++count[p->ip];
        source = std::max_element(count.begin(), count.end(), [](const auto& a, const auto& b) {
                   return a.second < b.second;
                 })->first;
      }
      std::shared_ptr<Pending> idlest;
      for (const auto& p : pending_) {
        // Only one that has not even said hello: an agent in the middle of
        // its handshake is never dropped for a newcomer.
        if (p->ip != source || !p->head_nonce.empty()) continue;
        boost::system::error_code unread_ec;
        if (p->conn->socket().available(unread_ec) > 0 || unread_ec) continue;  // it has spoken since
        if (!idlest || p->conn->last_heard_ns() < idlest->conn->last_heard_ns()) idlest = p;
      }
      if (!said_too_many_pending_) {
        const std::string who = from_ip >= kMaxPendingPerSource
                                    ? fmt::format("{} connections from {}", from_ip, ip)
                                    : fmt::format("{} connections", pending_.size());
        console_.message(
            fmt::format("flowrun: step '{}': {} are waiting to authenticate; dropping the longest "
                        "idle of them for each new one",
                        plan_.step, who));
      }
      said_too_many_pending_ = true;
      note_stranger(source);
      if (!idlest) {
        socket.close(ec);
        return;
      }
      settle(*idlest);
      idlest->conn->close();
      std::erase(pending_, idlest);
    }
    auto conn = std::make_shared<Connection>(std::move(socket), "agent at " + ip);
    conn->set_max_frame(kMaxHandshakeFrame);
    conn->refuse_other_versions();
    auto pending = std::make_shared<Pending>();
    pending->conn = conn;
    pending->ip = ip;
    pending->via = via;
    pending->deadline = std::make_unique<asio::steady_timer>(io_);
    pending->deadline->expires_after(seconds_of(timeout_s_));
    // Captures `this` only behind the error check: at the end of the step
    // every deadline is cancelled before the head goes away.
    pending->deadline->async_wait([this, pending, ip](const boost::system::error_code& error) {
      if (error || pending->settled) return;
      refuse(*pending, ip,
             fmt::format("it did not authenticate within {:g} s (cluster.heartbeat_timeout)", timeout_s_));
    });
    pending_.push_back(pending);
    conn->start([this, pending, ip](Frame& frame) { on_handshake(*pending, ip, frame); },
                [this, pending, ip](const std::string& why) {
                  if (pending->settled) return;
                  settle(*pending);
                  // A port scan opens and closes; only a peer that sent bytes
                  // flowrun could not read is worth a line.
                  note_stranger(ip);
                  if (why != "the connection closed" && why.rfind("the connection failed", 0) != 0)
                    console_.message(
                        fmt::format("flowrun: step '{}': dropped a connection from {} before it "
                                    "authenticated: {}",
                                    plan_.step, ip, why));
                });
  }

  void settle(Pending& p) {
    p.settled = true;
    if (p.deadline) p.deadline->cancel();
  }

  void close_pending() {
    for (auto& p : pending_) {
      if (p->settled) continue;
      settle(*p);
      p->conn->close();
    }
    pending_.clear();
  }

  void refuse(Pending& p, const std::string& ip, const std::string& reason) {
    settle(p);
    if (!p.authenticated) note_stranger(ip);
    // A peer that never said hello gets a line, up to a point: one that
    // keeps opening connections must not flood the console.
    if (p.node.empty() && ++silent_refused_ > kSilentRefusalLines) {
      if (silent_refused_ == kSilentRefusalLines + 1)
        console_.message(
            fmt::format("flowrun: step '{}': more connections that say nothing are being refused; "
                        "no further line for them",
                        plan_.step));
    } else {
      console_.message(fmt::format("flowrun: step '{}': refused an agent from {}{}: {}", plan_.step, ip,
                                   p.node.empty() ? "" : " (" + printable(p.node) + ")", printable(reason)));
    }
    p.conn->send(Refused{reason});
    p.conn->close_after_send();
  }

  void on_handshake(Pending& p, const std::string& ip, Frame& frame) {
    std::string error;
    const auto message = decode_message(frame, &error);
    if (!message) {
      refuse(p, ip, "malformed " + std::string(message_type_name(frame.type)) + ": " + error);
      return;
    }
    if (const auto* hello = std::get_if<Hello>(&*message); hello && p.head_nonce.empty()) {
      p.node = hello->node;
      p.agent_nonce = hello->nonce;
      p.claim = hello->node_rank;
      p.gpus = hello->gpus;
      const std::string& version = hello->flowrun;
      if (p.node.empty() || p.agent_nonce.size() < 16) {
        refuse(p, ip, "its hello lacks a node name or nonce");
        return;
      }
      if (version != FLOWRUN_VERSION) {
        refuse(p, ip,
               fmt::format("it runs flowrun {}, the head runs {}: run the same flowrun on every node",
                           version.empty() ? "(unknown)" : version, FLOWRUN_VERSION));
        return;
      }
      p.head_nonce = make_nonce();
      p.conn->send(Challenge{p.head_nonce});
      return;
    }
    if (const auto* auth = std::get_if<Auth>(&*message); auth && !p.head_nonce.empty()) {
      if (!proofs_equal(auth->proof, auth_proof(token_, p.head_nonce, "agent:" + p.node))) {
        refuse(p, ip, "wrong token");
        return;
      }
      p.authenticated = true;
      admit(p, ip);
      return;
    }
    refuse(p, ip, fmt::format("unexpected {} during the handshake", message_type_name(frame.type)));
  }

  // A connection that did not prove the token was refused or dropped: the
  // join timeout's report says so, rather than only blaming the nodes.
  void note_stranger(const std::string& ip) {
    ++strangers_;
    if (stranger_sources_.size() < 4 &&
        std::find(stranger_sources_.begin(), stranger_sources_.end(), ip) == stranger_sources_.end())
      stranger_sources_.push_back(ip);
  }

  void admit(Pending& p, const std::string& ip) {
    if (phase_ != Phase::joining) {
      refuse(p, ip,
             fmt::format("all {} have joined step '{}'", plural(nodes_.size(), "node", "nodes"), plan_.step));
      return;
    }
    int rank = p.claim;
    if (rank >= static_cast<int>(nodes_.size())) {
      refuse(p, ip,
             fmt::format("it asks for node rank {}, but the step has {}", rank,
                         plural(nodes_.size(), "node", "nodes")));
      return;
    }
    if (rank >= 0 && nodes_[static_cast<std::size_t>(rank)].joined) {
      refuse(p, ip,
             fmt::format("node rank {} has already joined (from {})", rank,
                         nodes_[static_cast<std::size_t>(rank)].name));
      return;
    }
    if (rank < 0) {
      std::vector<bool> joined;
      for (const auto& n : nodes_) joined.push_back(n.joined);
      rank = cluster::free_node_rank(joined, engine_node_);
    }
    if (rank < 0) {
      refuse(p, ip, "no node rank is left for it");
      return;
    }
    settle(p);
    p.conn->set_max_frame(kMaxSealedFrameSize);
    Node& n = nodes_[static_cast<std::size_t>(rank)];
    n.joined = true;
    n.name = printable(p.node);  // it is printed, and in the report
    n.peer_ip = ip;
    n.via = p.via;
    n.gpus = p.gpus;
    n.conn = p.conn;
    p.conn->send(Welcome{auth_proof(token_, p.agent_nonce, "head:" + p.node), rank,
                         static_cast<std::int64_t>(interval_s_ * 1000),
                         static_cast<std::int64_t>(timeout_s_ * 1000)});
    // Every frame after welcome is sealed, both ways.
    const FrameKeys keys = derive_frame_keys(token_, p.agent_nonce, p.head_nonce, p.node);
    p.conn->set_ciphers(
        FrameCipher(keys.head_to_agent, Direction::head_to_agent),
        FrameCipher(keys.agent_to_head, Direction::agent_to_head, "the agent of node " + n.name));
    // From now on frames go to the node.
    auto conn = p.conn;
    conn->set_handlers(
        [this, rank](Frame& frame) { on_node_frame(nodes_[static_cast<std::size_t>(rank)], frame); },
        [this, rank](const std::string& why) {
          on_node_closed(nodes_[static_cast<std::size_t>(rank)], why);
        });
    ++joined_;
    if (joined_ == static_cast<int>(nodes_.size())) all_joined();
  }

  // ---- phases --------------------------------------------------------------

  // Agents that could not reach the first candidate and dialed another: the
  // choice was wrong for them, which the console says (nothing when every
  // agent reached the first).
  void say_fallback_addresses() {
    if (candidates_.size() < 2) return;
    std::vector<std::pair<std::string, std::vector<std::string>>> by_address;
    for (const auto& n : nodes_) {
      if (n.via.empty() || n.via == candidates_.front().address) continue;
      auto at =
          std::find_if(by_address.begin(), by_address.end(), [&](const auto& e) { return e.first == n.via; });
      if (at == by_address.end()) at = by_address.insert(by_address.end(), {n.via, {}});
      at->second.push_back(n.name);
    }
    for (const auto& [address, names] : by_address) {
      std::string why;
      for (const auto& c : candidates_)
        if (c.address == address) why = c.why;
      const std::size_t shown = std::min<std::size_t>(names.size(), 8);
      std::string who =
          fmt::format("{}", fmt::join(names.begin(), names.begin() + static_cast<long>(shown), ", "));
      if (names.size() > shown) who += fmt::format(" and {} more", names.size() - shown);
      console_.message(fmt::format(
          "flowrun: step '{}': {} ({} of {}) reached the head at {} ({}), not at {}; set cluster.address to "
          "an address every node reaches",
          plan_.step, who, names.size(), plural(nodes_.size(), "node", "nodes"), address, why,
          candidates_.front().address));
    }
  }

  void all_joined() {
    join_timer_.cancel();
    say_fallback_addresses();
    // Nodes that do not have the GPUs the plan gave them are refused.
    if (!plan_.cpu) {
      std::vector<std::string> wrong;
      for (const auto& n : nodes_) {
        const int planned = plan_.nodes[static_cast<std::size_t>(n.rank)].gpus_available;
        if (planned > 0 && n.gpus != planned)
          wrong.push_back(fmt::format("node {} has {}, the plan gives each node {}", n.name,
                                      plural(static_cast<std::size_t>(std::max(n.gpus, 0)), "GPU", "GPUs"),
                                      planned));
      }
      if (!wrong.empty()) {
        fail_before_start(
            fmt::format("{}", fmt::join(wrong, "; ")) +
            " (cluster.gpus_per_node, or this host's count); nodes with different GPU counts are "
            "not supported");
        return;
      }
    }
    assign();
  }

  void assign() {
    phase_ = Phase::assigning;
    ready_ = 0;
    for (auto& n : nodes_) {
      n.ready = false;
      n.done = false;
      Assign m;
      m.step = plan_.step;
      m.run_id = job_.ctx.run_id;
      m.attempt = attempt_;
      m.node_rank = n.rank;
      m.nodes = static_cast<int>(nodes_.size());
      m.workdir = job_.step->workdir;
      m.marker_path = marker_path_;
      m.marker_text = marker_text_;
      m.want_port = n.rank == 0;
      m.grace_ms = static_cast<std::int64_t>(job_.group.grace_s * 1000);
      // stall_timeout is enforced by each node's agent, whose supervisor reads
      // its ranks' pipes: silence is measured where the ranks write, not from
      // output frames that the network, the connection's queue or a busy head
      // may hold back, and the agent can tell a stopped (SIGSTOP) rank by its
      // /proc state. The agent reports the stalled ranks (Stalled) and the
      // head names them and stops every node.
      if (job_.group.stall_timeout_s) m.stall_ms = std::llround(*job_.group.stall_timeout_s * 1000);
      n.conn->send(m);
    }
  }

  void on_ready(Node& n, const Ready& m) {
    if (phase_ != Phase::assigning || n.ready) return;
    n.ready = true;
    if (!m.workdir_ok) {
      workdir_errors_.push_back(fmt::format(
          "node {} does not see the step's workdir {} as this host does ({}); ranks on every node run in the "
          "same workdir, so it must be a directory every node shares (NFS, Lustre, ...) at the same path",
          n.name, job_.step->workdir, printable(m.workdir_error)));
    }
    if (n.rank == 0) {
      n.address = m.address;
      n.port = m.port;
    }
    if (++ready_ < static_cast<int>(nodes_.size())) return;
    if (!workdir_errors_.empty()) {
      for (const auto& e : workdir_errors_) fail_before_start(e);
      return;
    }
    phase_ = Phase::ready;
  }

  // ---- preflight: true ------------------------------------------------------
  //
  // flowrun doctor's NCCL check across every node before any rank starts:
  // node 0's agent runs its check child, which makes the communicator's id;
  // the head hands the id to the other nodes, whose check children join the
  // same communicator (ncclCommInitRank), and every node reports what it
  // found. The first node whose check fails stops the others' (a stop); the
  // report names it, and the step is refused as one whose nodes never started.

  void start_preflight() {
    phase_ = Phase::checking;
    preflight_ = ClusterDoctorFacts{};
    preflight_answered_.assign(nodes_.size(), false);
    preflight_started_.assign(nodes_.size(), false);
    std::vector<std::string> where;
    for (const auto& n : nodes_) {
      NodeDoctorFacts node;
      node.node_rank = n.rank;
      node.first_rank = preflight_.ranks;
      node.facts.hostname = n.name;
      preflight_.ranks += static_cast<int>(plan_.nodes[static_cast<std::size_t>(n.rank)].gpus.size());
      preflight_.nodes.push_back(std::move(node));
      where.push_back(fmt::format("{} GPUs {}", n.name, preflight_devices(n.rank)));
    }
    console_.message(fmt::format("flowrun: step '{}': preflight: checking NCCL across {}, {} ({})",
                                 plan_.step, plural(nodes_.size(), "node", "nodes"),
                                 plural(static_cast<std::size_t>(preflight_.ranks), "GPU", "GPUs"),
                                 fmt::join(where, "; ")));
    send_preflight(nodes_[0], "make");
  }

  std::string preflight_devices(int node_rank) const {
    std::vector<std::string> devices;
    for (const Gpu& gpu : plan_.nodes[static_cast<std::size_t>(node_rank)].gpus)
      devices.push_back(std::to_string(gpu.index));
    return fmt::format("{}", fmt::join(devices, ","));
  }

  void send_preflight(Node& n, const std::string& nccl_id) {
    const DoctorOptions sweep = preflight_options();
    preflight_started_[static_cast<std::size_t>(n.rank)] = true;
    Preflight m;
    for (const Gpu& gpu : plan_.nodes[static_cast<std::size_t>(n.rank)].gpus) m.devices.push_back(gpu.index);
    m.nranks = preflight_.ranks;
    m.first_rank = preflight_.nodes[static_cast<std::size_t>(n.rank)].first_rank;
    m.nccl_id = nccl_id;
    m.min_bytes = sweep.min_bytes;
    m.max_bytes = sweep.max_bytes;
    m.factor = sweep.factor;
    m.warmup = sweep.warmup;
    m.iters = sweep.iters;
    m.timeout_s = sweep.timeout_s;
    n.conn->send(m);
  }

  // Node 0's check made the communicator's id: the others join it now.
  void on_preflight_id(Node& n, const PreflightId& m) {
    const std::string& id = m.nccl_id;
    if (phase_ != Phase::checking || n.rank != 0 || preflight_started_.size() < 2 || preflight_started_[1])
      return;
    if (id.size() != kNcclIdHexChars || id.find_first_not_of("0123456789abcdef") != std::string::npos) {
      protocol_error(n, "malformed preflight_id");
      return;
    }
    for (auto& other : nodes_) {
      if (other.rank != 0 && !other.lost) send_preflight(other, id);
    }
  }

  void on_preflight_done(Node& n, const PreflightDone& m) {
    const auto index = static_cast<std::size_t>(n.rank);
    if (phase_ != Phase::checking || preflight_answered_[index]) return;
    preflight_answered_[index] = true;
    NodeDoctorFacts& node = preflight_.nodes[index];
    try {
      node.facts = parse_doctor_facts(m.facts, "node " + n.name + "'s preflight report");
      node.facts.hostname = n.name;
    } catch (const Error& e) {
      node.not_checked = std::string("its report could not be read: ") + e.what();
    }
    const bool ok = node.not_checked.empty() && node.facts.allreduce.status == "ok";
    if (n.rank == 0 && !preflight_started_[std::min<std::size_t>(1, nodes_.size() - 1)]) {
      // Node 0 ended without an id: the others never began. Where the check
      // does not run at all (simulated GPUs, a flowrun built without GPU
      // support: the same on every node), that is the reason for them too.
      const std::string& skipped = node.facts.runtime_skipped;
      for (std::size_t i = 1; i < nodes_.size(); ++i) {
        preflight_answered_[i] = true;
        preflight_.nodes[i].not_checked =
            node.not_checked.empty() && !skipped.empty()
                ? skipped
                : "its check never started: node 0's ended before it made the NCCL communicator";
      }
    } else if (!ok && !preflight_stopping_) {
      // The communicator cannot complete without this node: stop the others' checks.
      preflight_stopping_ = true;
      for (auto& other : nodes_) {
        if (!preflight_answered_[static_cast<std::size_t>(other.rank)] && other.conn && other.conn->is_open())
          other.conn->send(Stop{"the preflight check failed on node " + n.name});
      }
    }
    if (std::find(preflight_answered_.begin(), preflight_answered_.end(), false) != preflight_answered_.end())
      return;
    const DoctorReport report = evaluate_cluster_doctor(preflight_);
    const std::string text = format_cluster_doctor_text(preflight_, report);
    // The whole report stays with the run, passed or not (the console shows it on failure).
    const std::string path = job_.ctx.layout.step_dir(plan_.step) + "/preflight.txt";
    const int err = try_write_file(path, text);
    if (report.exit_code != 0) {
      console_.message(text);
      fail_before_start(
          "the preflight check of its GPUs across the nodes failed (the report above); fix what it names, "
          "or set preflight: false");
      return;
    }
    console_.message(
        fmt::format("flowrun: step '{}': preflight {} ({})", plan_.step, preflight_summary(report),
                    err == 0 ? "report: " + path : "cannot write " + path + ": " + std::strerror(err)));
    phase_ = Phase::ready;
  }

  void start_attempt() {
    phase_ = Phase::running;
    stopping_ = false;
    outcome_ = Outcome::succeeded;
    attempt_started_ = true;
    attempt_recorded_ = false;
    done_ = 0;
    LaunchContext ctx = job_.ctx;
    ctx.node0_address = nodes_[0].address;
    ctx.master_port = nodes_[0].port;
    ctx.restart_count = attempt_;
    master_port_ = ctx.master_port;
    attempt_start_ns_ = unix_now_ns();
    for (auto& r : ranks_) {
      close_rank_files(r);
      r = RankState{};
    }
    // A restart: the step runner keeps what the attempt before left (logs,
    // traceback, uploads) in attemptN/, now that every node is ready.
    if (keep_previous_) keep_previous_();
    keep_previous_ = nullptr;
    for (const auto& rp : plan_.ranks) {
      RankState& r = ranks_[static_cast<std::size_t>(rp.rank)];
      const Node& n = nodes_[static_cast<std::size_t>(rp.node)];
      r.record.rank = rp.rank;
      r.record.local_rank = rp.local_rank;
      r.record.node = n.name;
      r.record.status.kind = ExitStatus::Kind::running;
      r.record.start_unix_ns = attempt_start_ns_;
      const std::string dir = ctx.layout.rank_dir(plan_.step, rp.rank);
      // The directories were made before the nodes joined; a restart makes
      // the output directory the kept attempt took along.
      if (attempt_ > 0) make_dirs(ctx.layout.output_dir(plan_.step, rp.rank));
      r.record.stdout_log = dir + "/stdout.log";
      r.record.stderr_log = dir + "/stderr.log";
      r.record.error_file = ctx.layout.error_file(plan_.step, rp.rank);
      open_rank_log(r, n);
    }
    if (attempt_ == 0) {
      std::vector<std::string> names;
      for (const auto& n : nodes_) names.push_back(n.name);
      console_.message(fmt::format("flowrun: step '{}': {} joined ({}); MASTER_ADDR {}, MASTER_PORT {}",
                                   plan_.step, plural(nodes_.size(), "node", "nodes"), fmt::join(names, ", "),
                                   master_addr(plan_, ctx), ctx.master_port));
    }
    // Every node's start message first, then the writes: the nodes start
    // together. Each carries its node's part of the plan; the node's agent
    // makes its ranks' environment from it.
    std::vector<std::string> frames(nodes_.size());
    for (const auto& n : nodes_) {
      Start m = cluster::start_of(node_work(*job_.spec, *job_.step, plan_, n.rank, ctx));
      m.workdir = job_.step->workdir;
      m.argv = job_.argv;
      for (auto& r : m.ranks) r.upload = job_.step->collect == Collect::all || r.rank == 0;
      frames[static_cast<std::size_t>(n.rank)] = to_wire(encode(m));
    }
    for (auto& n : nodes_) n.conn->send_frame(std::move(frames[static_cast<std::size_t>(n.rank)]));
  }

  // ---- messages from a node ------------------------------------------------

  void on_node_frame(Node& n, Frame& frame) {
    if (frame.type == MessageType::upload_chunk) {
      // Bulk data: read in place, not copied into a message.
      if (auto data = upload_chunk_data(frame.payload)) {
        on_upload_data(n, *data);
        return;
      }
    }
    std::string error;
    auto message = decode_message(frame, &error);
    if (!message) {
      protocol_error(n, fmt::format("malformed {}: {}", message_type_name(frame.type), error));
      return;
    }
    std::visit([this, &n](const auto& m) { on_node_message(n, m); }, *message);
  }

  // What a node sends, by message; anything else is a protocol error.
  template <class M>
  void on_node_message(Node& n, const M&) {
    protocol_error(n, fmt::format("unexpected {}", message_type_name(M::kType)));
  }
  void on_node_message(Node&, const Heartbeat&) {}
  void on_node_message(Node&, const Bye&) {}
  void on_node_message(Node& n, const Ready& m) { on_ready(n, m); }
  void on_node_message(Node& n, const Output& m) { on_rank_output(n, m); }
  void on_node_message(Node& n, const Exited& m) { on_rank_exited(n, m); }
  void on_node_message(Node& n, const UploadBegin& m) { on_upload_begin(n, m); }
  void on_node_message(Node& n, const UploadChunk& m) { on_upload_data(n, m.data); }
  void on_node_message(Node& n, const UploadEnd& m) { on_upload_end(n, m); }
  void on_node_message(Node& n, const Done& m) { on_done(n, m); }
  void on_node_message(Node& n, const PreflightId& m) { on_preflight_id(n, m); }
  void on_node_message(Node& n, const PreflightDone& m) { on_preflight_done(n, m); }
  void on_node_message(Node& n, const Stalled& m) { on_node_stalled(n, m); }

  // Its agent got a signal.
  void on_node_message(Node& n, const Stop& m) {
    const std::string reason = printable(m.reason);
    n.signalled = true;
    notes_.push_back(fmt::format("node {}: {}", n.name, reason));
    console_.message(fmt::format("flowrun: step '{}': node {}: {}", plan_.step, n.name, reason));
    if (phase_ == Phase::running && !stopping_)
      stop_nodes(Outcome::interrupted, "node " + n.name + ": " + reason);
  }

  void protocol_error(Node& n, const std::string& what) {
    errors_.push_back(fmt::format("node {}: {}", n.name, what));
    n.conn->close();
    node_lost(n, what);
  }

  RankState* rank_of(Node& n, int rank) {
    if (rank < 0 || rank >= plan_.world_size) return nullptr;
    if (plan_.ranks[static_cast<std::size_t>(rank)].node != n.rank) return nullptr;
    return &ranks_[static_cast<std::size_t>(rank)];
  }

  void on_rank_output(Node& n, const Output& m) {
    RankState* r = rank_of(n, m.rank);
    if (r == nullptr || !r->log) return;
    if (auto error = r->log->keep(m.is_stderr, m.data)) log_failed(*error);
    r->log->show(m.is_stderr, m.data, monotonic_now_ns());
    schedule_flush();
  }

  void on_rank_exited(Node& n, const Exited& m) {
    RankState* r = rank_of(n, m.rank);
    if (r == nullptr || r->exited) return;
    r->exited = true;
    auto& rec = r->record;
    rec.status.kind = m.kind == Exited::Kind::signaled       ? ExitStatus::Kind::signaled
                      : m.kind == Exited::Kind::spawn_failed ? ExitStatus::Kind::spawn_failed
                                                             : ExitStatus::Kind::exited;
    rec.status.code = m.code;
    rec.status.spawn_error = m.spawn_error;
    rec.pid = m.pid;
    rec.start_unix_ns = m.start_ns;
    rec.end_unix_ns = m.end_ns;
    rec.peak_rss_kib = m.rss_kib;
    if (m.silent_ms) rec.silent_s = static_cast<double>(*m.silent_ms) / 1000;
    rec.suspended = m.suspended;
    rec.stalled = m.stalled;
    rec.command = m.command;
    rec.program = m.program;
    rec.path_python = m.path_python;
    r->stopped = m.stopped;
    if (!rec.status.ok() && !r->stopped && !stopping_) {
      stop_nodes(Outcome::failed, fmt::format("rank {} on {} {}", rec.rank, n.name, rec.status.describe()));
    }
  }

  // Ranks of `n` wrote nothing for the step's stall_timeout; its agent is
  // stopping them.
  void on_node_stalled(Node& n, const Stalled& m) {
    std::vector<WorkerRecord> stalled;
    for (const Stalled::Rank& s : m.ranks) {
      if (s.rank < 0 || s.rank >= plan_.world_size ||
          plan_.ranks[static_cast<std::size_t>(s.rank)].node != n.rank)
        continue;
      WorkerRecord w;
      w.rank = s.rank;
      w.node = n.name;
      w.silent_s = static_cast<double>(s.silent_ms) / 1000;
      w.suspended = s.suspended;
      w.stalled = true;
      stalled.push_back(std::move(w));
    }
    if (stalled.empty() || phase_ != Phase::running || !job_.group.stall_timeout_s) return;
    flush_console();  // the ranks' lines so far come before flowrun's
    console_.message(format_stall_message(plan_.step, stalled, *job_.group.stall_timeout_s));
    stop_nodes(Outcome::stalled, "stalled");
  }

  void on_done(Node& n, const Done& m) {
    if (n.done) return;
    n.done = true;
    for (const auto& e : m.errors) {
      if (!e.empty()) errors_.push_back(fmt::format("node {}: {}", n.name, printable(e)));
    }
    if (n.upload) abort_upload(n, "the upload ended unfinished");
    maybe_attempt_done();
  }

  // ---- uploads -------------------------------------------------------------

  void upload_error(Node& n, const std::string& what) {
    errors_.push_back(fmt::format("node {}: {}", n.name, what));
    if (phase_ == Phase::running && !stopping_) stop_nodes(Outcome::failed, "node " + n.name + ": " + what);
  }

  void on_upload_begin(Node& n, const UploadBegin& m) {
    if (n.upload) abort_upload(n, "a new upload began before the last one ended");
    Upload up;
    up.rank = m.rank;
    up.path = m.path;
    up.size = m.size;
    RankState* r = rank_of(n, m.rank);
    std::string error;
    auto safe = safe_relative_path(up.path, &error);
    if (r == nullptr) {
      error = fmt::format("upload for rank {}, which does not run on this node, refused", up.rank);
    } else if (!safe) {
      error = fmt::format("upload of '{}' refused: {}", printable(up.path), error);
    } else if (*safe != "error.json" && safe->rfind("out/", 0) != 0) {
      error = fmt::format("upload of '{}' refused: only error.json and files under out/ are uploaded", *safe);
    }
    if (error.empty()) {
      // The rank's directory is reached from the run directory, and the file
      // made beneath it, without following a symlink: a rank on a node that
      // shares this file system may have put one in either's place.
      const std::string root = job_.ctx.layout.rank_dir(plan_.step, up.rank);
      const BeneathRoot dir = BeneathRoot::open_under(job_.ctx.layout.run_dir, root, false);
      if (!dir.ok()) {
        error = fmt::format("upload of '{}' refused: cannot open {} without following a symlink: {}", *safe,
                            root, std::strerror(dir.error()));
      } else {
        if (*safe == "error.json") unlinkat(dir.fd(), "error.json", 0);
        up.fd.reset(dir.create_file(*safe, 0644, 0755, &up.dir));
        if (!up.fd)
          error =
              fmt::format("upload of '{}' refused: cannot create it in {} without following a symlink: {}",
                          *safe, root, std::strerror(errno));
        up.leaf = safe->substr(safe->rfind('/') + 1);
      }
      up.path = *safe;
    }
    if (!error.empty()) {
      up.refused = true;
      upload_error(n, error);
    }
    n.upload = std::move(up);
  }

  void on_upload_data(Node& n, std::string_view data) {
    if (!n.upload) return;
    Upload& up = *n.upload;
    if (up.refused) return;
    up.got += static_cast<std::int64_t>(data.size());
    if (up.got > up.size) {
      abort_upload(n,
                   fmt::format("upload of '{}' sent more than the {} bytes it announced", up.path, up.size));
      return;
    }
    up.crc.update(data);
    if (!write_all(up.fd.get(), data.data(), data.size())) {
      const int err = errno;
      const std::string what = fmt::format("cannot write rank {}'s {} in {}: {}", up.rank, up.path,
                                           job_.ctx.layout.rank_dir(plan_.step, up.rank), std::strerror(err));
      // Said once: the uploads after it fail for the same reason.
      if (!write_error_.empty()) up.refused = true;
      if (write_error_.empty()) write_error_ = what;
      abort_upload(n, what + write_failure_hint(err, job_.ctx.layout.run_dir));
    }
  }

  void on_upload_end(Node& n, const UploadEnd& m) {
    if (!n.upload) return;
    Upload up = std::move(*n.upload);
    n.upload.reset();
    if (up.refused) return;
    up.fd.reset();
    const std::string& expected = m.crc32c;
    const std::string got = up.crc.hex();
    if (up.got != up.size || expected != got) {
      if (up.dir) unlinkat(up.dir.get(), up.leaf.c_str(), 0);
      upload_error(
          n, fmt::format("upload of rank {}'s '{}' is corrupt ({} of {} bytes, CRC-32C {}); rejected",
                         up.rank, up.path, up.got, up.size, up.got == up.size ? "differs" : "not checked"));
    }
  }

  void abort_upload(Node& n, const std::string& why) {
    if (!n.upload) return;
    Upload& up = *n.upload;
    if (up.fd) {
      up.fd.reset();
      unlinkat(up.dir.get(), up.leaf.c_str(), 0);
    }
    const bool refused = up.refused;
    n.upload.reset();
    if (!refused) upload_error(n, why);
  }

  // ---- stopping, losing nodes, finishing -----------------------------------

  void stop_nodes(Outcome why, const std::string& reason) {
    if (stopping_) return;
    stopping_ = true;
    if (outcome_ == Outcome::succeeded) outcome_ = why;
    for (auto& n : nodes_) {
      if (n.conn && n.conn->is_open() && !n.lost) n.conn->send(Stop{reason});
    }
  }

  void on_node_closed(Node& n, const std::string& why) {
    if (phase_ == Phase::finished || n.lost) return;
    if (n.done) {
      n.closed = true;  // it said all it had to say; it cannot take a restart
      return;
    }
    if (n.conn && n.conn->failed_authentication()) {
      node_lost(n, "the head closed its connection: " + why);
      return;
    }
    node_lost(n, "its agent's connection closed" +
                     (why == "the connection closed" ? std::string() : " (" + why + ")"));
  }

  void node_lost(Node& n, const std::string& why) {
    if (n.lost || phase_ == Phase::finished) return;
    n.lost = true;
    if (n.conn) n.conn->close();
    // A file it was sending is cut short: never leave the part that came.
    if (n.upload) {
      n.upload->refused = true;  // says nothing more than the loss below
      abort_upload(n, {});
    }
    const std::string text =
        fmt::format("node {} (node rank {} of {}) lost: {}", n.name, n.rank, nodes_.size(), why);
    console_.message(fmt::format("flowrun: step '{}': {}", plan_.step, text));
    if (phase_ != Phase::running) {
      fail_before_start(text);
      return;
    }
    notes_.push_back(text);
    const std::int64_t now = unix_now_ns();
    for (auto& r : ranks_) {
      if (r.record.node != n.name || r.exited ||
          plan_.ranks[static_cast<std::size_t>(r.record.rank)].node != n.rank)
        continue;
      r.exited = true;
      r.record.status.kind = ExitStatus::Kind::lost;
      r.record.status.spawn_error = why;
      r.record.end_unix_ns = now;
      r.stopped = false;  // lost with its node, not stopped by flowrun
    }
    if (!stopping_) stop_nodes(Outcome::failed, text);
    n.done = true;
    maybe_attempt_done();
  }

  void maybe_attempt_done() {
    if (phase_ != Phase::running) return;
    for (const auto& n : nodes_) {
      if (!n.done && !n.lost) return;
    }
    for (auto& r : ranks_) close_rank_files(r);
    flush_console();
    last_ = record_attempt();
    phase_ = Phase::between;  // the step runner restarts (run_attempt) or ends the step (end_step)
  }

  // A node can take no further attempt.
  bool node_gone() const {
    return std::any_of(nodes_.begin(), nodes_.end(),
                       [](const Node& n) { return n.lost || n.closed || n.signalled; });
  }

  // What stands for an attempt whose ranks never started.
  AttemptResult not_started() {
    AttemptResult result;
    result.started = false;
    result.record.outcome = outcome_before_start_;
    result.record.start_unix_ns = result.record.end_unix_ns = unix_now_ns();
    take_news(result);
    return result;
  }

  // The notes and errors that came since the last call.
  void take_news(AttemptResult& result) {
    result.notes.assign(notes_.begin() + static_cast<std::ptrdiff_t>(notes_taken_), notes_.end());
    result.errors.assign(errors_.begin() + static_cast<std::ptrdiff_t>(errors_taken_), errors_.end());
    notes_taken_ = notes_.size();
    errors_taken_ = errors_.size();
  }

  AttemptRecord record_attempt() {
    attempt_recorded_ = true;
    AttemptRecord attempt;
    attempt.restart_count = attempt_;
    attempt.master_port = master_port_;
    attempt.start_unix_ns = attempt_start_ns_;
    attempt.end_unix_ns = unix_now_ns();
    std::vector<int> stopped;
    bool failed = false;
    bool signalled = false;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      auto& r = ranks_[i];
      // Slurm signals a step's every process, the ranks with their agent: a
      // rank that died of it on a node whose agent was signalled did not fail.
      const Node& node = nodes_[static_cast<std::size_t>(plan_.ranks[i].node)];
      if (node.signalled) {
        signalled = true;
        if (r.record.status.kind == ExitStatus::Kind::signaled) r.stopped = true;
      }
      if (r.log) r.record.stderr_tail = r.log->tail();
      if (!r.record.status.ok()) failed = true;
      if (r.stopped) stopped.push_back(static_cast<int>(i));
      attempt.workers.push_back(r.record);
    }
    if (signalled && outcome_ != Outcome::timed_out) outcome_ = Outcome::interrupted;
    attempt.outcome =
        outcome_ != Outcome::succeeded ? outcome_ : (failed ? Outcome::failed : Outcome::succeeded);
    if (!errors_.empty() && attempt.outcome == Outcome::succeeded) attempt.outcome = Outcome::failed;
    attempt.write_error = write_error_;
    if (!write_error_.empty() && attempt.outcome == Outcome::succeeded) attempt.outcome = Outcome::failed;
    assign_roles(attempt, stopped);
    return attempt;
  }

  void fail_before_start(const std::string& why) {
    errors_.push_back(why);
    finish();
    // srun or ssh of a node that never joined may wait forever: stop them
    // (the agents that joined have their bye and end by themselves).
    asio::post(io_, [this] { sup_.stop_group(Outcome::failed); });
  }

  void finish() {
    if (phase_ == Phase::finished) return;
    phase_ = Phase::finished;
    join_timer_.cancel();
    heartbeat_timer_.cancel();
    close_acceptors();
    for (auto& n : nodes_) {
      if (n.conn && n.conn->is_open()) {
        // How the step ended, for agents that report it (flowrun run's).
        const bool ok = outcome_ == Outcome::succeeded && errors_.empty() && attempt_started_;
        n.conn->send(Bye{ok});
        n.conn->close_after_send();
      }
    }
    if (!engine_note_.empty()) notes_.push_back(engine_note_);
  }

  // ---- timers --------------------------------------------------------------

  void start_join_timer(double seconds) {
    join_timer_.expires_after(seconds_of(seconds));
    join_timer_.async_wait([this, seconds](const boost::system::error_code& ec) {
      if (ec || phase_ != Phase::joining) return;
      std::vector<std::string> missing;
      for (const auto& n : nodes_) {
        if (n.joined) continue;
        const auto& host = plan_.nodes[static_cast<std::size_t>(n.rank)].host;
        missing.push_back(host.empty() ? fmt::format("node {}", n.rank)
                                       : fmt::format("node {} ({})", n.rank, host));
      }
      std::string strangers;
      if (strangers_ > 0)
        strangers = fmt::format(
            "; meanwhile {} that did not prove the run's token (from {}) were refused or dropped: "
            "something other than the agents is connecting to {}",
            plural(static_cast<std::size_t>(strangers_), "connection", "connections"),
            fmt::join(stranger_sources_, ", "), endpoint_);
      fail_before_start(
          fmt::format("{} of {} did not join within {:g} s: {}; check that 'flowrun agent' can start "
                      "there and reach {} (cluster.join_timeout){}",
                      missing.size(), plural(nodes_.size(), "node", "nodes"), seconds,
                      fmt::join(missing, ", "), endpoint_, strangers));
    });
  }

  void tick_heartbeats() {
    heartbeat_timer_.expires_after(seconds_of(interval_s_));
    heartbeat_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec || phase_ == Phase::finished) return;
      const std::int64_t now = monotonic_now_ns();
      for (auto& n : nodes_) {
        if (!n.joined || n.lost || !n.conn || !n.conn->is_open()) continue;
        const double silent = static_cast<double>(now - n.conn->last_heard_ns()) / 1e9;
        if (silent > timeout_s_) {
          node_lost(n, fmt::format("no heartbeat for {:.1f} s (cluster.heartbeat_timeout: {:g} s)", silent,
                                   timeout_s_));
          if (phase_ == Phase::finished) return;
          continue;
        }
        if (n.conn->queued() == 0) n.conn->send(Heartbeat{});
      }
      tick_heartbeats();
    });
  }

  // ---- console -------------------------------------------------------------

  void schedule_flush() { batch_.schedule(); }

  void flush_console() { batch_.flush(); }

  // A rank's log files are opened (and emptied) when it first writes, so
  // that thousands of ranks cost nothing until they print. Reached from the
  // run directory without following a symlink, as uploads are: a rank on a
  // node that shares this file system may have put a link in its place (to
  // a file that O_TRUNC would empty).
  void open_rank_log(RankState& r, const Node& n) {
    RankLog::Options o;
    o.stdout_log = r.record.stdout_log;
    o.stderr_log = r.record.stderr_log;
    o.style = job_.group.style;
    if (job_.shows_rank(r.record.rank))
      o.prefix = log_prefix(n.name + " " + plan_.step, r.record.rank, job_.group.style.color);
    o.who = fmt::format("rank {}'s ", r.record.rank);
    o.open = [run_dir = job_.ctx.layout.run_dir](const std::string& path) {
      const std::size_t slash = path.rfind('/');
      const BeneathRoot dir = BeneathRoot::open_under(run_dir, path.substr(0, slash), false);
      return dir.ok() ? openat(dir.fd(), path.c_str() + slash + 1,
                               O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644)
                      : (errno = dir.error(), -1);
    };
    r.log = std::make_unique<RankLog>(std::move(o), batch_);
  }

  // A rank's log file cannot be written (a full disk): its output is lost
  // from here on, so the step cannot succeed. Said once; the console goes on
  // showing the ranks' lines while the nodes stop.
  void log_failed(const RankLog::WriteError& error) {
    if (!write_error_.empty()) return;
    write_error_ = error.text;
    flush_console();
    console_.message(
        log_failed_message(plan_.step, write_error_, stopping_, error.err, job_.ctx.layout.run_dir));
    if (phase_ == Phase::running && !stopping_) stop_nodes(Outcome::failed, write_error_);
  }

  void close_rank_files(RankState& r) {
    if (r.log) r.log->close();
  }

  Supervisor& sup_;
  const Console& console_;
  const NodeStep& job_;
  const StepPlan& plan_;
  const ClusterSpec& cluster_;
  asio::io_context& io_;
  std::vector<std::unique_ptr<asio::ip::tcp::acceptor>> acceptors_;  // one per address it listens on
  std::vector<cluster::HeadAddress> candidates_;   // where the agents dial, best first (not flowrun run's)
  std::uint16_t port_ = 0;                         // the port it listens on, on each of them
  std::vector<std::shared_ptr<Pending>> pending_;  // connections still in their handshake
  bool said_too_many_pending_ = false;
  static constexpr int kSilentRefusalLines = 10;
  int silent_refused_ = 0;                     // refused connections that never said hello
  int strangers_ = 0;                          // connections refused or dropped before the token
  std::vector<std::string> stranger_sources_;  // their addresses, the first few
  asio::steady_timer heartbeat_timer_;
  asio::steady_timer join_timer_;
  asio::steady_timer flush_timer_;
  std::string endpoint_;
  std::string token_;
  std::string token_file_;
  std::string marker_path_, marker_text_;
  double timeout_s_ = 10, interval_s_ = 2.5;
  Phase phase_ = Phase::joining;
  std::vector<Node> nodes_;
  std::vector<RankState> ranks_;
  std::vector<int> engine_node_;
  std::vector<std::string> engine_what_;  // "srun", "ssh to node2", "node 0's agent"
  std::vector<TailBuffer> engine_tail_;
  std::string engine_note_;
  std::string write_error_;  // the first file of the run directory that could not be written, and why
  std::vector<std::string> workdir_errors_;
  ClusterDoctorFacts preflight_;          // what each node's check found
  std::vector<bool> preflight_answered_;  // by node rank: its preflight_done came (or never will)
  std::vector<bool> preflight_started_;   // by node rank: it was sent its preflight
  bool preflight_stopping_ = false;       // a node's check failed: the others were told to stop
  int joined_ = 0, ready_ = 0, done_ = 0;
  int attempt_ = 0;
  int master_port_ = 0;
  std::int64_t attempt_start_ns_ = 0;
  bool stopping_ = false;
  bool attempt_started_ = false, attempt_recorded_ = false;
  bool waiting_for_grant_ = false;
  Outcome outcome_ = Outcome::succeeded;
  ConsoleBatch batch_{io_, [this](std::string& out, std::string& err) { sup_.write_console(out, err); }};
  std::vector<std::string> notes_;   // for results.json
  std::vector<std::string> errors_;  // flowrun's own reasons the step failed (workdir, uploads, ...)
  std::size_t notes_taken_ = 0, errors_taken_ = 0;  // handed to the step runner so far
  // How the step ended when no rank started: failed (see errors_), timed_out or interrupted.
  Outcome outcome_before_start_ = Outcome::failed;
  std::vector<WorkerLaunch> launches_;   // the engine's, for the supervisor's group
  std::function<void()> keep_previous_;  // the step runner's, for the attempt about to start
  AttemptRecord last_;                   // the attempt that ended
};

}  // namespace

struct RemoteGroup::Impl {
  Impl(Supervisor& supervisor, const Console& console, const NodeStep& step)
      : head(supervisor, console, step) {}
  Head head;
};

RemoteGroup::RemoteGroup(Supervisor& supervisor, const Console& console, const NodeStep& step) {
  // Upload chunks arrive as 1 MiB strings made and freed in a loop: keep them
  // on the heap instead of mapping and unmapping pages for each one.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  impl_ = std::make_unique<Impl>(supervisor, console, step);
  sup_ = &supervisor;
  impl_->head.begin();
}

RemoteGroup::~RemoteGroup() = default;

std::optional<AttemptResult> RemoteGroup::preflight() { return impl_->head.preflight(); }

AttemptResult RemoteGroup::run_attempt(const Attempt& attempt) { return impl_->head.run_attempt(attempt); }

void RemoteGroup::stop(Outcome why) { sup_->stop_group(why); }

void RemoteGroup::kill() { sup_->kill_group(); }

int RemoteGroup::interrupt_signal() { return impl_->head.interrupt_signal(); }

std::string RemoteGroup::placement() const { return impl_->head.placement(); }

AttemptResult RemoteGroup::close() { return impl_->head.end_step(); }

}  // namespace flowrun
