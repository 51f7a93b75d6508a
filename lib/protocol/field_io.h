// The two ways a message's fields are run through: written (Writer, as
// encode_fields writes them) and read back (Reader, from decoded Fields, with
// every check a peer's bytes need). messages.cpp describes each message's
// fields once, for both, as cereal's serialize does:
//
//   template <class Io, maybe_const<Output> M>
//   void fields(Io& io, M& m) { io("rank", m.rank); io("stream", m.is_stderr, kStreams); ... }
//
// A Writer runs it over a const message, a Reader over an empty one that it
// fills. A field is one of:
//   io(key, value)          a string, an integer, a bool, an optional integer
//                           or a list of strings, written as messages.h says
//   io(key, value, named)   one of a few names (Named: an enum, Output's stream)
//   io(key, value, form)    text of a form of its own (TextForm: Stalled's
//                           lines, Preflight's devices, Start's env)
//   io.items(what, items)   a list of structs: the field "ranks" (their
//                           count), then "r0", "r1", ... each the
//                           encode_fields of one item's fields
// Internal to lib/protocol.
#pragma once

#include <array>
#include <charconv>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "flowrun/error.h"
#include "flowrun/protocol.h"

namespace flowrun::protocol_detail {

// M is the message T as an Io takes it: const to be written, not to be read.
template <class M, class T>
concept maybe_const = std::same_as<std::remove_const_t<M>, T>;

// A plain integer field (bool is a field of its own, "1" or "0").
template <class T>
concept integer = std::is_integral_v<T> && !std::same_as<T, bool>;

// Start carries one field per rank of its node; a node has at most a few
// hundred GPUs, far fewer than this.
constexpr std::size_t kMaxStartFields = std::size_t{1} << 16;

// A peer's bytes in an error: short, and only printable ASCII.
inline std::string shown(std::string_view text) {
  constexpr std::size_t kShown = 64;
  std::string out;
  for (char c : text.substr(0, kShown)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (text.size() > kShown) out += "...";
  return out;
}

// A list's items joined by NUL; throws for what the reader could not tell
// apart (a list of one empty item is the empty list) or split (a NUL).
inline std::string join_list(std::string_view key, const std::vector<std::string>& items) {
  if (items.size() == 1 && items[0].empty())
    throw Error("field '" + std::string(key) + "': a list of one empty item cannot be sent");
  std::string joined;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (items[i].find('\0') != std::string::npos)
      throw Error("field '" + std::string(key) + "': a list item holds a NUL");
    if (i > 0) joined += '\0';
    joined += items[i];
  }
  return joined;
}

inline std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  std::size_t pos = 0;
  while (true) {
    const std::size_t end = text.find('\0', pos);
    out.emplace_back(text.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos));
    if (end == std::string_view::npos) break;
    pos = end + 1;
  }
  return out;
}

// A field that holds one of N names, each for a value of T. A value not
// listed (an enum's value out of its range) is written as the first name.
template <class T, std::size_t N>
struct Named {
  std::array<std::pair<T, std::string_view>, N> names;

  std::string_view name_of(const T& value) const {
    for (const auto& [v, name] : names)
      if (v == value) return name;
    return names[0].second;
  }
  // "a, b or c", for an error.
  std::string listed() const {
    std::string out;
    for (std::size_t i = 0; i < N; ++i)
      out += (i == 0 ? "" : i + 1 == N ? " or " : ", ") + std::string(names[i].second);
    return out;
  }
};

class Reader;

// A field whose value is text of a form of its own.
template <class T>
struct TextForm {
  // The text of `value`; throws flowrun::Error where it cannot be sent.
  std::string (*write)(std::string_view key, const T& value);
  // `text`, the value of field `key`, into `value`; reader.fail() says why not.
  void (*read)(Reader& reader, std::string_view key, std::string_view text, T& value);
};

// Appends fields as encode_fields does, without building a Fields first.
class Writer {
 public:
  void operator()(std::string_view key, std::string_view value) {
    put_u32(key.size());
    out_.append(key);
    put_u32(value.size());
    out_.append(value);
  }
  void operator()(std::string_view key, const std::string& value) { (*this)(key, std::string_view(value)); }
  template <integer Int>
  void operator()(std::string_view key, Int value) {
    (*this)(key, std::string_view(std::to_string(value)));
  }
  void operator()(std::string_view key, bool value) { (*this)(key, std::string_view(value ? "1" : "0")); }
  void operator()(std::string_view key, const std::optional<std::int64_t>& value) {
    (*this)(key, std::string_view(value ? std::to_string(*value) : std::string()));
  }
  void operator()(std::string_view key, const std::vector<std::string>& items) {
    (*this)(key, std::string_view(join_list(key, items)));
  }
  template <class T, std::size_t N>
  void operator()(std::string_view key, const T& value, const Named<T, N>& named) {
    (*this)(key, named.name_of(value));
  }
  template <class T>
  void operator()(std::string_view key, const T& value, const TextForm<T>& form) {
    (*this)(key, std::string_view(form.write(key, value)));
  }

