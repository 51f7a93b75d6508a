// The join: after a parallel step's workers finish, gather the files they
// left (the step's `outputs` globs and each rank's FLOWRUN_OUTPUT_DIR) into
// the step's outputs directory, in the layout docs/spec.md defines, so the
// join step finds them at FLOWRUN_INPUTS / ${steps.NAME.outputs}.
//
// Rules (docs/spec.md, "outputs and collect" and "Run directory"):
//  - A glob is read as flowrun/glob.h reads it (so is the spec's check of
//    it) and matched in the step's workdir, which every rank on this node
//    shares, so what it matches is the node's, not one rank's. A rank's
//    FLOWRUN_OUTPUT_DIR is its own.
//  - Only glob matches modified at or after `started` count: a file left from
//    an earlier run is never collected (it is listed in JoinResult::stale).
//    Every file in a FLOWRUN_OUTPUT_DIR counts, whatever its mtime: the
//    directory is new for each run, and `cp -p` or shutil.copy2 into it keep
//    an old mtime.
//  - collect: rank0: rank 0's FLOWRUN_OUTPUT_DIR files and the glob matches
//    go directly under outputs/ (a glob match keeps its path relative to the
//    workdir, a private file its path relative to FLOWRUN_OUTPUT_DIR).
//  - collect: all: rank R's private files go under outputs/rank<R>/; the glob
//    matches (the node's, shared) go directly under outputs/. A glob without
//    wildcards that names a file (`model.pt`) names one file, which several
//    ranks on one node cannot each have written: with ranks_on_node > 1 that
//    is a collision, reported.
//  - Two sources for one destination path (a private file and a glob match
//    with the same relative path), or a file where another needs a directory
//    (`logs` and `logs/a.txt`), is a collision: reported, and neither file is
//    gathered. Two globs matching the same file are not a collision.
//  - A declared glob that matches no fresh file is an error that names it,
//    and says whether a stale file was there.
//  - A glob that matches a directory takes every file under it.
//  - Regular files only; a symlink to a regular file counts as that file when
//    it resolves beneath the directory it is in (the workdir for a glob, the
//    rank's FLOWRUN_OUTPUT_DIR for its files): every path is resolved
//    beneath its root (flowrun/beneath.h), so nothing outside is read. A
//    symlink that a glob matches and that leads out of the workdir is
//    refused (an error). In a FLOWRUN_OUTPUT_DIR everything that is not a
//    regular file, a directory or such a symlink is refused: a symlink out
//    of it, a dangling one, one to a directory, a FIFO, a device, a socket.
//    The words are scan_rank_output()'s, which an agent's upload uses too.
//    A FIFO or a device is never opened, nothing is read in blocking mode.
//  - A directory reached through a wildcard, `**`, or inside a matched
//    directory is entered only if it is a real directory (symlinked ones are
//    not followed, so a symlink loop cannot hang the walk); a component
//    written without wildcards (`ckpt/model.pt`) is looked up by name and may
//    go through a symlink that stays in the workdir. A component `..` (also
//    written `\.\.`) matches nothing. Names starting with '.' are matched
//    like any other.
//  - `.flowrun/` at the workdir's root is never searched.
//  - outputs/ is made beneath `run_dir`, and each file in it beneath
//    outputs/, following no symlink. A glob's match is reflinked (FICLONE)
//    where the file system can, else copied, holes kept: the workdir is
//    shared with later runs, which rewrite its files in place, and a run's
//    outputs must stay its own. A rank's private file is hard-linked (no
//    copy of a large checkpoint) when it is ours (owned by flowrun's user),
//    has no other name (st_nlink 1) and is on the same file system, from
//    the very fd that was checked; otherwise it is reflinked or copied too
//    (permission bits without set-user-ID, set-group-ID and sticky; mtime
//    kept). A file already at a destination is never replaced.
//  - Every name and link text a rank made is printable() in the messages
//    (a newline or an escape sequence cannot forge a line or drive the
//    terminal), as the head shows a node's words.
//  - `stop` is asked between files and while a file is copied; when it
//    gives a reason, gathering ends there, and what was not gathered is an
//    error naming the reason (JoinResult::stopped).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "flowrun/beneath.h"
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
  std::string outputs_dir;  // where to gather (created with its parents when missing)
  FileTime started = 0;
  // flowrun's run directory: rank_output_dirs and outputs_dir lie under it
  // and are reached from it without following a symlink (a rank may have put
  // one in its directory's place). Empty: each is opened as given.
  std::string run_dir;
  // Asked between files and while copying one: a reason ("flowrun received
  // SIGINT", "the step's timeout of 5 s ran out") stops the gathering.
  std::function<std::string()> stop;
};

struct JoinedFile {
  std::string source;  // absolute path it came from
  std::string dest;    // path relative to outputs_dir
  int rank = -1;       // the rank it belongs to, -1 for a node-shared glob match
  std::uint64_t bytes = 0;
};

struct JoinResult {
  std::vector<JoinedFile> files;    // gathered, sorted by dest
  std::vector<std::string> stale;   // absolute paths that matched but predate the step
  std::vector<std::string> errors;  // each a whole sentence: missing output, collision
  bool stopped = false;             // `stop` gave a reason (said in errors)
  bool ok() const { return errors.empty(); }
};

// Gathers the outputs. Problems with the user's files are JoinResult::errors
// (all of them, not just the first), and every file that is not part of a
// problem is still gathered, so outputs/ shows what the step left. An I/O
// failure of flowrun's own run directory (creating outputs/, writing a copy)
// throws Error.
JoinResult gather_outputs(const JoinRequest& request);

// A rank's FLOWRUN_OUTPUT_DIR as gathering on this host and an agent's upload
// both see it (one walk, the same words): `dir` lies under `anchor` (the run
// directory, an agent's scratch directory; empty: `dir` is opened as given)
// and is reached from it without following a symlink. `files` are its
// regular files (a symlink that resolves inside it to one counts as that
// file, under the link's name), sorted; `errors` a sentence for each thing
// refused: "rank 1: FLOWRUN_OUTPUT_DIR/passwd is a symlink to /etc/passwd,
// outside the output directory; refused", "rank 1: FLOWRUN_OUTPUT_DIR is a
// symlink to /tmp/x, not the directory flowrun made; refused". A directory
// that does not exist has neither. Read each file through
// root.open_regular(rel, Links::beneath, ...).
struct RankOutput {
  BeneathRoot root;
  std::vector<TreeEntry> files;
  std::vector<std::string> errors;
  bool stopped = false;  // `stop` said true before the walk ended
};
RankOutput scan_rank_output(int rank, const std::string& anchor, const std::string& dir,
                            const std::function<bool()>& stop = {});

}  // namespace flowrun
