// The log multiplexer: prefixes, line atomicity, bounded pending memory,
// carriage returns and progress pacing, and the failure-report tail.
#include "flowrun/logmux.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "testing.h"

using namespace flowrun;

namespace {

using testing::kSecond;

LogStyle style(std::size_t max_line = 64 * 1024, std::int64_t interval_ns = kSecond) {
  LogStyle s;
  s.max_line = max_line;
  s.progress_interval_ns = interval_ns;
  return s;
}

// Feeds `data` in one call at time `now_ns` and returns what came out.
std::string feed(LineSplitter& splitter, std::string_view data, std::int64_t now_ns = 0) {
  std::string out;
  splitter.feed(data, now_ns, out);
  return out;
}

std::string finish(LineSplitter& splitter) {
  std::string out;
  splitter.finish(out);
  return out;
}

// Everything a splitter makes of `data` fed in pieces of `chunk` bytes, then finished.
std::string run_chunked(std::string_view data, std::size_t chunk, const LogStyle& s) {
  LineSplitter splitter("[p] ", s);
  std::string out;
  for (std::size_t i = 0; i < data.size(); i += chunk) {
    const std::size_t before = out.size();
    splitter.feed(data.substr(i, chunk), 0, out);
    // Line-atomic: each feed appends nothing or whole lines.
    if (out.size() != before) REQUIRE(out.back() == '\n');
    REQUIRE(splitter.pending() <= s.max_line);
  }
  splitter.finish(out);
  return out;
}

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    REQUIRE(nl != std::string_view::npos);
    lines.emplace_back(text.substr(0, nl));
    text.remove_prefix(nl + 1);
  }
  return lines;
}

}  // namespace

TEST_CASE("log_prefix names the step and the rank", "[logmux]") {
  CHECK(log_prefix("train", 3, false) == "[train r3] ");
  CHECK(log_prefix("train", 0, false) == "[train r0] ");
  CHECK(log_prefix("prepare", -1, false) == "[prepare] ");
}

TEST_CASE("log_prefix colours the tag by rank and resets after it", "[logmux]") {
  CHECK(log_prefix("train", 0, true) == "\x1b[36m[train r0]\x1b[0m ");
  CHECK(log_prefix("train", 1, true) == "\x1b[33m[train r1]\x1b[0m ");
  CHECK(log_prefix("train", 3, true) == "\x1b[35m[train r3]\x1b[0m ");
  CHECK(log_prefix("prepare", -1, true) == "\x1b[94m[prepare]\x1b[0m ");
  // Six distinct colours, then the cycle repeats.
  std::vector<std::string> colours;
  for (int rank = 0; rank < 6; ++rank) {
    const std::string prefix = log_prefix("t", rank, true);
    colours.push_back(prefix.substr(0, prefix.find("[t")));
    CHECK(colours.back().size() == 5);  // "\x1b[3Nm"
  }
  for (std::size_t i = 0; i < colours.size(); ++i)
    for (std::size_t j = i + 1; j < colours.size(); ++j) CHECK(colours[i] != colours[j]);
  CHECK(log_prefix("t", 6, true) == "\x1b[36m[t r6]\x1b[0m ");
  CHECK(log_prefix("t", 13, true) == "\x1b[33m[t r13]\x1b[0m ");
}

TEST_CASE("whole lines come out prefixed", "[logmux]") {
  LineSplitter splitter("[train r3] ", style());
  CHECK(feed(splitter, "loss 0.12\n") == "[train r3] loss 0.12\n");
  CHECK(splitter.pending() == 0);
  CHECK(finish(splitter).empty());
}

TEST_CASE("many lines in one feed", "[logmux]") {
  LineSplitter splitter("[p] ", style());
  CHECK(feed(splitter, "a\nbb\nccc\ndd") == "[p] a\n[p] bb\n[p] ccc\n");
  CHECK(splitter.pending() == 2);
  CHECK(feed(splitter, "d\n") == "[p] ddd\n");
}

TEST_CASE("a line split across many feeds comes out once, whole", "[logmux]") {
  LineSplitter splitter("[p] ", style());
  const std::string line = "epoch 3 step 1200 loss 0.1234\n";
  std::string out;
  for (char c : line) {
    const std::size_t before = out.size();
    splitter.feed(std::string_view(&c, 1), 0, out);
    if (c != '\n') CHECK(out.size() == before);
  }
  CHECK(out == "[p] epoch 3 step 1200 loss 0.1234\n");
}

