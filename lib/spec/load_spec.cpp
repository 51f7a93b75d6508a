// load_spec (spec.h): the spec's only I/O. It reads the spec's file, parses
// it with parse_spec, and once the spec is clean reads the hostfile its
// cluster: names, reporting problems there at the hostfile's own lines.

#include <algorithm>
#include <filesystem>
#include <map>

#include "flowrun/files.h"
#include "flowrun/util.h"

#include "spec_detail.h"

namespace flowrun {

namespace {

using spec_detail::is_host_name;
using spec_detail::parse_whole;
using spec_detail::quote;
using spec_detail::Whole;

// A hostfile as MPI launchers read it: one host per line, optionally followed
// by `slots=N` (accepted so an existing MPI hostfile works; flowrun places
// ranks by GPUs, so N is ignored), '#' to the end of a line a comment.
std::vector<std::string> parse_hostfile(std::string_view text, const std::string& file,
                                        std::vector<Diagnostic>& diagnostics) {
  std::vector<std::string> hosts;
  std::map<std::string, int, std::less<>> seen;  // host -> line
  auto error = [&](int line, std::size_t at, std::string message) {
    diagnostics.push_back({file, {line, static_cast<int>(at) + 1}, "", std::move(message)});
  };
  constexpr std::string_view kBlank = " \t\r\v\f";
  int line_number = 0;
  for (std::size_t start = 0; start < text.size();) {
    ++line_number;
    const std::size_t end = std::min(text.find('\n', start), text.size());
    std::string_view line = text.substr(start, end - start);
    line = line.substr(0, line.find('#'));
    std::vector<std::pair<std::string_view, std::size_t>> words;  // word, offset in the line
    for (std::size_t at = line.find_first_not_of(kBlank); at != std::string_view::npos;) {
      std::size_t stop = std::min(line.find_first_of(kBlank, at), line.size());
      words.emplace_back(line.substr(at, stop - at), at);
      at = line.find_first_not_of(kBlank, stop);
    }
    start = end + 1;
    if (words.empty()) continue;
    const auto [host, host_at] = words[0];
    if (!is_host_name(host)) {
      error(line_number, host_at,
            "expected a host name (not starting with '-', no control characters), got " + quote(host));
    } else if (auto [first, fresh] = seen.emplace(host, line_number); !fresh) {
      error(line_number, host_at,
            "host " + quote(host) + " is listed twice (first at line " + std::to_string(first->second) +
                "); expected each node once");
    } else {
      hosts.emplace_back(host);
    }
    int slots = 0;
    for (std::size_t i = 1; i < words.size(); ++i) {
      const auto [word, at] = words[i];
      if (i == 1 && word.starts_with("slots=")) {
        if (parse_whole(word.substr(6), slots) != Whole::ok || slots == 0)
          error(line_number, at, "expected 'slots=N' with N a positive whole number, got " + quote(word));
        continue;
      }
      error(line_number, at,
            "unexpected " + quote(word) + "; expected one host per line, optionally followed by 'slots=N'");
      break;
    }
  }
  return hosts;
}

// Fills cluster.hosts from cluster.hostfile. Problems in the file are reported
// at its own lines, under the name the user would use for it: relative like
// the spec's when it sits next to it, else absolute.
void read_hostfile(const Spec& spec, ClusterSpec& cluster, std::vector<Diagnostic>& diagnostics) {
  std::string shown = cluster.hostfile;
  const std::filesystem::path relative = std::filesystem::path(cluster.hostfile).lexically_relative(spec.dir);
  if (std::filesystem::path(spec.file).is_relative() && !relative.empty() && *relative.begin() != "..")
    shown = (std::filesystem::path(spec.file).parent_path() / relative).lexically_normal().string();
  auto at_key = [&](std::string message) {
    diagnostics.push_back({spec.file, cluster.hosts_loc, "cluster.hostfile", std::move(message)});
  };
  // One byte past the limit, to tell a file that is too large.
  int err = 0;
  const auto read = try_read_given_file(cluster.hostfile, kMaxSpecBytes + 1, &err);
  if (!read) {
    at_key("cannot read " + shown + ": " + file_error_text(err));
    return;
  }
  const std::string& text = *read;
  if (text.size() > kMaxSpecBytes) {
    at_key(shown + " is larger than " + format_bytes(kMaxSpecBytes) + "; expected one host per line");
    return;
  }
  std::vector<Diagnostic> problems;
  cluster.hosts = parse_hostfile(text, shown, problems);
  if (!problems.empty()) {
    diagnostics.insert(diagnostics.end(), problems.begin(), problems.end());
  } else if (cluster.hosts.empty()) {
    at_key(shown + " lists no hosts; expected one host per line, the nodes in node-rank order");
  }
}

}  // namespace

SpecParse load_spec(const std::string& path) {
  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  std::string dir = (ec ? std::filesystem::path(path) : absolute).parent_path().lexically_normal().string();
  if (dir.size() > 1 && dir.back() == '/') dir.pop_back();

  // One byte past the limit: parse_spec tells a file that is too large.
  int err = 0;
  const auto text = try_read_given_file(path, kMaxSpecBytes + 1, &err);
  if (!text) {
    SpecParse result;
    result.diagnostics.push_back({path, {}, "", std::string("cannot read: ") + file_error_text(err)});
    return result;
  }
  SpecParse result = parse_spec(*text, path, dir);
  // parse_spec does no I/O; the hostfile is read once the spec itself is clean.
  if (result.spec && result.spec->cluster && !result.spec->cluster->hostfile.empty()) {
    read_hostfile(*result.spec, *result.spec->cluster, result.diagnostics);
    if (!result.diagnostics.empty()) result.spec.reset();
  }
  return result;
}

}  // namespace flowrun
