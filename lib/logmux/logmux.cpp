#include "flowrun/logmux.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "flowrun/line_fold.h"

#include "ansi.h"

namespace flowrun {

namespace {

// Cyan, yellow, green, magenta, blue, red: the six basic colours that read
// well on both dark and light backgrounds (white and black do not).
constexpr std::array<std::string_view, 6> kRankColors = {"\x1b[36m", "\x1b[33m", "\x1b[32m",
                                                         "\x1b[35m", "\x1b[34m", "\x1b[31m"};
using ansi::kPlainColor;
using ansi::kReset;

bool is_continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

const char* find(const char* from, const char* end, char c) {
  const void* hit = std::memchr(from, c, static_cast<std::size_t>(end - from));
  return hit ? static_cast<const char*>(hit) : end;
}

}  // namespace

std::string log_prefix(std::string_view step, int rank, bool color) {
  std::string tag = "[";
  tag += step;
  if (rank >= 0) {
    tag += " r";
    tag += std::to_string(rank);
  }
  tag += ']';
  if (!color) return tag + ' ';
  std::string_view code =
      rank >= 0 ? kRankColors[static_cast<std::size_t>(rank) % kRankColors.size()] : kPlainColor;
  std::string out;
  out.reserve(code.size() + tag.size() + kReset.size() + 1);
  out += code;
  out += tag;
  out += kReset;
  out += ' ';
  return out;
}

// ---- LineSplitter ----------------------------------------------------------

LineSplitter::LineSplitter(std::string prefix, const LogStyle& style)
    : prefix_(std::move(prefix)),
      max_line_(std::max<std::size_t>(style.max_line, 1)),
      interval_ns_(style.progress_interval_ns) {}

void LineSplitter::feed(std::string_view data, std::int64_t now_ns, std::string& out) {
  if (data.empty()) return;
  now_ns_ = now_ns;
  // One reserve for the common case of lines of 32 bytes or more; shorter
  // lines still work, with the string's usual growth.
  const std::size_t lines_guess = data.size() / 32 + 2;
  out.reserve(out.size() + pending_.size() + data.size() +
              lines_guess * (prefix_.size() + kContinuation.size() + 1));

  const char* p = data.data();
  const char* const end = p + data.size();
  if (saw_cr_) {
    saw_cr_ = false;
    if (*p == '\n') {
      end_line({}, out);
      ++p;
    } else {
      snapshot({}, cr_ns_, out);
    }
  }
  // The next '\r' is found once and reused until passed, so data without any
  // '\r' costs one memchr over it, and each line one memchr for its '\n'.
  const char* cr = find(p, end, '\r');
  while (p < end) {
    const char* nl = find(p, end, '\n');
    while (cr < nl) {
      if (cr + 1 == nl && nl < end) break;  // "\r\n": the line's end, below
      if (cr + 1 == end) {                  // bare or "\r\n"? the next feed says
        hold(std::string_view(p, static_cast<std::size_t>(cr - p)), out);
        saw_cr_ = true;
        cr_ns_ = now_ns;
        return;
      }
      snapshot(std::string_view(p, static_cast<std::size_t>(cr - p)), now_ns, out);
      p = cr + 1;
      cr = find(p, end, '\r');
    }
    if (nl == end) {
      hold(std::string_view(p, static_cast<std::size_t>(end - p)), out);
      return;
    }
    const char* text_end = nl;
    if (cr + 1 == nl) {
      text_end = cr;
      cr = find(nl + 1, end, '\r');
    }
    const std::string_view text(p, static_cast<std::size_t>(text_end - p));
    if (pending_.empty() && !pending_continued_ && !line_cr_ && text.size() <= max_line_) {
      // The common case: a whole line in one feed, two copies. The folder
      // gets it unless it would let it pass straight through (a flood).
      if (folder_ != nullptr && !folder_->passes(source_, now_ns)) {
        folder_->line(source_, false, text, {}, now_ns, out);
        p = nl + 1;
        continue;
      }
      out.append(prefix_);
      out.append(text);
      out.push_back('\n');
    } else {
      end_line(text, out);
    }
    p = nl + 1;
  }
}

void LineSplitter::finish(std::string& out) {
  if (saw_cr_) {
    saw_cr_ = false;
    snapshot({}, cr_ns_, out);
  }
  if (!pending_.empty() || pending_continued_ || line_cr_) end_line({}, out);
}

std::string_view LineSplitter::cut(std::string_view s, std::string& out) {
  while (pending_.size() + s.size() > max_line_) {
    const std::size_t held = pending_.size();
    auto at = [&](std::size_t i) { return i < held ? pending_[i] : s[i - held]; };
    // Back off to the first byte of a UTF-8 character (at most 3 bytes; bytes
    // that are not UTF-8 are cut where they fall).
    std::size_t n = max_line_;
    for (int i = 0; i < 3 && n > 1 && is_continuation_byte(at(n)); ++i) --n;
    if (n <= held) {
      emit(std::string_view(pending_).substr(0, n), {}, pending_continued_, out);
      pending_.erase(0, n);
    } else {
      emit(pending_, s.substr(0, n - held), pending_continued_, out);
      pending_.clear();
      s.remove_prefix(n - held);
    }
    pending_continued_ = true;
  }
  return s;
}

void LineSplitter::emit(std::string_view a, std::string_view b, bool continued, std::string& out) {
  // A flood, or nothing to fold with, passes straight through: the folder
  // is asked inline, not handed each line.
  if (folder_ != nullptr && !folder_->passes(source_, now_ns_)) {
    folder_->line(source_, continued, a, b, now_ns_, out);
    return;
  }
  append_line(out, prefix_, continued, a, b);
}

void LineSplitter::hold(std::string_view s, std::string& out) { pending_.append(cut(s, out)); }

void LineSplitter::snapshot(std::string_view s, std::int64_t at_ns, std::string& out) {
  s = cut(s, out);
  line_cr_ = true;
  if (!pending_.empty() || !s.empty()) {
    if (at_ns - last_progress_ns_ >= interval_ns_) {
      emit(pending_, s, pending_continued_, out);
      last_progress_ns_ = at_ns;
      dropped_.clear();
    } else {
      dropped_.assign(pending_);
      dropped_.append(s);
      dropped_continued_ = pending_continued_;
    }
  }
  pending_.clear();
  pending_continued_ = false;
}

void LineSplitter::end_line(std::string_view s, std::string& out) {
  s = cut(s, out);
  if (!line_cr_ || !pending_.empty() || !s.empty()) {
    emit(pending_, s, pending_continued_, out);
  } else if (!dropped_.empty()) {
    emit(dropped_, {}, dropped_continued_, out);
  }
  pending_.clear();
  pending_continued_ = false;
  line_cr_ = false;
  dropped_.clear();
}

// ---- TailBuffer ------------------------------------------------------------

TailBuffer::TailBuffer(std::size_t lines, std::size_t max_line)
    : lines_(lines), max_line_(std::max<std::size_t>(max_line, 8)), ring_(lines) {}

void TailBuffer::feed(std::string_view data) {
  if (data.empty()) return;
  const char* p = data.data();
  const char* const end = p + data.size();
  // Only the last lines_ lines survive: when `data` holds more, start after
  // the newline that precedes them, as if the lines before had been pushed.
  const char* skip_to = end;
  std::size_t newlines = 0;
  while (newlines <= lines_ && skip_to > p) {
    const void* hit = memrchr(p, '\n', static_cast<std::size_t>(skip_to - p));
    if (!hit) break;
    skip_to = static_cast<const char*>(hit);
    ++newlines;
  }
  if (newlines > lines_) {
    p = skip_to + 1;
    partial_.clear();
    truncated_ = false;
    overwrite_ = false;
  }
  const bool has_cr = std::memchr(p, '\r', static_cast<std::size_t>(end - p)) != nullptr;
  while (p < end) {
    const char* nl = find(p, end, '\n');
    const std::string_view text(p, static_cast<std::size_t>(nl - p));
    if (has_cr) {
      add_segment(text);
    } else {
      if (!text.empty() && overwrite_) {
        partial_.clear();
        truncated_ = false;
        overwrite_ = false;
      }
      append_partial(text);
    }
    if (nl == end) break;
    push_line();
    p = nl + 1;
  }
}

// The pieces of `s` between '\r's: the last non-empty one is what a terminal
// shows last, so it replaces the line; a '\r' after it arms overwrite_.
void TailBuffer::add_segment(std::string_view s) {
  bool cr_after = false;
  while (true) {
    const std::size_t r = s.rfind('\r');
    if (r == std::string_view::npos) {
      if (!s.empty()) {
        if (overwrite_) {
          partial_.clear();
          truncated_ = false;
        }
        append_partial(s);
        overwrite_ = false;
      }
      overwrite_ = overwrite_ || cr_after;
      return;
    }
    if (r + 1 < s.size()) {
      partial_.clear();
      truncated_ = false;
      append_partial(s.substr(r + 1));
      overwrite_ = cr_after;
      return;
    }
    cr_after = true;
    s.remove_suffix(1);
  }
}

void TailBuffer::append_partial(std::string_view s) {
  if (truncated_ || s.empty()) return;
  partial_.append(s.substr(0, max_line_ + 1 - partial_.size()));
  if (partial_.size() <= max_line_) return;
  std::size_t keep = max_line_ - kEllipsis.size();
  for (int i = 0; i < 3 && keep > 0 && is_continuation_byte(partial_[keep]); ++i) --keep;
  partial_.resize(keep);
  partial_.append(kEllipsis);
  truncated_ = true;
}

void TailBuffer::push_line() {
  if (lines_ > 0) {
    ring_[next_].swap(partial_);
    next_ = (next_ + 1) % lines_;
    count_ = std::min(count_ + 1, lines_);
  }
  partial_.clear();
  truncated_ = false;
  overwrite_ = false;
}

std::string TailBuffer::text() const {
  std::string out;
  const std::size_t first = count_ < lines_ ? 0 : next_;
  for (std::size_t i = 0; i < count_; ++i) {
    out.append(ring_[(first + i) % lines_]);
    out.push_back('\n');
  }
  if (!partial_.empty()) {
    out.append(partial_);
    out.push_back('\n');
  }
  return out;
}

}  // namespace flowrun