TEST_CASE("feeding byte by byte gives the same output as one feed", "[logmux]") {
  const std::string data = "one\r\n\ntwo\nthree\r\n\r\nfour without newline";
  const std::string expected = "[p] one\n[p] \n[p] two\n[p] three\n[p] \n[p] four without newline\n";
  CHECK(run_chunked(data, data.size(), style()) == expected);
  CHECK(run_chunked(data, 1, style()) == expected);
  CHECK(run_chunked(data, 3, style()) == expected);
}

TEST_CASE("a last line without newline is shown by finish", "[logmux]") {
  LineSplitter splitter("[p] ", style());
  CHECK(feed(splitter, "done").empty());
  CHECK(splitter.pending() == 4);
  CHECK(finish(splitter) == "[p] done\n");
  CHECK(splitter.pending() == 0);
  CHECK(finish(splitter).empty());
}

TEST_CASE("empty lines are kept", "[logmux]") {
  LineSplitter splitter("[p] ", style());
  CHECK(feed(splitter, "\n\nx\n\n") == "[p] \n[p] \n[p] x\n[p] \n");
}

TEST_CASE("\\r\\n ends a line like \\n, also split across feeds", "[logmux]") {
  LineSplitter splitter("[p] ", style());
  CHECK(feed(splitter, "a\r\nb\r\n") == "[p] a\n[p] b\n");
  CHECK(feed(splitter, "c\r").empty());
  CHECK(feed(splitter, "\nd\r") == "[p] c\n");
  CHECK(finish(splitter) == "[p] d\n");
}

TEST_CASE("progress snapshots are paced; the final state is always shown", "[logmux]") {
  SECTION("one feed: the first snapshot shows, the next within the interval does not") {
    LineSplitter splitter("[p] ", style());
    CHECK(feed(splitter, "10%\r20%\r30%\n", 0) == "[p] 10%\n[p] 30%\n");
  }
  SECTION("one feed per redraw, snapshots timed by the feed that brought their '\\r'") {
    LineSplitter splitter("[p] ", style());
    std::string out;
    splitter.feed("10%\r", 0, out);
    CHECK(out.empty());  // "\r\n" or a bare '\r'? not known yet
    splitter.feed("20%\r", kSecond / 3, out);
    CHECK(out == "[p] 10%\n");
    splitter.feed("30%\n", 2 * kSecond / 3, out);  // 20% came at 1/3 s: dropped
    CHECK(out == "[p] 10%\n[p] 30%\n");
  }
  SECTION("a bar redrawn twice a second shows once a second") {
    LineSplitter splitter("[p] ", style());
    std::string out;
    for (int i = 0; i <= 8; ++i) splitter.feed("\r" + std::to_string(i * 10) + "%", i * kSecond / 2, out);
    splitter.feed(" done\n", 5 * kSecond, out);
    // tqdm style: '\r' before each redraw. "0%" ends at 0.5 s (shown), "10%"
    // at 1 s (dropped), "20%" at 1.5 s (shown), and so on.
    CHECK(out == "[p] 0%\n[p] 20%\n[p] 40%\n[p] 60%\n[p] 80% done\n");
  }
  SECTION("an empty final state: the dropped last snapshot stands in") {
    LineSplitter splitter("[p] ", style());
    CHECK(feed(splitter, "1/3\r2/3\r3/3\r", 0) == "[p] 1/3\n");
    CHECK(finish(splitter) == "[p] 3/3\n");
  }
  SECTION("an empty final state after a shown snapshot adds nothing") {
    LineSplitter splitter("[p] ", style());
    CHECK(feed(splitter, "50%\r", 0).empty());
    CHECK(feed(splitter, "\r\n", kSecond) == "[p] 50%\n");
    CHECK(finish(splitter).empty());
  }
  SECTION("pacing spans lines; an interval of 0 shows every snapshot") {
    LineSplitter paced("[p] ", style());
    CHECK(feed(paced, "a\rb\n", 0) == "[p] a\n[p] b\n");
    CHECK(feed(paced, "c\rd\n", kSecond - 1) == "[p] d\n");
    CHECK(feed(paced, "e\rf\n", kSecond) == "[p] e\n[p] f\n");
    LineSplitter all("[p] ", style(64, 0));
    CHECK(feed(all, "10%\r20%\r30%\n", 0) == "[p] 10%\n[p] 20%\n[p] 30%\n");
  }
}