  // `what` names the message in the Reader's errors only.
  template <class Item>
  void items(const char* /*what*/, const std::vector<Item>& items) {
    (*this)("ranks", items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      Writer item;
      fields(item, items[i]);  // the item's own fields(), in messages.cpp
      (*this)("r" + std::to_string(i), std::string_view(item.take()));
    }
  }

  std::string take() { return std::move(out_); }

 private:
  void put_u32(std::size_t n) {
    if (n > std::numeric_limits<std::uint32_t>::max()) throw Error("a field over 4 GiB cannot be sent");
    for (int shift = 24; shift >= 0; shift -= 8) out_.push_back(static_cast<char>((n >> shift) & 0xff));
  }
  std::string out_;
};

// Reads the fields of one message: each named field exactly once, every
// field used. The first problem is kept in *why; after it every read leaves
// its value as it was and finish() is false. A string is moved out of the
// fields (an output's data is not copied again).
class Reader {
 public:
  Reader(Fields& fields, std::string* why) : fields_(fields), used_(fields.size(), false), why_(why) {}

  void operator()(std::string_view key, std::string& value) {
    if (std::string* text = find(key)) value = std::move(*text);
  }
  template <integer Int>
  void operator()(std::string_view key, Int& value) {
    if (const std::string* text = find(key)) value = number<Int>(key, *text).value_or(Int{});
  }
  void operator()(std::string_view key, bool& value) {
    const std::string* text = find(key);
    if (!text) return;
    value = *text == "1";
    if (!value && *text != "0")
      fail("field '" + std::string(key) + "' is '" + shown(*text) + "', not 1 or 0");
  }
  void operator()(std::string_view key, std::optional<std::int64_t>& value) {
    const std::string* text = find(key);
    if (text && !text->empty()) value = number<std::int64_t>(key, *text);
  }
  void operator()(std::string_view key, std::vector<std::string>& items) {
    if (const std::string* text = find(key)) items = split_list(*text);
  }
  template <class T, std::size_t N>
  void operator()(std::string_view key, T& value, const Named<T, N>& named) {
    const std::string* text = find(key);
    if (!text) return;
    for (const auto& [v, name] : named.names) {
      if (*text != name) continue;
      value = v;
      return;
    }
    fail("field '" + std::string(key) + "' is '" + shown(*text) + "', not " + named.listed());
  }
  template <class T>
  void operator()(std::string_view key, T& value, const TextForm<T>& form) {
    if (const std::string* text = find(key)) form.read(*this, key, *text, value);
  }

  // `what` names the message in an error: "start field 'r0': field 'devices' is missing".
  template <class Item>
  void items(const char* what, std::vector<Item>& items) {
    std::size_t count = 0;
    (*this)("ranks", count);
    if (count >= kMaxStartFields) {
      fail("field 'ranks' is " + std::to_string(count) + ", more ranks than a " + what + " can hold");
      return;
    }
    for (std::size_t i = 0; i < count; ++i) {
      const std::string key = "r" + std::to_string(i);
      const std::string* text = find(key);
      if (!text) return;
      std::string error;
      auto item_fields = decode_fields(*text, &error);
      Item item;
      if (item_fields) {
        Reader item_reader(*item_fields, &error);
        fields(item_reader, item);  // the item's own fields(), in messages.cpp
        if (item_reader.finish()) {
          items.push_back(std::move(item));
          continue;
        }
      }
      fail(std::string(what) + " field '" + key + "': " + error);
      return;
    }
  }

  // `text`, a part of field `key`, as a number: only the text std::to_string
  // writes (no '+', spaces or extra zeros).
  template <integer Int>
  std::optional<Int> number(std::string_view key, std::string_view text) {
    Int value{};
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || std::to_string(value) != text) {
      fail("field '" + std::string(key) + "' is '" + shown(text) + "', not a number" +
           (ec == std::errc::result_out_of_range ? " in range" : ""));
      return std::nullopt;
    }
    return value;
  }

  void fail(std::string what) {
    if (ok_) *why_ = std::move(what);
    ok_ = false;
  }

  // Whether every read succeeded and every field was read.
  bool finish() {
    for (std::size_t i = 0; ok_ && i < fields_.size(); ++i)
      if (!used_[i]) fail("unexpected field '" + shown(fields_[i].first) + "'");
    return ok_;
  }

 private:
  // Looks from the field after the last one found: fields in the order
  // fields() names them (a start's thousands of ranks) cost one comparison each.
  std::string* find(std::string_view key) {
    if (!ok_) return nullptr;
    for (std::size_t n = 0; n < fields_.size(); ++n) {
      const std::size_t i = (next_ + n) % fields_.size();
      if (fields_[i].first != key) continue;
      used_[i] = true;
      next_ = i + 1;
      return &fields_[i].second;
    }
    fail("field '" + std::string(key) + "' is missing");
    return nullptr;
  }

  Fields& fields_;
  std::vector<bool> used_;
  std::string* why_;
  std::size_t next_ = 0;
  bool ok_ = true;
};

}  // namespace flowrun::protocol_detail
