// Folding the ranks' like lines (LineFolder): shown once with their ranks,
// every rank's own order kept, nothing lost or shown twice, a bounded wait.
#include "flowrun/line_fold.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "flowrun/logmux.h"

#include "testing.h"

using namespace flowrun;

namespace {

using testing::kMs;

struct Folder {
  explicit Folder(int ranks, std::int64_t window_ns = 200 * kMs, std::size_t max_held = 256 * 1024)
      : fold({"train", false, window_ns, max_held}) {
    for (int r = 0; r < ranks; ++r) ids.push_back(fold.add(log_prefix("train", r, false), r));
  }
  void say(int rank, std::string_view text, std::int64_t now_ns = 0) {
    fold.line(ids[static_cast<std::size_t>(rank)], false, text, "", now_ns, out);
  }
  std::string take() { return std::exchange(out, {}); }
  LineFolder fold;
  std::vector<int> ids;
  std::string out;
};

}  // namespace

TEST_CASE("rank ranges", "[fold]") {
  CHECK(rank_ranges({3}) == "r3");
  CHECK(rank_ranges({0, 1, 2, 3, 4, 5, 6, 7}) == "r0-7");
  CHECK(rank_ranges({7, 0, 5, 1, 2, 9, 8, 3}) == "r0-3,5,7-9");
  CHECK(rank_ranges({2, 2, 1}) == "r1-2");
  CHECK(rank_ranges({0, 2, 4, 6, 8, 10, 12, 14}) == "r0,2,4,6,8,\xe2\x80\xa6+3");
  CHECK(rank_ranges({0, 2, 4, 6, 8, 10}) == "r0,2,4,6,8,10");
}

TEST_CASE("a line every rank prints is shown once, as soon as the last prints it", "[fold]") {
  Folder f(4);
  f.say(0, "epoch 1 loss 0.31");
  f.say(2, "epoch 1 loss 0.31");
  f.say(1, "epoch 1 loss 0.31");
  CHECK(f.take().empty());
  f.say(3, "epoch 1 loss 0.31");
  CHECK(f.take() == "[train r0-3] epoch 1 loss 0.31\n");
  CHECK(f.fold.empty());
}

TEST_CASE("lines that differ at the same place are shown at once, apart", "[fold]") {
  Folder f(4);
  for (int r : {2, 0, 3}) f.say(r, "I am rank " + std::to_string(r), r * kMs);
  CHECK(f.take().empty());
  f.say(1, "I am rank 1", 9 * kMs);
  CHECK(f.take() ==
        "[train r0] I am rank 0\n[train r2] I am rank 2\n[train r3] I am rank 3\n"
        "[train r1] I am rank 1\n");
  CHECK(f.fold.empty());
}

TEST_CASE("a line waits for a silent rank until its wait ends", "[fold]") {
  Folder f(2);
  f.say(0, "loss 0.31", 0);
  f.say(0, "loss 0.30", 10 * kMs);
  CHECK(f.take().empty());
  CHECK(f.fold.next_due_ns() == 200 * kMs);
  f.fold.due(199 * kMs, f.out);
  CHECK(f.take().empty());
  f.fold.due(200 * kMs, f.out);
  CHECK(f.take() == "[train r0] loss 0.31\n");
  CHECK(f.fold.next_due_ns() == 210 * kMs);
  f.fold.due(210 * kMs, f.out);
  CHECK(f.take() == "[train r0] loss 0.30\n");
  CHECK(f.fold.next_due_ns() == INT64_MAX);
}

TEST_CASE("a line some ranks print is shown with theirs when its wait ends", "[fold]") {
  Folder f(8);
  for (int r : {0, 1, 2, 4, 5, 6, 7}) f.say(r, "warning: something", 5 * kMs);
  CHECK(f.take().empty());
  f.fold.due(205 * kMs, f.out);
  CHECK(f.take() == "[train r0-2,4-7] warning: something\n");
}

TEST_CASE("like lines at the same place fold around lines that differ", "[fold]") {
  Folder f(3);
  for (int r : {0, 1, 2}) {
    f.say(r, "hello", r);
    f.say(r, "I am rank " + std::to_string(r), 10 + r);
    f.say(r, "bye", 20 + r);
  }
  CHECK(f.take() ==
        "[train r0-2] hello\n[train r0] I am rank 0\n[train r1] I am rank 1\n[train r2] I am rank 2\n"
        "[train r0-2] bye\n");
}

