// lib/base/text: a counted word, aligned columns, hex digits.
#include "flowrun/text.h"

#include <catch2/catch.hpp>
#include <string>

using namespace flowrun;
using namespace std::string_literals;

TEST_CASE("plural counts a word: its plural form for every count but one", "[base][text]") {
  CHECK(plural(0, "node", "nodes") == "0 nodes");
  CHECK(plural(1, "node", "nodes") == "1 node");
  CHECK(plural(2, "node is", "nodes are") == "2 nodes are");
  CHECK(plural(1, "GPU") == "1 GPU");
  CHECK(plural(8, "GPU") == "8 GPUs");
  CHECK(plural(std::size_t{3}, "spare") == "3 spares");
  CHECK(plural(-1, "GPU") == "-1 GPUs");
}

TEST_CASE("TextTable aligns its columns two spaces apart, with no blank at a line's end", "[base][text]") {
  TextTable table("  ");
  table.add_row({"index", "name", "uuid"});
  table.add_row({"0", "H100", "GPU-1"});
  table.add_row({"10", "A", ""});
  CHECK(table.render() ==
        "  index  name  uuid\n"
        "  0      H100  GPU-1\n"
        "  10     A     \n");
}

TEST_CASE("TextTable pads a right-aligned column on its left, the last one too", "[base][text]") {
  using Align = TextTable::Align;
  TextTable table("", {Align::right, Align::left, Align::right});
  table.add_row({"size", "what", "n"});
  table.add_row({"8", "x", "1000"});
  CHECK(table.render() ==
        "size  what     n\n"
        "   8  x     1000\n");
}

TEST_CASE("TextTable: a short row takes no room for the cells it lacks; no row, no text", "[base][text]") {
  TextTable table("> ");
  table.add_row({"", "GPU0", "GPU1"});
  table.add_row({"GPU0"});
  table.add_row({"GPU1", "NV4", "X"});
  CHECK(table.render() ==
        ">       GPU0  GPU1\n"
        "> GPU0\n"
        "> GPU1  NV4   X\n");
  CHECK(TextTable().render().empty());
}

TEST_CASE("hex writes each byte as two lowercase digits", "[base][text]") {
  CHECK(hex("") == "");
  CHECK(hex("\x01\xab\xff\x00"s) == "01abff00");
  const unsigned char bytes[] = {0xde, 0xad, 0x0f};
  CHECK(hex(bytes, 3) == "dead0f");
  CHECK(hex(bytes + 1, 1) == "ad");
}
