// Small filesystem helpers shared by the runner, the head and the agents.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace flowrun {

// mkdir -p PATH with `mode` for the directories it makes; throws Error
// naming the directory it could not make, also when PATH is something else
// than a directory (a file, a link to one).
void make_dirs(const std::string& path, mode_t mode = 0755);

// Before a restart: moves what the failed attempt left in a rank's directory
// (stdout.log, stderr.log, error.json, end.json and out/, and each of `also`,
// file names in it) into <rank_dir>/attemptN/, so that the next attempt starts
// with an empty FLOWRUN_OUTPUT_DIR (nothing of the failed attempt is
// collected) and nothing of the failed attempt is lost. Returns the directory
// it made (empty when there was nothing to keep); throws Error when a rename
// fails.
std::string keep_attempt(const std::string& rank_dir, int attempt, const std::vector<std::string>& also = {});

// At most `limit` bytes of `path`, every read that a signal interrupted
// retried; nullopt when it cannot be opened or read, `err` (when given) then
// holding the errno. A caller that must tell a file longer than the limit
// asks for one byte more.
std::optional<std::string> try_read_file(const std::string& path, std::size_t limit, int* err = nullptr);

// try_read_file, throwing Error "cannot read PATH: why" when it fails.
std::string read_file(const std::string& path, std::size_t limit);

// Writes `path` whole or not at all (a temporary file renamed over it).
// Returns 0, or the errno of what failed; the temporary file is then gone.
int try_write_file(const std::string& path, const std::string& text);

// try_write_file, throwing Error "cannot write PATH: why" when it fails.
void write_file(const std::string& path, const std::string& text);

// Makes `path` a symbolic link to `target`, replacing the link there: made
// under a temporary name beside it (with this process's pid) and renamed
// over it, so that a reader finds the old link or the new one, never none.
// Returns 0, or the errno of what failed; the temporary link is then gone.
int replace_symlink(const std::string& path, const std::string& target);

// Where flowrun keeps private scratch outside the workdir: `tmpdir` ($TMPDIR)
// when it is an absolute path, else /tmp.
std::string scratch_parent(const char* tmpdir);

// A new, empty directory PARENT/NAME-XXXXXX made by mkdtemp(3): a name no one
// could guess or have made beforehand, so nothing another user planted there
// (a directory, a link) is ever used. NAME is `name` with every byte other
// than [A-Za-z0-9._-] made '_', at most 64 bytes. Checked once made: a
// directory, not a link, owned by this user, mode 0700. PARENT itself must
// be a directory that no other user could swap it out of: owned by this user
// or root, and sticky where group or others may write it (/tmp is). Throws
// Error naming the path, what is wrong and what to do.
std::string make_private_dir(const std::string& parent, const std::string& name);

// rm -rf PATH: links are removed, never followed, and a tree of any depth
// too (one walked relative to each directory, never by a path that PATH_MAX
// limits); a directory of this user's without permissions gets u+rwx. Goes on
// past what it cannot remove; returns "" when PATH is gone, else one line
// for the caller to say: "could not remove PATH/x: why", or "N entries under
// PATH could not be removed; the first, PATH/x: why".
[[nodiscard]] std::string remove_tree(const std::string& path);

}  // namespace flowrun