TEST_CASE("each rank's own lines keep their order", "[fold]") {
  Folder f(2);
  f.say(0, "A", 1);
  f.say(0, "B", 2);
  f.say(0, "A", 3);
  f.say(1, "A", 4);
  CHECK(f.take() == "[train r0-1] A\n");  // both printed it first
  f.say(1, "A", 5);                       // rank 0's second line is B: they do not fold
  CHECK(f.take() == "[train r0] B\n[train r1] A\n");
  f.fold.due(3 + 200 * kMs, f.out);
  CHECK(f.take() == "[train r0] A\n");
}

TEST_CASE("a rank that ends is no longer waited for", "[fold]") {
  Folder f(3);
  f.say(0, "done");
  f.say(1, "done");
  CHECK(f.take().empty());
  f.fold.close(f.ids[2], f.out);
  CHECK(f.take() == "[train r0-1] done\n");
  f.say(0, "more");
  CHECK(f.take().empty());  // rank 1 may print it too
  f.fold.close(f.ids[1], f.out);
  CHECK(f.take() == "[train r0] more\n");  // rank 0 is the only live one
}

TEST_CASE("with one live rank nothing waits", "[fold]") {
  Folder f(1);
  f.say(0, "alone");
  CHECK(f.take() == "[train r0] alone\n");
}

TEST_CASE("a window of 0 folds nothing", "[fold]") {
  Folder f(2, 0);
  f.say(0, "same");
  f.say(1, "same");
  CHECK(f.take() == "[train r0] same\n[train r1] same\n");
}

TEST_CASE("a source that never folds is shown at once", "[fold]") {
  Folder f(2);
  const int srun = f.fold.add("[srun] ", -1);
  f.say(0, "held");
  f.fold.line(srun, false, "srun: job 12 queued", "", 0, f.out);
  CHECK(f.take() == "[srun] srun: job 12 queued\n");
}

TEST_CASE("lines waiting past max_held are shown", "[fold]") {
  Folder f(3, 200 * kMs, 64);
  f.say(0, std::string(40, 'a'), 1);
  CHECK(f.take().empty());
  f.say(1, std::string(40, 'b'), 2);  // rank 2 is silent, but 80 bytes wait
  CHECK(f.take() == "[train r0] " + std::string(40, 'a') + "\n[train r1] " + std::string(40, 'b') + "\n");
  CHECK(f.fold.empty());
  // A flood: for a wait from then, lines pass as they come, unfolded.
  f.say(0, "same", 3);
  f.say(1, "same", 200 * kMs);
  CHECK(f.take() == "[train r0] same\n[train r1] same\n");
  // Then they fold again.
  f.say(0, "same", 200 * kMs + 2);
  f.say(1, "same", 200 * kMs + 3);
  f.say(2, "same", 200 * kMs + 4);
  CHECK(f.take() == "[train r0-2] same\n");
}

TEST_CASE("pieces of a cut line fold with the continuation mark", "[fold]") {
  Folder f(2);
  f.fold.line(f.ids[0], true, "tail", "", 0, f.out);
  f.fold.line(f.ids[1], true, "ta", "il", 0, f.out);
  CHECK(f.take() == "[train r0-1] \xe2\x86\xaa tail\n");
  f.fold.line(f.ids[0], true, "tail", "", 1, f.out);
  f.fold.line(f.ids[1], false, "tail", "", 2, f.out);  // not a piece: another line
  f.fold.flush(f.out);
  CHECK(f.take() == "[train r0] \xe2\x86\xaa tail\n[train r1] tail\n");
}

TEST_CASE("flush shows every held line in order", "[fold]") {
  Folder f(4);
  f.say(0, "a", 1);
  f.say(0, "c", 2);
  f.say(1, "b", 3);
  f.say(2, "a", 4);
  f.fold.flush(f.out);
  CHECK(f.take() == "[train r0,2] a\n[train r1] b\n[train r0] c\n");
}

