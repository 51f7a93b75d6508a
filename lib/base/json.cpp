#include "flowrun/json.h"

#include "flowrun/util.h"

namespace flowrun {

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (stack_.empty()) return;
  if (!stack_.back().empty) out_ += ',';
  stack_.back().empty = false;
  out_ += '\n';
  out_.append(stack_.size() * 2, ' ');
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  out_ += '{';
  stack_.push_back({true, true});
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  before_value();
  out_ += '[';
  stack_.push_back({true, false});
  return *this;
}

void JsonWriter::close(char bracket) {
  bool empty = stack_.back().empty;
  stack_.pop_back();
  if (!empty) {
    out_ += '\n';
    out_.append(stack_.size() * 2, ' ');
  }
  out_ += bracket;
}

JsonWriter& JsonWriter::end_object() {
  close('}');
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  close(']');
  return *this;
}

JsonWriter& JsonWriter::key(std::string_view name) {
  before_value();
  out_ += '"' + json_escape(name) + "\": ";
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view text) {
  before_value();
  out_ += '"' + json_escape(text) + '"';
  return *this;
}

JsonWriter& JsonWriter::value(std::int64_t number) {
  before_value();
  out_ += std::to_string(number);
  return *this;
}

JsonWriter& JsonWriter::value(std::uint64_t number) {
  before_value();
  out_ += std::to_string(number);
  return *this;
}

JsonWriter& JsonWriter::value(bool flag) {
  before_value();
  out_ += flag ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::null() {
  before_value();
  out_ += "null";
  return *this;
}

// Short arrays of scalars stay on one line: "gpus": [0, 1].
JsonWriter& JsonWriter::strings(const std::vector<std::string>& items) {
  before_value();
  out_ += '[';
  for (std::size_t i = 0; i < items.size(); ++i) out_ += (i ? ", \"" : "\"") + json_escape(items[i]) + '"';
  out_ += ']';
  return *this;
}

JsonWriter& JsonWriter::ints(const std::vector<int>& items) {
  before_value();
  out_ += '[';
  for (std::size_t i = 0; i < items.size(); ++i) out_ += (i ? ", " : "") + std::to_string(items[i]);
  out_ += ']';
  return *this;
}

}  // namespace flowrun
