// Reading one value of a spec, at any level (spec_detail.h): a mapping's
// entries, with unknown and misplaced keys refused; strings, counts, booleans,
// words, directories, durations and env; and the work budget that bounds a
// walk over aliases. Every level's reader uses them, so each message about a
// kind of value is written once.

#include <algorithm>
#include <charconv>
#include <filesystem>

#include "flowrun/contract.h"

#include "spec_detail.h"

namespace flowrun::spec_detail {

namespace {

constexpr double kMaxTimeoutS = 365.0 * 24 * 3600;
constexpr std::size_t kMaxFileNameLength = 255;  // NAME_MAX

std::string child(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

bool is_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// YAML 1.2 core-schema numbers and booleans, shown bare in messages ("got 1.5");
// everything else is shown as a string ("got a string 'abc'").
bool looks_like_number_or_bool(std::string_view s) {
  static constexpr std::string_view kWords[] = {"true", "True", "TRUE",  "false", "False", "FALSE", ".inf",
                                                ".Inf", ".INF", "-.inf", "+.inf", ".nan",  ".NaN",  ".NAN"};
  if (std::find(std::begin(kWords), std::end(kWords), s) != std::end(kWords)) return true;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  if (s.starts_with("0x") || s.starts_with("0o")) {
    const std::string_view digits = s.starts_with("0x") ? "0123456789abcdefABCDEF" : "01234567";
    return s.size() > 2 && s.find_first_not_of(digits, 2) == std::string_view::npos;
  }
  bool digit = false, dot = false, exp = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c >= '0' && c <= '9') {
      digit = true;
    } else if (c == '.' && !dot && !exp) {
      dot = true;
    } else if ((c == 'e' || c == 'E') && digit && !exp) {
      exp = true;
      if (i + 1 < s.size() && (s[i + 1] == '+' || s[i + 1] == '-')) ++i;
      if (i + 1 >= s.size()) return false;
    } else {
      return false;
    }
  }
  return digit;
}

}  // namespace

std::optional<double> parse_duration(std::string_view s) {
  auto number = [&](double& value) {
    std::size_t n = 0;
    while (n < s.size() && ((s[n] >= '0' && s[n] <= '9') || s[n] == '.')) ++n;
    std::string_view text = s.substr(0, n);
    if (text.empty() || text.front() == '.' || text.back() == '.' ||
        std::count(text.begin(), text.end(), '.') > 1)
      return false;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec == std::errc::result_out_of_range)
      value = std::numeric_limits<double>::infinity();
    else if (ec != std::errc() || end != text.data() + text.size())
      return false;
    s.remove_prefix(n);
    return true;
  };
  double value = 0;
  if (!number(value)) return std::nullopt;
  if (s.empty()) return value;
  static constexpr std::pair<std::string_view, double> kUnits[] = {
      {"d", 86400}, {"h", 3600}, {"m", 60}, {"s", 1}, {"ms", 0.001}};
  double total = 0;
  std::size_t next_unit = 0;
  while (true) {
    if (s.empty()) return std::nullopt;
    const std::string_view unit = s.starts_with("ms") ? s.substr(0, 2) : s.substr(0, 1);
    std::size_t u = next_unit;
    while (u < std::size(kUnits) && kUnits[u].first != unit) ++u;
    if (u == std::size(kUnits)) return std::nullopt;
    total += value * kUnits[u].second;
    next_unit = u + 1;
    s.remove_prefix(unit.size());
    if (s.empty()) return total;
    if (!number(value)) return std::nullopt;
  }
}

Location to_location(const YAML::Mark& mark) {
  if (mark.line < 0 || mark.column < 0) return {};
  return {mark.line + 1, mark.column + 1};
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Sequence: return node.size() == 0 ? "an empty sequence" : "a sequence";
    case YAML::NodeType::Map: return node.size() == 0 ? "an empty mapping" : "a mapping";
    case YAML::NodeType::Scalar: {
      const std::string& text = node.Scalar();
      if (node.Tag() == "?" && looks_like_number_or_bool(text)) return text.size() <= 40 ? text : quote(text);
      return text.empty() ? "an empty string" : "a string " + quote(text);
    }
    default: return "nothing";
  }
}

