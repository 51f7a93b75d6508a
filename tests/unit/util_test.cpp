// printable(): bytes a peer or a worker named, made safe to print; format_duration().
#include "flowrun/util.h"

#include <catch2/catch.hpp>
#include <string>

using namespace flowrun;
using namespace std::string_literals;

TEST_CASE("printable keeps printable ASCII and well-formed UTF-8", "[util][printable]") {
  CHECK(printable("node-1.example.org") == "node-1.example.org");
  CHECK(printable("Zürich ノード 🚀") == "Zürich ノード 🚀");
  CHECK(printable("") == "");
}

TEST_CASE("printable escapes control bytes, ESC, DEL and backslash", "[util][printable]") {
  CHECK(printable("a\nflowrun: forged line") == "a\\nflowrun: forged line");
  CHECK(printable("\r\t") == "\\r\\t");
  CHECK(printable("\x1b]0;owned\x07") == "\\x1b]0;owned\\x07");
  CHECK(printable("\x1b[2J") == "\\x1b[2J");
  CHECK(printable("nul\0byte"s) == "nul\\x00byte");
  CHECK(printable("\x7f") == "\\x7f");
  CHECK(printable("a\\x1b") == "a\\\\x1b");  // a literal backslash cannot pose as an escape
}

TEST_CASE("printable escapes invalid UTF-8 and the C1 controls byte by byte", "[util][printable]") {
  CHECK(printable("\xff\xfe") == "\\xff\\xfe");
  CHECK(printable("\xc3") == "\\xc3");                             // cut short
  CHECK(printable("\xc3(") == "\\xc3(");                           // not a continuation byte
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");                    // overlong '/'
  CHECK(printable("\xe0\x80\xaf") == "\\xe0\\x80\\xaf");           // overlong, 3 bytes
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");           // a surrogate
  CHECK(printable("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  CHECK(printable("\xc2\x9b"
                  "31m") == "\\xc2\\x9b31m");  // U+009B, the 8-bit CSI
  CHECK(printable("\xc2\xa0") == "\xc2\xa0");  // U+00A0 is printable
}

TEST_CASE("format_duration writes a duration as a spec does", "[util]") {
  CHECK(format_duration(90) == "1m30s");
  CHECK(format_duration(43200) == "12h");
  CHECK(format_duration(93784) == "1d2h3m4s");
  CHECK(format_duration(1.5) == "1.5s");
  CHECK(format_duration(0.25) == "0.25s");
  CHECK(format_duration(600) == "10m");
}
