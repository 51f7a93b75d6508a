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

// The code try_read_file and open_output_file set for a path that exists but
// is not a regular file (a FIFO, a device, a socket, a directory): it was
// not opened, so a FIFO a rank left can never block a reader. Not an errno;
// file_error_text() says it in words.
inline constexpr int kErrNotRegular = -2;

// strerror(err), or "not a regular file" for kErrNotRegular.
std::string file_error_text(int err);

// At most `limit` bytes of `path`, every read that a signal interrupted
// retried; nullopt when it cannot be opened or read, `err` (when given) then
// holding the errno or kErrNotRegular. Only a regular file is read: what
// `path` names is looked at through an O_PATH descriptor first, and the
// open that follows is O_NONBLOCK and checked to be that same file, so a
// FIFO, a device or a socket (something a rank or another user may have
// put there) is refused without being opened, and nothing ever blocks. A
// caller that must tell a file longer than the limit asks for one byte more.
std::optional<std::string> try_read_file(const std::string& path, std::size_t limit, int* err = nullptr);

// The last `bytes` bytes of `path` (all of it when shorter), opened as
// try_read_file opens it: a regular file only, never blocking on a FIFO or
// a device a rank left there. nullopt, with `err`, as try_read_file.
std::optional<std::string> try_read_file_tail(const std::string& path, std::size_t bytes, int* err = nullptr);

// try_read_file for a file the user named on the command line (a spec, a
// hostfile): read as given, so a FIFO or /dev/stdin (`flowrun <(make-spec)`)
// is read to its end, blocking as cat would. Never for a file that a rank
// or another user could have put in flowrun's way.
std::optional<std::string> try_read_given_file(const std::string& path, std::size_t limit,
                                               int* err = nullptr);

// try_read_file, throwing Error "cannot read PATH: why" when it fails.
std::string read_file(const std::string& path, std::size_t limit);

// Writes `path` whole or not at all: a new temporary file beside it, with a
// name no one can guess (NAME.tmp-<16 random hex digits>), made with
// O_CREAT | O_EXCL | O_NOFOLLOW (a link or a FIFO planted under any name is
// never written through), then renamed over `path` (which replaces a link
// there, never its target). Under an anchored directory (anchor_directory)
// the directories above `path` are reached beneath its descriptor with no
// symlink followed. Returns 0, or the errno of what failed; the temporary
// file is then gone.
int try_write_file(const std::string& path, const std::string& text);

// `bytes` random bytes from getrandom(2) as 2 * `bytes` hex digits: names
// and secrets no one can guess beforehand. Throws Error when the kernel
// gives none.
std::string random_hex(std::size_t bytes);

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

// A directory flowrun writes in while processes of the same user (its ranks)
// may rearrange what is inside it: the run directory. From the call on,
// try_write_file, write_file and open_output_file reach every path under
// `path` (a prefix match after lexical normalisation) beneath the
// descriptor opened here, with no symlink followed on the way, so a rank
// that swaps its directory for a link cannot send flowrun's writes
// elsewhere. Throws Error when `path` cannot be opened as a directory
// (O_NOFOLLOW: the run directory itself is never a link flowrun follows).
// Anchoring the same path again replaces the descriptor.
void anchor_directory(const std::string& path);

// Forgets an anchor_directory (the run has ended; tests).
void release_directory(const std::string& path);

// `path` opened for writing a log (O_WRONLY | O_CREAT | O_TRUNC, and
// O_APPEND with `append`), its directories reached as try_write_file
// reaches them, the file itself never through a symlink (ELOOP) and only
// when it is a regular file: a FIFO or a device there is not opened
// (O_NONBLOCK, then checked: kErrNotRegular). Returns the fd (O_CLOEXEC,
// blocking), or -1 with *err set.
int open_output_file(const std::string& path, bool append, int* err);

// Refuses a directory that someone else could change under flowrun: one
// another user owns (root aside, when `root_ok`), or one that group or
// others may write, unless it is sticky (as /tmp is) or the group is the
// owner's private group (its only member, named after them). `fd` is the
// directory, opened; `path` and `what` ("the run directory") and `fix`
// (what to do) make the message: "refusing WHAT PATH: it belongs to
// another user (uid 65534); FIX". Throws Error (exit 2).
void require_private_directory(int fd, const std::string& path, const std::string& what, bool root_ok,
                               const std::string& fix);

// rm -rf PATH: links are removed, never followed, and a tree of any depth
// too (one walked relative to each directory, never by a path that PATH_MAX
// limits); a directory of this user's without permissions gets u+rwx. Goes on
// past what it cannot remove; returns "" when PATH is gone, else one line
// for the caller to say: "could not remove PATH/x: why", or "N entries under
// PATH could not be removed; the first, PATH/x: why".
[[nodiscard]] std::string remove_tree(const std::string& path);

}  // namespace flowrun