std::string one_of(std::span<const std::string_view> words) {
  std::string out;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (i) out += i + 1 == words.size() ? " or " : ", ";
    out += "'" + std::string(words[i]) + "'";
  }
  return out;
}

Whole parse_whole(std::string_view s, int& out) {
  if (!is_digits(s)) return Whole::bad;
  s.remove_prefix(std::min(s.find_first_not_of('0'), s.size() - 1));
  if (s.size() > 10) return Whole::too_large;
  long long value = 0;
  std::from_chars(s.data(), s.data() + s.size(), value);
  if (value > kMaxInt) return Whole::too_large;
  out = static_cast<int>(value);
  return Whole::ok;
}

bool is_host_name(std::string_view host) {
  if (host.empty() || host.front() == '-') return false;
  return std::all_of(host.begin(), host.end(), [](unsigned char c) { return c > 0x20 && c != 0x7F; });
}

std::string too_long(std::string_view what, std::string_view name) {
  return std::string(what) + " " + quote(name) + " is " + std::to_string(name.size()) +
         " characters long; expected at most " + std::to_string(kMaxNameLength) +
         " (it becomes part of file names)";
}

std::optional<std::string> argument_problem(std::string_view word) {
  if (word.find('\0') != std::string_view::npos)
    return std::string("holds a NUL byte (\\0), which no program argument can hold; remove it");
  if (word.size() > kMaxArgLength)
    return "is " + std::to_string(word.size()) + " bytes long; the kernel passes at most " +
           std::to_string(kMaxArgLength) + " bytes in one argument";
  return std::nullopt;
}
const Entry* find(const std::vector<Entry>& entries, std::string_view key) {
  for (const auto& entry : entries) {
    if (entry.key == key) return &entry;
  }
  return nullptr;
}

bool Checker::spend(const YAML::Node& node) {
  const std::size_t cost = 1 + (node.IsScalar() ? node.Scalar().size() : 0);
  exhausted_ = exhausted_ || cost > budget_;
  if (exhausted_) return false;
  budget_ -= cost;
  return true;
}

std::vector<YAML::Node> Checker::items(const YAML::Node& sequence) {
  std::vector<YAML::Node> out;
  for (const auto& item : sequence) {
    if (!spend(item)) break;
    out.push_back(item);
  }
  return out;
}

std::vector<Entry> Checker::entries(const YAML::Node& map, Location map_loc, const std::string& path,
                                    std::span<const std::string_view> known,
                                    std::span<const Elsewhere> elsewhere) {
  std::vector<Entry> out;
  std::map<std::string, Location> seen;
  for (const auto& pair : map) {
    const YAML::Node key = pair.first;
    const YAML::Node value = pair.second;
    if (!spend(key) || !spend(value)) break;
    Location key_loc = to_location(key.Mark());
    if (key_loc.line == 0) key_loc = map_loc;
    if (!key.IsScalar()) {
      error(key_loc, path, expected_text("a key name", key));
      continue;
    }
    const std::string& name = key.Scalar();
    if (name == "<<" && key.Tag() == "?") {
      error(key_loc, path, "YAML merge keys ('<<') are not supported; write the keys out");
      continue;
    }
    auto [first, fresh] = seen.emplace(name, key_loc);
    if (!fresh) {
      error(key_loc, path,
            "duplicate key " + quote(name) + " (first at line " + std::to_string(first->second.line) +
                "); YAML keeps only one of them");
      continue;
    }
    if (!known.empty() && std::find(known.begin(), known.end(), name) == known.end()) {
      unknown_key(key_loc, path, name, known, elsewhere);
      continue;
    }
    Location loc = value.IsNull() ? key_loc : to_location(value.Mark());
    if (loc.line == 0) loc = key_loc;
    out.push_back({name, value, key_loc, loc, child(path, name)});
  }
  return out;
}

