// The engine's processes as the head watches them
// (lib/head/engine_watch.cpp): srun's wait for resources and its grant,
// and what the head says when one ends before its agents joined or while
// the ranks run, with the last lines it wrote.
#include "engine_watch.h"

#include <string>

#include "testing.h"

using namespace flowrun;
using namespace flowrun::cluster;

namespace {

EngineLaunch launch(int node, std::string what) {
  EngineLaunch e;
  e.node = node;
  e.what = std::move(what);
  return e;
}

WorkerRecord exited_with(int code) {
  WorkerRecord record;
  record.status.kind = ExitStatus::Kind::exited;
  record.status.code = code;
  return record;
}

}  // namespace

TEST_CASE("EngineWatch: srun's queue stops the wait, its grant only after a queue", "[engine_watch]") {
  EngineWatch engines;
  engines.add(launch(-1, "srun"));
  CHECK(engines.feed(0, "srun: job 7 has been allocated resources\n") == EngineWatch::Grant::none);
  CHECK(engines.feed(0, "srun: job 7 queued and waiting for resources\n") == EngineWatch::Grant::queued);
  CHECK(engines.feed(0, "something else\n") == EngineWatch::Grant::none);
  CHECK(engines.feed(0, "srun: job 7 has been allocated resources\n") == EngineWatch::Grant::granted);
  CHECK(engines.feed(0, "srun: job 7 has been allocated resources\n") == EngineWatch::Grant::none);
}

TEST_CASE("EngineWatch: an end before the agents joined names them and shows the last output",
          "[engine_watch]") {
  EngineWatch engines;
  engines.add(launch(-1, "srun"));
  engines.add(launch(2, "ssh to node2"));
  CHECK(engines.node(0) == -1);
  CHECK(engines.node(1) == 2);
  CHECK(engines.nodes() == std::vector<int>{-1, 2});
  engines.feed(1, "Permission denied\nConnection closed\n\n");
  CHECK(engines.ended_before_join(0, exited_with(1)) == "srun exited with code 1 before every agent joined");
  CHECK(engines.ended_before_join(1, exited_with(255)) ==
        "ssh to node2 exited with code 255 before its agent joined; its last output:\n"
        "    Permission denied\n    Connection closed");
  CHECK(engines.ended_note(0, exited_with(1)) == "srun exited with code 1");
  CHECK(engines.ended_note(1, exited_with(255)) == "ssh to node2 exited with code 255: Connection closed");
}
