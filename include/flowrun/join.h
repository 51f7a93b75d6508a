// The join: after a parallel step's workers finish, gather the files they
// left (the step's `outputs` globs and each rank's FLOWRUN_OUTPUT_DIR) into
// the step's outputs directory, in the layout docs/spec.md defines, so the
// join step finds them at FLOWRUN_INPUTS / ${steps.NAME.outputs}.
//
// Rules (docs/spec.md, "outputs and collect"):
//  - Only files modified at or after `started` count: a file left from an
//    earlier run is never collected (and is listed in JoinResult::stale).
//  - A glob is matched in the step's workdir, which every rank on this node
//    shares, so what it matches is the node's, not one rank's. A rank's
//    FLOWRUN_OUTPUT_DIR is its own.
//  - collect: rank0: rank 0's FLOWRUN_OUTPUT_DIR files and the glob matches
//    go directly under outputs/ (a glob match keeps its path relative to the
//    workdir, a private file its path relative to FLOWRUN_OUTPUT_DIR).
//  - collect: all: rank R's private files go under outputs/rank<R>/; the glob
//    matches (the node's, shared) go directly under outputs/. A glob without
//    wildcards (`model.pt`) names one file, which several ranks on one node
//    cannot each have written: that is a collision, reported.
//  - Two sources for one destination path (a private file and a glob match
//    with the same relative path) is a collision, reported, never a silent
//    overwrite.
//  - A declared glob that matches no fresh file is an error that names it,
//    and says whether a stale file was there.
//  - Files are hard-linked into outputs/ when they are on the same file
//    system (no copy of a large checkpoint) and copied otherwise.
//  - `.flowrun/` under the workdir is never searched.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flowrun/spec.h"

namespace flowrun {

// A wall-clock time in the file system's terms (CLOCK_REALTIME), in ns.
using FileTime = std::int64_t;

// The time a step starts, comparable with file mtimes: read from the coarse
// real-time clock that the kernel stamps files with, so a file written after
// this call never looks older than it.
FileTime file_clock_now();

struct JoinRequest {
  std::string step;                  // for messages
  std::string workdir;               // the step's workdir (absolute)
  std::vector<std::string> outputs;  // the step's globs
  Collect collect = Collect::rank0;
  int world_size = 0;
  int ranks_on_node = 0;  // ranks that shared the workdir (this node's)
  // Per rank: its FLOWRUN_OUTPUT_DIR (index = rank); may not exist.
  std::vector<std::string> rank_output_dirs;
  std::string outputs_dir;  // where to gather (created; must not exist or be empty)
  FileTime started = 0;
};

struct JoinedFile {
  std::string source;  // absolute path it came from
  std::string dest;    // path relative to outputs_dir
  int rank = -1;       // the rank it belongs to, -1 for a node-shared glob match
  std::uint64_t bytes = 0;
};

struct JoinResult {
  std::vector<JoinedFile> files;     // gathered, sorted by dest
  std::vector<std::string> stale;    // absolute paths that matched but predate the step
  std::vector<std::string> errors;   // each a whole sentence: missing output, collision
  bool ok() const { return errors.empty(); }
};

// Gathers the outputs. Problems with the user's files are JoinResult::errors
// (all of them, not just the first); an I/O failure of flowrun's own run
// directory throws Error.
JoinResult gather_outputs(const JoinRequest& request);

// Matches one glob (docs/spec.md syntax: * ? [...] within a name, ** any
// number of directories) against a relative path. Exposed for tests.
bool glob_match(std::string_view glob, std::string_view path);

}  // namespace flowrun