TEST_CASE("a line longer than max_line is cut; later pieces carry the mark", "[logmux]") {
  const std::string mark(kContinuation);
  SECTION("exactly max_line bytes is one line") {
    CHECK(run_chunked("12345678\n", 9, style(8)) == "[p] 12345678\n");
    CHECK(run_chunked("12345678\n", 1, style(8)) == "[p] 12345678\n");
  }
  SECTION("one byte more is two pieces") {
    const std::string expected = "[p] 12345678\n[p] " + mark + "9\n";
    CHECK(run_chunked("123456789\n", 10, style(8)) == expected);
    CHECK(run_chunked("123456789\n", 1, style(8)) == expected);
    CHECK(run_chunked("123456789", 4, style(8)) == expected);
  }
  SECTION("a cut never splits a UTF-8 character") {
    // "a" then 2-byte "é": byte 8 is the second half of the 4th "é".
    const std::string expected = "[p] a\xc3\xa9\xc3\xa9\xc3\xa9\n[p] " + mark + "\xc3\xa9\xc3\xa9!\n";
    const std::string data = "a\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9!\n";
    CHECK(run_chunked(data, data.size(), style(8)) == expected);
    CHECK(run_chunked(data, 1, style(8)) == expected);
    // 4-byte characters, cut back by up to 3 bytes.
    const std::string emoji = "\xf0\x9f\x9a\x80";
    CHECK(run_chunked("abcde" + emoji + "\n", 1, style(8)) == "[p] abcde\n[p] " + mark + emoji + "\n");
  }
}

TEST_CASE("a 100 MB line in 64 KiB chunks stays bounded and loses no byte", "[logmux]") {
  const LogStyle s = style();  // max_line 64 KiB
  const std::size_t total = 100u * 1000 * 1000;
  const std::size_t chunk = 64 * 1024 - 17;  // pieces do not line up with the chunks
  std::string buffer(chunk, '\0');
  LineSplitter splitter("[r1] ", s);
  std::string out;
  std::size_t fed = 0, payload = 0, pieces = 0, max_pending = 0;
  bool content_ok = true, marks_ok = true, sizes_ok = true;
  auto check_out = [&] {
    for (const std::string& line : split_lines(out)) {
      std::string_view body(line);
      REQUIRE(body.substr(0, 5) == "[r1] ");
      body.remove_prefix(5);
      if (pieces > 0) {
        marks_ok = marks_ok && body.substr(0, kContinuation.size()) == kContinuation;
        body.remove_prefix(kContinuation.size());
      }
      sizes_ok = sizes_ok && body.size() <= s.max_line;
      for (char c : body) content_ok = content_ok && c == static_cast<char>('a' + (payload++ % 26));
      ++pieces;
    }
    out.clear();
  };
  while (fed < total) {
    const std::size_t n = std::min(chunk, total - fed);
    for (std::size_t i = 0; i < n; ++i) buffer[i] = static_cast<char>('a' + ((fed + i) % 26));
    splitter.feed(std::string_view(buffer.data(), n), 0, out);
    fed += n;
    max_pending = std::max(max_pending, splitter.pending());
    check_out();
  }
  splitter.feed("\n", 0, out);
  check_out();
  CHECK(max_pending <= s.max_line);
  CHECK(payload == total);
  CHECK(pieces == (total + s.max_line - 1) / s.max_line);
  CHECK(content_ok);
  CHECK(marks_ok);
  CHECK(sizes_ok);
  CHECK(finish(splitter).empty());
}

