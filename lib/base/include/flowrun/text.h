// Text that knows nothing of what it says: a counted word, aligned columns,
// hex digits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace flowrun {

// `n`, a space and `one` or `many`: "1 node", "2 nodes", "0 spares".
std::string plural(std::int64_t n, std::string_view one, std::string_view many);

// plural() of a word whose plural adds an "s": "1 GPU", "3 GPUs".
std::string plural(std::int64_t n, std::string_view one);

// Columns of text aligned under each other, for a terminal: each line starts
// with the indent, two spaces part the columns, and a column is as wide as
// its widest cell (in bytes: the cells are ASCII). A left-aligned cell that
// ends its row is not padded, so no line ends in blanks; a right-aligned one
// is padded on its left.
class TextTable {
 public:
  enum class Align { left, right };

  // `align` by column; a column it does not name is left-aligned.
  explicit TextTable(std::string indent = {}, std::vector<Align> align = {});

  // A row may have fewer cells than another; its missing cells take no room.
  void add_row(std::vector<std::string> cells);

  // Every row, each ending in '\n'; "" for none.
  std::string render() const;

 private:
  std::string indent_;
  std::vector<Align> align_;
  std::vector<std::vector<std::string>> rows_;
};

// Each byte as two lowercase hex digits: "\x01\xab" -> "01ab".
std::string hex(std::string_view bytes);
std::string hex(const unsigned char* bytes, std::size_t size);

}  // namespace flowrun