void Checker::unknown_key(Location loc, const std::string& path, const std::string& key,
                          std::span<const std::string_view> known, std::span<const Elsewhere> elsewhere) {
  for (const auto& e : elsewhere) {
    if (e.key == key) {
      error(loc, path, "key " + quote(key) + " does not belong here; put it " + std::string(e.where));
      return;
    }
  }
  std::vector<std::string> candidates(known.begin(), known.end());
  if (auto match = closest_match(key, candidates)) {
    error(loc, path, "unknown key " + quote(key) + "; did you mean '" + *match + "'?");
  } else {
    error(loc, path, "unknown key " + quote(key) + "; expected one of: " + join(candidates, ", "));
  }
}

bool Checker::one_or_more(const Entry& e, std::vector<Entry>& out) {
  if (e.value.IsScalar()) {
    out.push_back(e);
    return true;
  }
  if (!e.value.IsSequence()) return false;
  for (const YAML::Node& item : items(e.value)) {
    Location loc = to_location(item.Mark());
    out.push_back({"", item, e.key_loc, loc.line ? loc : e.loc, e.path});
  }
  return true;
}

std::optional<std::string> Checker::string(const Entry& e, std::string_view what) {
  if (e.value.IsScalar()) return e.value.Scalar();
  expected(e, what);
  return std::nullopt;
}

// `word` ("auto", "all") is accepted as nullopt-with-success by the callers,
// which check for it first; here it only shapes the message.
std::optional<int> Checker::count(const Entry& e, std::string_view what, std::string_view word,
                                  bool allow_zero) {
  int value = 0;
  Whole status = e.value.IsScalar() ? parse_whole(e.value.Scalar(), value) : Whole::bad;
  if (status == Whole::ok && (value > 0 || allow_zero)) return value;
  std::string expect = std::string(what);
  if (!word.empty()) expect = "'" + std::string(word) + "' or " + expect;
  if (status == Whole::too_large)
    expect = std::string(allow_zero ? "a whole number" : "a positive whole number") + " up to " +
             std::to_string(kMaxInt);
  expected(e, expect);
  return std::nullopt;
}

std::optional<bool> Checker::boolean(const Entry& e) {
  if (e.value.IsScalar()) {
    const std::string& s = e.value.Scalar();
    if (s == "true" || s == "True" || s == "TRUE") return true;
    if (s == "false" || s == "False" || s == "FALSE") return false;
  }
  expected(e, "true or false");
  return std::nullopt;
}

// A string split into words as sh does, or a list of strings.
std::optional<std::vector<std::string>> Checker::words(const Entry& e, std::string_view what,
                                                       bool allow_empty) {
  std::vector<std::string> out;
  if (e.value.IsScalar()) {
    std::string problem;
    auto split = split_shell_words(e.value.Scalar(), &problem);
    if (!split) {
      error(e.loc, e.path,
            "cannot split into words: " + problem + "; fix the quoting or write a list of words");
      return std::nullopt;
    }
    out = std::move(*split);
  } else if (e.value.IsSequence()) {
    bool ok = true;
    for (const YAML::Node& item : items(e.value)) {
      if (!item.IsScalar()) {
        Location loc = to_location(item.Mark());
        error(loc.line ? loc : e.loc, e.path, expected_text("a word (a string)", item));
        ok = false;
      } else if (item.Tag() == "tag:yaml.org,2002:binary") {
        // A word that is not UTF-8 (a spec is), in base64: what flowrun init
        // writes for such an argument (spec_word).
        YAML::Binary bytes;
        if (YAML::convert<YAML::Binary>::decode(item, bytes)) {
          out.emplace_back(reinterpret_cast<const char*>(bytes.data()), bytes.size());
        } else {
          Location loc = to_location(item.Mark());
          error(loc.line ? loc : e.loc, e.path, "a !!binary word is not valid base64");
          ok = false;
        }
      } else {
        out.push_back(item.Scalar());
      }
    }
    if (!ok) return std::nullopt;
  } else {
    expected(e, what);
    return std::nullopt;
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (auto problem = argument_problem(out[i])) {
      error(e.loc, e.path, "word " + std::to_string(i + 1) + " " + *problem);
      return std::nullopt;
    }
  }
  if (out.empty() && !allow_empty) {
    expected(e, what);
    return std::nullopt;
  }
  return out;
}

