// A small streaming JSON writer: two-space indentation, keys in the order
// written. Enough for flowrun's reports; not a general JSON library.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace flowrun {

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view name);
  JsonWriter& value(std::string_view text);
  JsonWriter& value(const char* text) { return value(std::string_view(text)); }
  JsonWriter& value(std::int64_t number);
  JsonWriter& value(int number) { return value(static_cast<std::int64_t>(number)); }
  JsonWriter& value(std::uint64_t number);
  JsonWriter& value(bool flag);
  JsonWriter& null();
  // An array of strings or of ints on one call.
  JsonWriter& strings(const std::vector<std::string>& items);
  JsonWriter& ints(const std::vector<int>& items);

  // The document, ending in a newline.
  std::string str() const { return out_ + "\n"; }

 private:
  void before_value();
  void close(char bracket);
  struct Level {
    bool empty = true;
    bool is_object = false;
  };
  std::string out_;
  std::vector<Level> stack_;
  bool after_key_ = false;
};

}  // namespace flowrun
