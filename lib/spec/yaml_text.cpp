// JSON to YAML through yaml-cpp's emitter (yaml_text.h).

#include "flowrun/yaml_text.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <yaml-cpp/emitter.h>
#include <yaml-cpp/emittermanip.h>

namespace flowrun {

namespace {

// yaml-cpp writes a string plain unless it is one of YAML 1.2's nulls, so
// `yes` and `8` would come back to kubectl as a boolean and a number; plain is
// kept for what no reader takes for anything but a string.
bool plain_is_safe(const std::string& text) {
  if (text.empty() ||
      !(std::isalpha(static_cast<unsigned char>(text[0])) || text[0] == '/' || text[0] == '_'))
    return false;
  const bool word_chars = std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '/' || c == '-';
  });
  if (!word_chars) return false;
  // YAML 1.1's booleans and nulls (digits cannot start a plain string here).
  static constexpr std::array<std::string_view, 9> kWords = {"y",     "n",  "yes", "no",  "true",
                                                             "false", "on", "off", "null"};
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return std::find(kWords.begin(), kWords.end(), lower) == kWords.end();
}

void emit(YAML::Emitter& out, const Json& value) {
  switch (value.type()) {
    case Json::value_t::object:
      if (value.empty()) {
        out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
        return;
      }
      out << YAML::BeginMap;
      for (const auto& [key, member] : value.items()) {
        out << YAML::Key;
        emit(out, Json(key));
        out << YAML::Value;
        emit(out, member);
      }
      out << YAML::EndMap;
      return;
    case Json::value_t::array:
      if (value.empty()) {
        out << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
        return;
      }
      out << YAML::BeginSeq;
      for (const auto& item : value) emit(out, item);
      out << YAML::EndSeq;
      return;
    case Json::value_t::string: {
      const auto& text = value.get_ref<const std::string&>();
      if (!plain_is_safe(text)) out << YAML::DoubleQuoted;
      out << text;
      return;
    }
    case Json::value_t::boolean: out << value.get<bool>(); return;
    case Json::value_t::number_integer: out << value.get<std::int64_t>(); return;
    case Json::value_t::number_unsigned: out << value.get<std::uint64_t>(); return;
    case Json::value_t::number_float: out << value.get<double>(); return;
    default: out << YAML::Null; return;
  }
}

}  // namespace

std::string yaml_text(const Json& value) {
  YAML::Emitter out;
  out.SetIndent(2);
  emit(out, value);
  return std::string(out.c_str()) + "\n";
}

}  // namespace flowrun
