// Small helpers that know nothing of flowrun: strings, environment snapshots,
// JSON text. Nothing here performs I/O except read_environ().
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flowrun {

// A snapshot of a process environment. Pure code takes one of these instead of
// calling getenv(), so tests can hand it any environment they like.
using EnvMap = std::map<std::string, std::string>;

// The current process's environment.
EnvMap read_environ();

// Value of `name` in `env`, or nullopt when unset.
std::optional<std::string> env_get(const EnvMap& env, const std::string& name);

// Splits `text` into words the way POSIX sh does for a simple command, with
// single quotes, double quotes and backslash escapes, but no expansions.
// Returns nullopt (and sets *error) for an unterminated quote or trailing backslash.
std::optional<std::vector<std::string>> split_shell_words(std::string_view text, std::string* error);

// Quotes `word` so /bin/sh reads it back as exactly one word, unchanged.
std::string shell_quote(std::string_view word);

// Edit distance between two strings (insert, delete, substitute, transpose).
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, when close enough to be a likely typo.
std::optional<std::string> closest_match(std::string_view word, const std::vector<std::string>& candidates);

// Joins with a separator.
std::string join(const std::vector<std::string>& parts, std::string_view sep);

// A duration as a spec writes one: 90 -> "1m30s", 43200 -> "12h", 1.5 -> "1.5s".
std::string format_duration(double seconds);

// "1.5 GiB", "80 GiB", "512 MiB" for a byte count.
std::string format_bytes(std::uint64_t bytes);

// Escapes `s` as the contents of a JSON string (without the quotes).
std::string json_escape(std::string_view s);

// `s` made safe to print on a terminal or in a log line, for bytes that came
// from a peer or a worker (a node name, a reason, a path): printable ASCII
// and well-formed UTF-8 pass unchanged; a backslash becomes "\\"; \n, \r
// and \t become those two-character escapes; every other control byte
// (ESC included), DEL, the C1 controls U+0080..U+009F and each byte of
// invalid UTF-8 become "\xHH". So a forged line, a colour or a terminal
// title cannot be smuggled through, and the original bytes can be read back.
std::string printable(std::string_view s);

// True when `name` is a valid environment variable name: [A-Za-z_][A-Za-z0-9_]*.
bool is_env_name(std::string_view name);

// The rule for the names flowrun makes file names of: step names, run ids
// and (allowing '.' too) flow names. Letters, digits, '_' and '-', starting
// with a letter or digit, so that no name is '..', holds a '/' or a control
// character; at most kMaxNameLength characters, so that a file name made of
// two of them (.flowrun/node-check-RUN-STEP) still fits NAME_MAX (255).
inline constexpr std::size_t kMaxNameLength = 100;
enum class NameCheck { ok, empty, bad_character, too_long };
NameCheck check_name(std::string_view name, std::string_view also_allowed = {});

// The rule in words, for messages: "letters, digits, '_' and '-', starting
// with a letter or digit, at most 100 characters" (`also_allowed` listed too).
std::string name_rule(std::string_view also_allowed = {});

// The longest argument or environment entry (NAME=value) the kernel passes to
// a program (Linux MAX_ARG_STRLEN, 32 pages, less the terminating NUL).
inline constexpr std::size_t kMaxArgLength = 32 * 4096 - 1;

}  // namespace flowrun
