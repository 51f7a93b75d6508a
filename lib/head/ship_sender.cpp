#include "ship_sender.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <map>
#include <unistd.h>

#include "flowrun/beneath.h"
#include "flowrun/glob.h"
#include "flowrun/messages.h"
#include "flowrun/path.h"
#include "flowrun/text.h"
#include "flowrun/util.h"

namespace flowrun::cluster {

namespace {

// `path` relative to `dir` when it lies under it, else "".
std::string relative_under(const std::string& path, const std::string& dir) {
  if (path.size() > dir.size() + 1 && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/')
    return path.substr(dir.size() + 1);
  return {};
}

class Lister {
 public:
  explicit Lister(ShipList& list) : list_(list) {}

  void add(const std::string& rel, const std::string& path, const struct stat& st) {
    if (seen_.emplace(rel, true).second)
      list_.files.push_back(
          {rel, path, static_cast<std::int64_t>(st.st_size), static_cast<int>(st.st_mode & 07777)});
  }

  // Every file under `root` (a directory) that `take` accepts, at
  // `prefix` + its path there.
  void tree(const std::string& root, const std::string& prefix,
            const std::function<bool(const std::string&)>& take, std::string_view where) {
    const BeneathRoot dir = BeneathRoot::open(root);
    if (!dir.ok()) {
      if (dir.error() != ENOENT)
        list_.errors.push_back(fmt::format("cannot read {}: {}", root, std::strerror(dir.error())));
      return;
    }
    for (const TreeEntry& e : scan_tree(dir)) {
      if (!take(e.rel)) continue;
      if (e.kind == TreeEntry::Kind::file)
        add(prefix + e.rel, root + "/" + e.rel, e.st);
      else
        list_.errors.push_back(fmt::format("{} {}; not shipped", prefix + e.rel, refusal_text(e, where)));
    }
  }

 private:
  ShipList& list_;
  std::map<std::string, bool> seen_;
};

}  // namespace

ShipList ship_list(const NodeStep& job) {
  ShipList list;
  Lister lister(list);
  const std::string& workdir = job.step->workdir;
  // The run directory may lie in the workdir: what a glob of the workdir
  // meets there is the head's record, never an input.
  const std::string run_rel = relative_under(job.ctx.layout.run_dir, workdir);
  if (!job.step->inputs.empty()) {
    std::vector<Glob> globs;
    for (const auto& g : job.step->inputs) globs.push_back(Glob::parse(g));
    lister.tree(
        workdir, "",
        [&](const std::string& rel) {
          if (rel.starts_with(".flowrun/") || (!run_rel.empty() && rel.starts_with(run_rel + "/")))
            return false;
          return std::any_of(globs.begin(), globs.end(), [&](const Glob& g) { return g.matches(rel); });
        },
        "the workdir");
  }
  for (const std::string& dep : job.step->needs) {
    const Step* s = job.spec->find_step(dep);
    if (s == nullptr || !s->is_parallel()) continue;
    const std::string outputs = job.ctx.layout.inputs_dir(dep);
    const std::string rel = relative_under(outputs, workdir);
    if (rel.empty()) continue;  // outside the workdir: ${steps.dep.outputs} names it by its absolute path
    lister.tree(
        outputs, rel + "/", [](const std::string&) { return true; }, "the outputs directory");
  }
  // A word of the command that names a file in the workdir: the script.
  const BeneathRoot root = BeneathRoot::open(workdir);
  for (const std::string& word : job.argv) {
    std::string why;
    if (word.empty() || word.front() == '-' || word.front() == '/' || !root.ok()) continue;
    const auto safe = safe_relative_path(word, &why);
    if (!safe) continue;
    struct stat st {};
    if (root.stat(*safe, &st, Links::beneath) == 0 && S_ISREG(st.st_mode))
      lister.add(*safe, workdir + "/" + *safe, st);
  }
  std::sort(list.files.begin(), list.files.end(),
            [](const ShipFile& a, const ShipFile& b) { return a.rel < b.rel; });
  for (const auto& f : list.files) list.bytes += f.bytes;
  return list;
}

std::string ship_size_text(const ShipList& list) {
  return fmt::format("{} ({})", plural(static_cast<std::int64_t>(list.files.size()), "file"),
                     format_bytes(static_cast<std::uint64_t>(list.bytes)));
}

ShipSender::ShipSender(std::shared_ptr<NodeLink> link, const ShipList& list,
                       std::function<void(const std::string&)> failed)
    : link_(std::move(link)), list_(list), failed_(std::move(failed)) {}

void ShipSender::start() {
  link_->set_sent_handler([this] { pump(); });
  pump();
}

// Opens the next file and sends its ShipBegin; false when it cannot be read.
bool ShipSender::open_next() {
  const ShipFile& f = list_.files[next_++];
  fd_.reset(::open(f.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  struct stat st {};
  if (!fd_ || fstat(fd_.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    failed_(fmt::format("cannot read {}: {}", f.path,
                        fd_ ? "it is no longer a regular file" : std::strerror(err)));
    return false;
  }
  at_ = 0;
  link_->send(ShipBegin{f.rel, f.bytes, f.mode});
  return true;
}

void ShipSender::pump() {
  while (!finished_ && link_->is_open() && link_->queued() < kShipHighWater) {
    if (!fd_) {
      if (next_ == list_.files.size()) {
        finished_ = true;
        link_->send(ShipDone{static_cast<std::int64_t>(list_.files.size()), list_.bytes});
        break;
      }
      if (!open_next()) {
        finished_ = true;
        break;
      }
    }
    const ShipFile& f = list_.files[next_ - 1];
    const auto want = static_cast<std::size_t>(std::min<std::int64_t>(kShipChunk, f.bytes - at_));
    ssize_t n = 0;
    if (want > 0) {
      std::string frame = ship_chunk_frame_to_fill(want);  // the file is read into it in place
      char* into = frame.data() + (frame.size() - want);
      n = pread(fd_.get(), into, want, at_);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = errno;
        finished_ = true;
        failed_(n < 0 ? fmt::format("cannot read {}: {}", f.path, std::strerror(err))
                      : fmt::format("{} changed while it was shipped (it is shorter now)", f.path));
        break;
      }
      if (static_cast<std::size_t>(n) < want) chunk_frame_cut(frame, static_cast<std::size_t>(n));
      ShipFile::Digest& digest = *f.digest;
      if (digest.summed == at_ && digest.crc32c.empty()) {  // the first sender here sums it for every node
        digest.crc.update(std::string_view(into, static_cast<std::size_t>(n)));
        digest.summed += n;
      }
      link_->send_frame(std::move(frame));
      at_ += n;
    }
    if (at_ == f.bytes) {
      ShipFile::Digest& digest = *f.digest;
      if (digest.crc32c.empty()) digest.crc32c = digest.crc.hex();
      link_->send(ShipEnd{digest.crc32c});
      fd_.reset();
    }
  }
}

ShipSender::~ShipSender() {
  if (link_) link_->set_sent_handler({});
}

}  // namespace flowrun::cluster
