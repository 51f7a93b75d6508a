// The agent's receiver of a shipment (lib/agent/ship_receiver.cpp): the
// head's files written beneath a directory of the agent's scratch, their
// sizes and CRC-32C checked; a path that leaves it, a symlink on the way, a
// path shipped twice, a size or checksum that differs are refused, naming
// the file, and leave no part of it behind.
#include "ship_receiver.h"

#include <filesystem>
#include <string>
#include <sys/stat.h>

#include "testing.h"

using namespace flowrun;
using namespace flowrun::cluster;
namespace fs = std::filesystem;

namespace {

using testing::crc32c_of;

// One file sent as the head sends it: begin, chunks of at most `chunk` bytes, end.
void ship(ShipReceiver& r, const std::string& path, const std::string& data, int mode = 0644,
          std::size_t chunk = 3, std::string crc = {}) {
  r.begin(ShipBegin{path, static_cast<std::int64_t>(data.size()), mode});
  for (std::size_t at = 0; at < data.size(); at += chunk) r.data(std::string_view(data).substr(at, chunk));
  r.end(ShipEnd{crc.empty() ? crc32c_of(data) : crc});
}

}  // namespace

TEST_CASE("a shipment lands beneath the work directory, each file whole, its mode at most 0755", "[ship]") {
  testing::ScopedTempDir dir("ship");
  ShipReceiver r(dir.path() + "/work");
  ship(r, "data/x.txt", "hello world\n");
  ship(r, "train.py", "print(1)\n", 04777);
  ship(r, "empty", "");
  const ShipAck ack = r.done(ShipDone{3, 21});
  CHECK(ack == ShipAck{true, ""});
  CHECK(r.received());
  CHECK(testing::read_file(dir.path() + "/work/data/x.txt") == "hello world\n");
  CHECK(testing::read_file(dir.path() + "/work/train.py") == "print(1)\n");
  CHECK(fs::file_size(dir.path() + "/work/empty") == 0);
  struct stat st {};
  REQUIRE(stat((dir.path() + "/work/train.py").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0755);
  REQUIRE(stat((dir.path() + "/work").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0700);
}

TEST_CASE("a shipped file whose checksum, size or count differs is refused by name and removed", "[ship]") {
  testing::ScopedTempDir dir("ship");
  SECTION("checksum") {
    ShipReceiver r(dir.path() + "/work");
    ship(r, "ok.txt", "fine");
    ship(r, "data/x.txt", "hello", 0644, 2, crc32c_of("hellO"));
    ship(r, "after.txt", "not written");
    const ShipAck ack = r.done(ShipDone{3, 20});
    CHECK_FALSE(ack.ok);
    CHECK(ack.error ==
          "data/x.txt: its checksum differs from the head's: the file changed on the head while it was "
          "shipped, "
          "or was damaged on the way");
    CHECK_FALSE(r.received());
    CHECK_FALSE(fs::exists(dir.path() + "/work/data/x.txt"));
    CHECK_FALSE(fs::exists(dir.path() + "/work/after.txt"));
  }
  SECTION("more bytes than announced") {
    ShipReceiver r(dir.path() + "/work");
    r.begin(ShipBegin{"x.bin", 2, 0644});
    r.data("abc");
    r.end(ShipEnd{crc32c_of("abc")});
    CHECK(r.done(ShipDone{1, 2}) == ShipAck{false, "x.bin: more than the 2 bytes announced"});
    CHECK_FALSE(fs::exists(dir.path() + "/work/x.bin"));
  }
  SECTION("fewer bytes than announced") {
    ShipReceiver r(dir.path() + "/work");
    r.begin(ShipBegin{"x.bin", 5, 0644});
    r.data("abc");
    r.end(ShipEnd{crc32c_of("abc")});
    CHECK(r.done(ShipDone{1, 5}) == ShipAck{false, "x.bin: 3 of the 5 bytes announced came"});
    CHECK_FALSE(fs::exists(dir.path() + "/work/x.bin"));
  }
  SECTION("a count that differs from the head's") {
    ShipReceiver r(dir.path() + "/work");
    ship(r, "a", "1");
    CHECK(r.done(ShipDone{2, 2}) ==
          ShipAck{false, "the head shipped 2 files (2 bytes), 1 file (1 bytes) arrived"});
  }
  SECTION("a shipment that ends inside a file") {
    ShipReceiver r(dir.path() + "/work");
    r.begin(ShipBegin{"half", 4, 0644});
    r.data("ab");
    CHECK(r.done(ShipDone{1, 4}) == ShipAck{false, "half: the shipment ended inside it"});
    CHECK_FALSE(fs::exists(dir.path() + "/work/half"));
  }
}

TEST_CASE("a shipped path that leaves the work directory, goes through a symlink or comes twice is refused",
          "[ship]") {
  testing::ScopedTempDir dir("ship");
  const std::string work = dir.path() + "/work";
  SECTION("'..'") {
    ShipReceiver r(work);
    ship(r, "../escape", "x");
    const ShipAck ack = r.done(ShipDone{1, 1});
    CHECK_FALSE(ack.ok);
    CHECK(ack.error.starts_with("shipped file '../escape' refused: "));
    CHECK_FALSE(fs::exists(dir.path() + "/escape"));
  }
  SECTION("absolute") {
    ShipReceiver r(work);
    ship(r, dir.path() + "/abs", "x");
    CHECK(r.done(ShipDone{1, 1}).error.starts_with("shipped file '" + dir.path() + "/abs' refused: "));
    CHECK_FALSE(fs::exists(dir.path() + "/abs"));
  }
  SECTION("a symlink on the way is not followed") {
    fs::create_directories(work);
    fs::create_directories(dir.path() + "/outside");
    fs::create_directory_symlink(dir.path() + "/outside", work + "/data");
    ShipReceiver r(work);
    ship(r, "data/x.txt", "x");
    const ShipAck ack = r.done(ShipDone{1, 1});
    CHECK_FALSE(ack.ok);
    CHECK(ack.error.starts_with("cannot create data/x.txt in " + work + ": "));
    CHECK(fs::is_empty(dir.path() + "/outside"));
  }
  SECTION("twice") {
    ShipReceiver r(work);
    ship(r, "a.txt", "first");
    ship(r, "./a.txt", "second");
    CHECK(r.done(ShipDone{2, 11}) == ShipAck{false, "a.txt: shipped twice"});
    CHECK(testing::read_file(work + "/a.txt") == "first");
  }
}

TEST_CASE("a rank in the copy finds a path under the head's workdir in its command in the copy", "[ship]") {
  testing::ScopedTempDir dir("ship");
  StepShipment shipment([&] { return dir.path(); });
  const std::vector<std::string> argv = {
      "python3",        "eval.py",   "/w/.flowrun/runs/r1/train/outputs/model.pt",
      "--data=/w/data", "/wx/other", "/w"};
  CHECK(shipment.in_copy(argv, "/w") == argv);  // nothing came: as is
  shipment.take(ShipBegin{"data/x", 1, 0644});
  shipment.take(ShipChunk{"x"});
  shipment.take(ShipEnd{crc32c_of("x")});
  REQUIRE(shipment.take(ShipDone{1, 1}).ok);
  const std::string copy = dir.path() + "/work";
  CHECK(shipment.workdir() == copy);
  CHECK(shipment.in_copy(argv, "/w") ==
        std::vector<std::string>{"python3", "eval.py", copy + "/.flowrun/runs/r1/train/outputs/model.pt",
                                 "--data=" + copy + "/data", "/wx/other", "/w"});
  CHECK(shipment.in_copy({"sh", "-c", "cat '/w/a' /w/b x/w/c"}, "/w") ==
        std::vector<std::string>{"sh", "-c", "cat '" + copy + "/a' " + copy + "/b x/w/c"});
  shipment.forget();
  CHECK_FALSE(shipment.workdir());
  CHECK_FALSE(std::filesystem::exists(copy));
}