TEST_CASE("the splitter hands its lines to the folder", "[fold]") {
  LineFolder fold({"train", false, 200 * kMs});
  LogStyle style;
  LineSplitter r0("[train r0] ", style), r1("[train r1] ", style);
  r0.fold_into(&fold, fold.add("[train r0] ", 0));
  r1.fold_into(&fold, fold.add("[train r1] ", 1));
  std::string out;
  r0.feed("step 1\nstep 2\n", 0, out);
  CHECK(out.empty());
  r1.feed("step 1\nst", 0, out);
  CHECK(out == "[train r0-1] step 1\n");
  r1.feed("ep 2\n", 0, out);
  CHECK(out == "[train r0-1] step 1\n[train r0-1] step 2\n");
}

TEST_CASE("in a flood the splitter passes its lines itself, as the folder would show them", "[fold]") {
  LineFolder fold({"train", false, 200 * kMs, 64});
  LogStyle style;
  LineSplitter r0("[train r0] ", style), r1("[train r1] ", style);
  r0.fold_into(&fold, fold.add("[train r0] ", 0));
  r1.fold_into(&fold, fold.add("[train r1] ", 1));
  std::string out;
  CHECK_FALSE(fold.passes(0, 1));                // another rank to fold with, no flood: the line waits for it
  r0.feed(std::string(70, 'x') + "\n", 1, out);  // past max_held: a flood
  CHECK(out == "[train r0] " + std::string(70, 'x') + "\n");
  CHECK(fold.passes(0, 2));
  CHECK(fold.passes(1, 200 * kMs));
  out.clear();
  r0.feed("same\nsame\n", 2, out);  // whole lines in one feed (the splitter's own fast path)
  r1.feed("same\n", 3, out);
  r1.feed("sa", 4, out);
  r1.feed("me\n", 5, out);  // a line completed across feeds
  CHECK(out == "[train r0] same\n[train r0] same\n[train r1] same\n[train r1] same\n");
  CHECK(fold.empty());
  // The flood's wait over, they fold again.
  CHECK_FALSE(fold.passes(0, 200 * kMs + 2));
  out.clear();
  r0.feed("again\n", 200 * kMs + 2, out);
  r1.feed("again\n", 200 * kMs + 3, out);
  CHECK(out == "[train r0-1] again\n");
}

// Random lines from random ranks, against the guarantees: every line of every
// rank shown exactly once, each rank's in order, and folded lines are the same
// text. Time moves on, so waits end; the table is rebuilt many times.
TEST_CASE("random lines: nothing lost, nothing twice, every rank's order kept", "[fold]") {
  std::mt19937 rng(42);
  for (int round = 0; round < 20; ++round) {
    const int ranks = 1 + static_cast<int>(rng() % 8);
    Folder f(ranks, 50 * kMs, 1 + rng() % 4096);
    std::map<int, std::vector<std::string>> wrote;
    std::int64_t now = 0;
    for (int i = 0; i < 3000; ++i) {
      const int r = static_cast<int>(rng() % static_cast<unsigned>(ranks));
      const std::string text = "line " + std::to_string(rng() % 6);
      wrote[r].push_back(text);
      now += static_cast<std::int64_t>(rng() % (5 * kMs));
      f.say(r, text, now);
      if (rng() % 10 == 0) f.fold.due(now, f.out);
    }
    f.fold.flush(f.out);
    // Parse "[train rA-B,C] text" back into each rank's lines.
    std::map<int, std::vector<std::string>> shown;
    std::string all = f.take();
    for (std::size_t at = 0; at < all.size();) {
      const std::size_t nl = all.find('\n', at);
      const std::string line = all.substr(at, nl - at);
      at = nl + 1;
      const std::size_t close = line.find("] ");
      REQUIRE(line.starts_with("[train r"));
      const std::string tag = line.substr(8, close - 8), text = line.substr(close + 2);
      std::size_t p = 0;
      while (p < tag.size()) {
        std::size_t q = tag.find(',', p);
        if (q == std::string::npos) q = tag.size();
        const std::string range = tag.substr(p, q - p);
        const std::size_t dash = range.find('-');
        const int lo = std::stoi(range.substr(0, dash));
        const int hi = dash == std::string::npos ? lo : std::stoi(range.substr(dash + 1));
        for (int r = lo; r <= hi; ++r) shown[r].push_back(text);
        p = q + 1;
      }
    }
    CHECK(shown == wrote);
  }
}