std::optional<std::string> Checker::directory(const Entry& e, const std::string& base) {
  auto text = string(e, "a directory path");
  if (!text) return std::nullopt;
  if (text->empty() || text->find('\0') != std::string::npos || text->find('\n') != std::string::npos) {
    expected(e, "a directory path");
    return std::nullopt;
  }
  std::string out = (std::filesystem::path(base) / *text).lexically_normal().string();
  if (out.size() > 1 && out.back() == '/') out.pop_back();
  // chdir() would fail with ENAMETOOLONG only once the step starts.
  for (const auto& part : std::filesystem::path(out)) {
    if (part.native().size() > kMaxFileNameLength) {
      error(e.loc, e.path,
            "the directory path's part " + quote(part.native()) + " is " +
                std::to_string(part.native().size()) + " bytes long; a file name holds at most " +
                std::to_string(kMaxFileNameLength));
      return std::nullopt;
    }
  }
  if (out.size() >= kMaxPathLength) {
    error(e.loc, e.path,
          "the directory path is " + std::to_string(out.size()) + " bytes long; expected fewer than " +
              std::to_string(kMaxPathLength));
    return std::nullopt;
  }
  return out;
}

std::optional<double> Checker::duration(const Entry& e) {
  std::optional<double> seconds;
  if (e.value.IsScalar()) seconds = parse_duration(e.value.Scalar());
  if (seconds && *seconds > kMaxTimeoutS) {
    expected(e, "a duration up to 365d");
  } else if (seconds && *seconds > 0) {
    return seconds;
  } else {
    expected(e, "a positive duration: seconds (90) or a string like '90s', '30m', '1h30m' or '2d'");
  }
  return std::nullopt;
}

EnvList Checker::env(const Entry& e) {
  EnvList out;
  if (e.value.IsNull()) return out;
  if (!e.value.IsMap()) {
    expected(e, "a mapping of variable names to values");
    return out;
  }
  for (const Entry& var : entries(e.value, e.loc, e.path, {}, {})) {
    if (!is_env_name(var.key)) {
      error(var.key_loc, e.path,
            "invalid variable name " + quote(var.key) +
                "; expected letters, digits and '_', not starting with a digit");
      continue;
    }
    if (const ContractVariable* reserved = find_contract_variable(var.key);
        reserved && !reserved->user_may_set) {
      std::string instead = "remove it from env";
      if (var.key == "CUDA_VISIBLE_DEVICES") instead = "select GPUs with parallel.gpus";
      if (var.key == "TORCHELASTIC_MAX_RESTARTS") instead = "set parallel.max_restarts";
      if (var.key == "ROLE_NAME") instead = "set parallel.role";
      if (var.key == "TORCHELASTIC_RUN_ID") instead = "set parallel.job_id";
      error(var.key_loc, var.path, "flowrun sets " + var.key + " for every worker; " + instead);
      continue;
    }
    if (var.value.IsNull()) {
      out.emplace_back(var.key, "");
    } else if (var.value.IsScalar()) {
      // A NUL would end the variable where it stands (and, sent to another
      // node, start a variable of its own); the kernel refuses an entry longer
      // than kMaxArgLength, so the worker would never start.
      const std::string& value = var.value.Scalar();
      if (value.find('\0') != std::string::npos)
        error(var.loc, var.path,
              "the value of " + var.key +
                  " holds a NUL byte (\\0), which no environment variable can hold; "
                  "remove it");
      else if (var.key.size() + 1 + value.size() > kMaxArgLength)
        error(var.loc, var.path,
              var.key + "=VALUE is " + std::to_string(var.key.size() + 1 + value.size()) +
                  " bytes long; the kernel passes at most " + std::to_string(kMaxArgLength) +
                  " bytes in one variable");
      else
        out.emplace_back(var.key, value);
    } else {
      expected(var, "a value (a string, number or boolean)");
    }
  }
  return out;
}

}  // namespace flowrun::spec_detail