TEST_CASE("how the bytes are split changes nothing", "[logmux]") {
  // Random text with '\n', '\r', "\r\n", UTF-8 and long lines; an interval of
  // 0 shows every snapshot, so only the split differs between runs.
  std::mt19937 rng(12345);
  const std::vector<std::string> atoms = {
      "a", "bc", "\n", "\r", "\r\n", "\xc3\xa9", "\xf0\x9f\x9a\x80", "0123456789"};
  std::string data;
  for (int i = 0; i < 20000; ++i) data += atoms[rng() % atoms.size()];
  const LogStyle s = style(16, 0);
  const std::string whole = run_chunked(data, data.size(), s);
  CHECK(whole.size() > data.size());
  for (std::size_t chunk : {1, 2, 3, 7, 64, 1000}) CHECK(run_chunked(data, chunk, s) == whole);
}

TEST_CASE("colour codes appear only with color on", "[logmux]") {
  LineSplitter coloured(log_prefix("train", 1, true), style());
  CHECK(feed(coloured, "loss 1\n") == "\x1b[33m[train r1]\x1b[0m loss 1\n");
  LineSplitter plain(log_prefix("train", 1, false), style());
  const std::string out = feed(plain, "loss 1\nloss 2\n");
  CHECK(out == "[train r1] loss 1\n[train r1] loss 2\n");
  CHECK(out.find('\x1b') == std::string::npos);
}

TEST_CASE("TailBuffer keeps the last lines and a trailing partial line", "[logmux]") {
  std::string data;
  for (int i = 0; i < 1000; ++i) data += "line " + std::to_string(i) + "\n";
  data += "Traceback (most";
  std::string expected;
  for (int i = 980; i < 1000; ++i) expected += "line " + std::to_string(i) + "\n";
  expected += "Traceback (most\n";

  TailBuffer whole;
  whole.feed(data);
  CHECK(whole.text() == expected);

  TailBuffer chunked(20);
  for (std::size_t i = 0; i < data.size(); i += 7) chunked.feed(std::string_view(data).substr(i, 7));
  CHECK(chunked.text() == expected);
}

TEST_CASE("TailBuffer with fewer lines than its size, and empty", "[logmux]") {
  TailBuffer tail(3);
  CHECK(tail.text().empty());
  tail.feed("a\n\nb\n");
  CHECK(tail.text() == "a\n\nb\n");
  tail.feed("c\n");
  CHECK(tail.text() == "\nb\nc\n");
  // A feed with more lines than the tail holds drops what came before.
  tail.feed("old partial\r");
  tail.feed("x\ny\nz\nw\nq");
  CHECK(tail.text() == "y\nz\nw\nq\n");
  TailBuffer none(0);
  none.feed("a\nb");
  CHECK(none.text() == "b\n");
}

TEST_CASE("TailBuffer truncates long lines, keeping the beginning", "[logmux]") {
  TailBuffer tail(2, 16);
  tail.feed(std::string(40, 'x') + "\nshort\n");
  CHECK(tail.text() == std::string(13, 'x') + std::string(kEllipsis) + "\nshort\n");
  TailBuffer streamed(2, 16);
  for (int i = 0; i < 40; ++i) streamed.feed("y");
  CHECK(streamed.text() == std::string(13, 'y') + std::string(kEllipsis) + "\n");
  streamed.feed("more\nnext\n");
  CHECK(streamed.text() == std::string(13, 'y') + std::string(kEllipsis) + "\nnext\n");
  // Exactly max_line bytes is kept whole; a cut never splits a character.
  TailBuffer exact(1, 16);
  exact.feed(std::string(16, 'z') + "\n");
  CHECK(exact.text() == std::string(16, 'z') + "\n");
  TailBuffer utf8(1, 16);
  std::string e_acute;
  for (int i = 0; i < 10; ++i) e_acute += "\xc3\xa9";
  utf8.feed("ab" + e_acute + "\n");  // 13 bytes would end inside the 6th "é"
  CHECK(utf8.text() == "ab" + e_acute.substr(0, 10) + std::string(kEllipsis) + "\n");
}

TEST_CASE("TailBuffer keeps a progress bar's final state", "[logmux]") {
  TailBuffer tail(5);
  tail.feed("10%\r20%\r30%\nx\r\n");
  tail.feed("\r 1/3\r 2/3");
  tail.feed("\r 3/3\r");
  CHECK(tail.text() == "30%\nx\n 3/3\n");
  tail.feed("\n50%\r");
  tail.feed("\r\nab\rc\n");
  CHECK(tail.text() == "30%\nx\n 3/3\n50%\nc\n");
}
