// The head's receiver of the agents' uploads (lib/head/upload_receiver.cpp):
// what lands beneath a rank's directory, and what is refused or removed: a
// rank of another node, a path outside error.json and out/, a rank
// directory that is a symlink, more bytes than announced, a wrong checksum,
// an upload cut short by its node's loss; holes left holes.
#include "upload_receiver.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <utility>
#include <vector>

#include "testing.h"

using namespace flowrun;
using namespace flowrun::cluster;
namespace fs = std::filesystem;

namespace {

// Two nodes, rank 0 on node 0 and rank 1 on node 1, and their directories
// under a fresh run directory.
class Uploads {
 public:
  Uploads() {
    layout_.run_dir = dir_.path() + "/run";
    for (int rank = 0; rank < 2; ++rank) fs::create_directories(layout_.output_dir("train", rank));
  }

  // Node `node` sends `data` as rank `rank`'s `path`, announcing `size`
  // bytes and `crc` (the data's own when empty).
  void send(int node, int rank, const std::string& path, const std::string& data, std::int64_t size = -1,
            std::string crc = {}) {
    if (crc.empty()) {
      Crc32c c;
      c.update(data);
      crc = c.hex();
    }
    receiver_.begin(node, UploadBegin{rank, path, size < 0 ? static_cast<std::int64_t>(data.size()) : size});
    receiver_.data(node, data);
    receiver_.end(node, UploadEnd{path, crc});
  }

  std::string rank_file(int rank, const std::string& rel) const {
    return layout_.rank_dir("train", rank) + "/" + rel;
  }
  static std::string read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  UploadReceiver& receiver() { return receiver_; }
  std::vector<std::pair<int, std::string>> errors;
  std::string write_error;

 private:
  testing::ScopedTempDir dir_{"uploads"};
  static StepPlan two_nodes() {
    StepPlan plan;
    plan.step = "train";
    plan.world_size = 2;
    plan.nodes.resize(2);
    plan.ranks.resize(2);
    plan.ranks[1].rank = 1;
    plan.ranks[1].node = 1;
    return plan;
  }

  StepPlan plan_ = two_nodes();
  RunLayout layout_;
  UploadReceiver receiver_{plan_, layout_, write_error,
                           [this](int node, const std::string& what) { errors.emplace_back(node, what); }};
};

}  // namespace

TEST_CASE("uploads: error.json and files under out/ land in the rank's directory", "[uploads]") {
  Uploads u;
  u.send(1, 1, "error.json", "{}");
  u.send(1, 1, "./out/model/weights.bin", "weights");
  CHECK(u.errors.empty());
  CHECK(Uploads::read(u.rank_file(1, "error.json")) == "{}");
  CHECK(Uploads::read(u.rank_file(1, "out/model/weights.bin")) == "weights");
}

TEST_CASE(
    "uploads: a rank's flight-recorder dump of any attempt lands beside its error.json, no other rank's",
    "[uploads]") {
  Uploads u;
  u.send(1, 1, "nccl_trace_rank_1", "dump 0");
  u.send(1, 1, "nccl_trace_attempt2_rank_1", "dump 2");
  u.send(1, 1, "nccl_trace_rank_1", "again");  // replaces what is there, as error.json does
  u.send(1, 1, "nccl_trace_rank_0", "forged");
  u.send(1, 1, "nccl_trace_attempt02_rank_1", "forged");
  CHECK(Uploads::read(u.rank_file(1, "nccl_trace_rank_1")) == "again");
  CHECK(Uploads::read(u.rank_file(1, "nccl_trace_attempt2_rank_1")) == "dump 2");
  REQUIRE(u.errors.size() == 2);
  CHECK(u.errors[0].second.find("upload of 'nccl_trace_rank_0' refused: only error.json") == 0);
  CHECK(u.errors[1].second.find("upload of 'nccl_trace_attempt02_rank_1' refused: only error.json") == 0);
  CHECK_FALSE(fs::exists(u.rank_file(1, "nccl_trace_rank_0")));
}

TEST_CASE("uploads: a rank of another node, a path outside error.json and out/ or with .. is refused",
          "[uploads]") {
  Uploads u;
  u.send(0, 1, "error.json", "{}");
  u.send(0, 7, "error.json", "{}");
  u.send(0, 0, "stdout.log", "forged");
  u.send(0, 0, "out/../../rank1/error.json", "{}");
  REQUIRE(u.errors.size() == 4);
  CHECK(u.errors[0] ==
        std::pair<int, std::string>(0, "upload for rank 1, which does not run on this node, refused"));
  CHECK(u.errors[1].second == "upload for rank 7, which does not run on this node, refused");
  CHECK(u.errors[2].second ==
        "upload of 'stdout.log' refused: only error.json, the rank's flight-recorder dump and files under "
        "out/ are uploaded");
  CHECK(u.errors[3].second.find("upload of 'out/../../rank1/error.json' refused: upload path") == 0);
  CHECK_FALSE(fs::exists(u.rank_file(1, "error.json")));
  CHECK_FALSE(fs::exists(u.rank_file(0, "stdout.log")));
}

TEST_CASE("uploads: a rank directory replaced by a symlink is not followed", "[uploads]") {
  Uploads u;
  const std::string elsewhere = u.rank_file(0, "out");
  fs::remove_all(u.rank_file(1, ""));
  fs::create_directory_symlink(fs::path(u.rank_file(0, "")).parent_path(),
                               fs::path(u.rank_file(1, "")).parent_path());
  u.send(1, 1, "out/x", "x");
  REQUIRE(u.errors.size() == 1);
  CHECK(u.errors[0].second.find("upload of 'out/x' refused: cannot open ") == 0);
  CHECK(u.errors[0].second.find("without following a symlink") != std::string::npos);
  CHECK_FALSE(fs::exists(elsewhere + "/x"));
}

