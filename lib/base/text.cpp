#include "flowrun/text.h"

#include <algorithm>

namespace flowrun {

std::string plural(std::int64_t n, std::string_view one, std::string_view many) {
  return std::to_string(n) + " " + std::string(n == 1 ? one : many);
}

std::string plural(std::int64_t n, std::string_view one) {
  return n == 1 ? plural(n, one, one) : plural(n, one, std::string(one) + "s");
}

TextTable::TextTable(std::string indent, std::vector<Align> align)
    : indent_(std::move(indent)), align_(std::move(align)) {}

void TextTable::add_row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }

std::string TextTable::render() const {
  std::vector<std::size_t> widths;
  for (const auto& row : rows_) {
    widths.resize(std::max(widths.size(), row.size()));
    for (std::size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows_) {
    out += indent_;
    for (std::size_t c = 0; c < row.size(); ++c) {
      const std::size_t pad = widths[c] - row[c].size();
      const bool right = c < align_.size() && align_[c] == Align::right;
      if (c > 0) out += "  ";
      if (right) out.append(pad, ' ');
      out += row[c];
      if (!right && c + 1 < row.size()) out.append(pad, ' ');
    }
    out += '\n';
  }
  return out;
}

std::string hex(const unsigned char* bytes, std::size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * size);
  for (std::size_t i = 0; i < size; ++i) {
    out.push_back(kDigits[bytes[i] >> 4]);
    out.push_back(kDigits[bytes[i] & 15]);
  }
  return out;
}

std::string hex(std::string_view bytes) {
  return hex(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

}  // namespace flowrun
