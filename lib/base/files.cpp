#include "flowrun/files.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/stat.h>

#include "flowrun/error.h"

namespace flowrun {

void make_dirs(const std::string& path, mode_t mode) {
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    const std::string partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (mkdir(partial.c_str(), mode) != 0 && errno != EEXIST)
      throw Error("cannot create the directory " + partial + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw Error("cannot create the directory " + path + ": it exists and is not a directory");
}

std::string keep_attempt(const std::string& rank_dir, int attempt) {
  const std::string kept = rank_dir + "/attempt" + std::to_string(attempt);
  bool made = false;
  for (const char* name : {"stdout.log", "stderr.log", "error.json", "out"}) {
    const std::string from = rank_dir + "/" + name;
    struct stat st {};
    if (lstat(from.c_str(), &st) != 0) continue;
    if (!made) {
      make_dirs(kept);
      made = true;
    }
    if (std::rename(from.c_str(), (kept + "/" + name).c_str()) != 0)
      throw Error("cannot keep attempt " + std::to_string(attempt) + "'s " + from + " in " + kept + ": " +
                  std::strerror(errno));
  }
  return made ? kept : std::string();
}

}  // namespace flowrun
