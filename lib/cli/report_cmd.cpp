// flowrun report RUN: the run as one HTML page, report.html in its run
// directory (lib/run_page makes it). It reads only what the run writes anyway,
// so it works on a finished run, a killed one, and a run still going (a
// snapshot that says so).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <iostream>

#include "flowrun/clock.h"
#include "flowrun/files.h"
#include "flowrun/run_page.h"

#include "commands.h"
#include "runs.h"

namespace flowrun {

namespace {

const char* kReportFooter =
    R"(RUN: a run id, a unique prefix of one, latest (the newest run), or a run directory.
Writes one HTML file that needs no network (open it in any browser, attach it to a ticket or keep
it as a CI artifact): the flow's steps on one time axis; each parallel step's ranks as rows grouped
by node, every attempt a bar coloured by how it ended (succeeded, culprit, failed after it,
stopped, lost with its node); restarts and why, stacks of a stall with the odd rank named, nodes
lost and spares seated, nodes left out by their checks, outputs collected, the plan's why. Click a
rank for its exit, its last stderr lines and its logs; past 64 ranks a node's ordinary ranks fold
into one row, the culprit and the failed and lost ones keep their own. For a run in progress, a
snapshot. Prints the file's path.

Example:
  flowrun report latest
  /work/proj/.flowrun/runs/train-20261202-063308-3fa2c1/report.html

Exit codes: 0 written, 2 no such run. See docs/cli.md.)";

}  // namespace

std::string write_run_report(const std::string& run_dir, const std::string& output) {
  const RunPicture picture = read_run_picture(run_dir, read_run_row(run_dir).state, unix_now_ns());
  const std::string path = output.empty() ? run_dir + "/" + kRunReportFile : output;
  write_file(path, format_run_page(picture));
  return path;
}

int cmd_report(int argc, char** argv) {
  std::string run, output;
  CLI::App app{"Write a run as one HTML page: steps, ranks and attempts on a time axis", "flowrun report"};
  add_run_argument(app, run);
  app.add_option("-o,--output", output, "Write the page to FILE instead of RUN_DIR/report.html")
      ->type_name("FILE");
  app.footer(kReportFooter);
  if (const auto done = parse_subcommand(app, "report", argc, argv)) return *done;
  return report_errors([&]() -> int {
    const std::string run_dir = locate_run(run, current_directory());
    read_record_of(run_dir);  // a damaged run.json says what is wrong, as `status` does
    std::cout << write_run_report(run_dir, output) << "\n";
    return kExitOk;
  });
}

}  // namespace flowrun