TEST_CASE("uploads: more bytes than announced, or a wrong checksum, leave no file", "[uploads]") {
  Uploads u;
  u.send(0, 0, "out/long", "0123456789", 4);
  u.send(0, 0, "out/corrupt", "data", -1, "00000000");
  u.send(0, 0, "out/short", "data", 8);
  REQUIRE(u.errors.size() == 3);
  CHECK(u.errors[0].second == "upload of 'out/long' sent more than the 4 bytes it announced");
  CHECK(u.errors[1].second ==
        "upload of rank 0's 'out/corrupt' is corrupt (4 of 4 bytes, CRC-32C differs); rejected");
  CHECK(u.errors[2].second ==
        "upload of rank 0's 'out/short' is corrupt (4 of 8 bytes, CRC-32C not checked); rejected");
  CHECK_FALSE(fs::exists(u.rank_file(0, "out/long")));
  CHECK_FALSE(fs::exists(u.rank_file(0, "out/corrupt")));
  CHECK_FALSE(fs::exists(u.rank_file(0, "out/short")));
}

TEST_CASE("uploads: one cut short by its node's loss is removed, silently; by a new one, said", "[uploads]") {
  Uploads u;
  u.receiver().begin(0, UploadBegin{0, "out/a", 10});
  u.receiver().data(0, "01234");
  CHECK(fs::exists(u.rank_file(0, "out/a")));
  u.receiver().cut_short(0);
  CHECK_FALSE(fs::exists(u.rank_file(0, "out/a")));
  CHECK(u.errors.empty());
  u.receiver().data(0, "56789");  // nothing is open: dropped
  u.receiver().begin(0, UploadBegin{0, "out/b", 10});
  u.receiver().begin(0, UploadBegin{0, "out/c", 0});
  REQUIRE(u.errors.size() == 1);
  CHECK(u.errors[0].second == "a new upload began before the last one ended");
  CHECK_FALSE(fs::exists(u.rank_file(0, "out/b")));
  CHECK(fs::exists(u.rank_file(0, "out/c")));
}

TEST_CASE("uploads: a hole is left a hole, counted in the size and the checksum", "[uploads]") {
  Uploads u;
  constexpr std::int64_t kGiB = 1LL << 30;
  Crc32c crc;
  crc.update("head");
  crc.update(upload_hole_crc_bytes(kGiB));
  crc.update("middle");
  crc.update(upload_hole_crc_bytes(kGiB));
  const std::int64_t size = 4 + kGiB + 6 + kGiB;  // ends in a hole
  u.receiver().begin(0, UploadBegin{0, "out/sparse.bin", size});
  u.receiver().data(0, "head");
  u.receiver().hole(0, kGiB);
  u.receiver().data(0, "middle");
  u.receiver().hole(0, kGiB);
  u.receiver().end(0, UploadEnd{"out/sparse.bin", crc.hex()});
  CHECK(u.errors.empty());
  const std::string path = u.rank_file(0, "out/sparse.bin");
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK(st.st_size == size);
  CHECK(st.st_blocks * 512 <= 1 << 20);  // the holes take no space
  std::ifstream in(path, std::ios::binary);
  std::string got(6, '\0');
  in.seekg(4 + kGiB);
  in.read(got.data(), 6);
  CHECK(got == "middle");

  SECTION("a hole where the data was: the checksum differs, the file is rejected") {
    u.receiver().begin(0, UploadBegin{0, "out/moved.bin", 10});
    u.receiver().hole(0, 4);
    u.receiver().data(0, "middle");
    Crc32c data_first;
    data_first.update("middle");
    data_first.update(upload_hole_crc_bytes(4));
    u.receiver().end(0, UploadEnd{"out/moved.bin", data_first.hex()});
    REQUIRE(u.errors.size() == 1);
    CHECK(u.errors[0].second ==
          "upload of rank 0's 'out/moved.bin' is corrupt (10 of 10 bytes, CRC-32C differs); "
          "rejected");
    CHECK_FALSE(fs::exists(u.rank_file(0, "out/moved.bin")));
  }
  SECTION("a hole past the size announced, or of no bytes, ends the upload") {
    u.receiver().begin(0, UploadBegin{0, "out/long.bin", 10});
    u.receiver().hole(0, 11);
    u.receiver().begin(0, UploadBegin{0, "out/none.bin", 10});
    u.receiver().hole(0, 0);
    REQUIRE(u.errors.size() == 2);
    CHECK(u.errors[0].second == "upload of 'out/long.bin' sent more than the 10 bytes it announced");
    CHECK(u.errors[1].second == "upload of 'out/none.bin' sent a hole of 0 bytes");
    CHECK_FALSE(fs::exists(u.rank_file(0, "out/long.bin")));
    CHECK_FALSE(fs::exists(u.rank_file(0, "out/none.bin")));
  }
}

TEST_CASE("uploads: a name a rank made is said escaped", "[uploads]") {
  Uploads u;
  u.send(0, 0, "out/x\nflowrun: step 'train' succeeded\x1b[2J", "data", -1, "00000000");
  u.send(0, 0, "x\n\x1b]0;t\x07", "data");
  REQUIRE(u.errors.size() == 2);
  CHECK(u.errors[0].second ==
        "upload of rank 0's 'out/x\\nflowrun: step 'train' succeeded\\x1b[2J' is corrupt (4 of 4 bytes, "
        "CRC-32C "
        "differs); rejected");
  CHECK(u.errors[1].second ==
        "upload of 'x\\n\\x1b]0;t\\x07' refused: only error.json, the rank's flight-recorder dump and files "
        "under "
        "out/ are uploaded");
}
