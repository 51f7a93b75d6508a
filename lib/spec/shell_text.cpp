// Lexing shell text around flowrun's templates (shell_text.h).
//
// The lexer follows what decides how a shell reads a character: quotes,
// backslashes, `$(...)` and backquote bodies, `${...}`, arithmetic, comments
// and here-documents. It does not parse commands. Where that is not enough to
// know the context for certain (a `case` inside `$(...)`, whose patterns end
// in an unmatched `)`; a quote inside `${...}`, which sh and bash read
// differently; a backquote that closes inside a nested construct), it notes
// why, and every template after that point is refused rather than guessed at.

#include "flowrun/shell_text.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "flowrun/path.h"
#include "flowrun/util.h"

namespace flowrun {

namespace spec_detail {
bool is_step_name(std::string_view name);             // placeholders.cpp
std::string_view unversioned(std::string_view name);  // shell_words.cpp
}  // namespace spec_detail

namespace {

constexpr std::size_t npos = std::string_view::npos;

// What the lexer is inside of. `top` is the script itself; `cmd` a `$(...)`,
// `<(...)` or `>(...)` body; `back` a backquote body without backslashes.
enum class Frame { top, cmd, back, dq, locale_dq, param, arith, arith_bracket };

// The words so far of the command a script frame is in, as far as they
// matter here: a shell it starts whose script is the word being written
// (`bash -c "..."`, `srun sh -euc '...'`), or a command that hands its words
// to a shell again (`eval`, `ssh`). There a quoted value would be read a
// second time, by a shell flowrun does not see.
struct Command {
  enum class State { words, shell_options, after_script } state = State::words;
  bool options_done = false;  // after `--`
  bool dash_c = false;
  bool takes_next = false;  // an -o or -O takes the next word
  std::string rereads;      // "eval", "ssh": that command
  // A builtin that takes variable names (unset, read, declare, local, let):
  // bash evaluates a name's subscript, a[$(cmd)], as arithmetic. Only a
  // declaration's value (local V=...) is safe, unless an option makes it an
  // integer, a reference or an array (-i, -n, -a, -A).
  std::string names;
  bool typed = false;
  std::string first;  // the command's first word
};

struct Open {
  Open(Frame k, std::size_t e = npos, int d = 0) : kind(k), end(e), depth(d) {}
  Frame kind;
  std::size_t end = npos;   // back: the offset of its closing backquote
  int depth = 0;            // cmd: '(' open in it; arith: '(' (or '[') open
  std::size_t word = npos;  // script frames: where the current word started
  // A redirection's target: the next word's (after_redirect), the current
  // word's (word_redirect). A here-string's is the command's input.
  enum class Redirect { none, file, here_string };
  Redirect after_redirect = Redirect::none;
  Redirect word_redirect = Redirect::none;
  Command command;  // script frames
};

bool is_shell_name(std::string_view name) {
  name = spec_detail::unversioned(name);
  static constexpr std::string_view kShells[] = {"sh",   "bash", "dash", "zsh",  "ksh",    "ksh93", "mksh",
                                                 "lksh", "ash",  "yash", "posh", "rbash",  "csh",   "tcsh",
                                                 "fish", "nu",   "pwsh", "rc",   "elvish", "xonsh"};
  return std::find(std::begin(kShells), std::end(kShells), name) != std::end(kShells);
}

// One more word of a command, its quotes and backslashes dropped.
void note_word(Command& c, std::string_view raw) {
  std::string word;
  for (char ch : raw) {
    if (ch != '\'' && ch != '"' && ch != '\\') word += ch;
  }
  const std::string_view name = base_name(word);
  if (c.first.empty()) c.first = word;
  if ((c.first == "test" || c.first == "[" || c.first == "[[") && (word == "-v" || word == "-R"))
    c.names = c.first;
  if (c.state == Command::State::words) {
    if (is_shell_name(name)) c.state = Command::State::shell_options;
    if (name == "eval" || name == "ssh" || name == "su" || name == "watch" || name == "alias" ||
        name == "trap")
      c.rereads = name;
    if (name == "unset" || name == "read" || name == "let" || name == "declare" || name == "typeset" ||
        name == "local" || name == "readonly" || name == "export")
      c.names = name;
    if (!c.names.empty() && word.size() >= 2 && (word[0] == '-' || word[0] == '+') &&
        word.find_first_of("inaA") != std::string::npos)
      c.typed = true;
    return;
  }
  if (c.state != Command::State::shell_options) return;
  if (c.takes_next) {
    c.takes_next = false;
    return;
  }
  if (!c.options_done) {
    if (word == "--" || word == "-") {
      c.options_done = true;
      return;
    }
    if (word.starts_with("--")) {
      c.takes_next = word == "--rcfile" || word == "--init-file";
      return;
    }
    if (word.size() >= 2 && (word[0] == '-' || word[0] == '+')) {
      for (char letter : std::string_view(word).substr(1)) {
        if (letter == 'c' && word[0] == '-') c.dash_c = true;
        if (letter == 'o' || letter == 'O') c.takes_next = true;
      }
      return;
    }
  }
  c.state = Command::State::after_script;
}

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// How to write a refused template instead; %T stands for the template.
constexpr std::string_view kAssign =
    "assign it to a variable first, outside any quotes (V=%T), and use \"$V\" there";
constexpr std::string_view kNumber =
    "assign it to a variable first, outside any quotes (V=%T), check that it is a number, and use $V there";
constexpr std::string_view kHereDoc =
    "assign it to a variable first, outside any quotes (V=%T), and use $V in the body";
constexpr std::string_view kUnsure =
    "write that part another way, or assign the value to a variable before it, outside any quotes (V=%T), "
    "and "
    "use \"$V\"";

bool is_blank(char c) { return c == ' ' || c == '\t'; }

bool is_operator(char c) { return std::string_view(";&|()<>").find(c) != npos; }

// The length of the flowrun template at `at`, or 0.
std::size_t template_at(std::string_view s, std::size_t at) {
  constexpr std::string_view kArgs = "${args}", kSteps = "${steps.", kTail = ".outputs}";
  const std::string_view rest = s.substr(std::min(at, s.size()));
  if (rest.starts_with(kArgs)) return kArgs.size();
  if (!rest.starts_with(kSteps)) return 0;
  const std::size_t end = rest.find(kTail, kSteps.size());
  if (end == npos || !spec_detail::is_step_name(rest.substr(kSteps.size(), end - kSteps.size()))) return 0;
  return end + kTail.size();
}

// An assignment word so far: NAME= or NAME+= (NAME[...]= too).
bool is_assignment(std::string_view word) {
  std::size_t i = 0;
  if (word.empty() || (word[0] >= '0' && word[0] <= '9')) return false;
  while (i < word.size() && is_name_char(word[i])) ++i;
  if (i == 0) return false;
  if (i < word.size() && word[i] == '[') {
    const std::size_t close = word.find(']', i);
    if (close == npos) return false;
    i = close + 1;
  }
  if (i < word.size() && word[i] == '+') ++i;
  return i < word.size() && word[i] == '=';
}

// NAME[ with its ']' still to come: an indexed array's subscript, which bash
// evaluates as arithmetic (a[$(cmd)] runs cmd).
bool in_subscript(std::string_view word) {
  std::size_t i = 0;
  while (i < word.size() && is_name_char(word[i])) ++i;
  return i > 0 && i < word.size() && word[i] == '[' && word.find(']', i) == npos;
}

class Lexer {
 public:
  // `literal`: the offsets in `s` of each `${` that flowrun's escape made
  // plain text (scan_shell_text); no template starts there.
  Lexer(std::string_view s, const std::vector<bool>& literal) : s_(s), literal_(literal) {
    stack_.push_back({Frame::top});
  }
  ShellScan run();

 private:
  Open& top() { return stack_.back(); }
  void push(Open frame);
  void pop();
  bool script_frame() const {
    const Frame k = stack_.back().kind;
    return k == Frame::top || k == Frame::cmd || k == Frame::back;
  }
  std::size_t limit() const;  // the innermost backquote body's end, or the text's
  void unsure(std::string why) {
    if (!unsure_) unsure_ = std::move(why);
  }
  void refuse(std::size_t at, std::string_view reason, std::string_view fix);
  bool refused_by_command(std::size_t at, const Open& frame);
  void start_word() {
    Open& f = top();
    if (f.word != npos) return;
    f.word = i_;
    f.word_redirect = f.after_redirect;
    f.after_redirect = Open::Redirect::none;
  }
  void end_word();
  void end_command();  // at ; & | ( ) and newline
  void place(std::size_t at, std::size_t length, ShellContext context);
  void refuse_templates(std::size_t from, std::size_t to, std::string_view reason, std::string_view fix);

  void step();
  void script_char();
  void dq_char();
  void param_char();
  void arith_char();
  void dollar();
  void single_quoted();
  void backquote();
  void comment();
  void here_document();
  void newline();
  void close_back();

  std::string_view s_;
  const std::vector<bool>& literal_;
  // template_at, but not where the escape made the `${` plain text.
  std::size_t tmpl(std::size_t at) const {
    return at < literal_.size() && literal_[at] ? 0 : template_at(s_, at);
  }
  std::size_t i_ = 0;
  std::vector<Open> stack_;
  // Kept as the stack changes, so that neither a character nor a template
  // looks through the whole stack: the open backquote bodies' ends, and how
  // many frames of each kind that refuses a template are open.
  std::vector<std::size_t> back_ends_;
  int params_ = 0, ariths_ = 0, locales_ = 0;
  ShellScan scan_;
  std::optional<std::string> unsure_;  // why the lexer can no longer be sure
  struct Pending {
    std::string delimiter;
    bool strip_tabs;
    std::size_t frames;  // the stack's size where it was written
  };
  std::vector<Pending> here_docs_;
};

std::size_t Lexer::limit() const { return back_ends_.empty() ? s_.size() : back_ends_.back(); }

int* counter_of(Frame kind, int& params, int& ariths, int& locales) {
  switch (kind) {
    case Frame::param: return &params;
    case Frame::arith:
    case Frame::arith_bracket: return &ariths;
    case Frame::locale_dq: return &locales;
    default: return nullptr;
  }
}

void Lexer::push(Open frame) {
  if (frame.kind == Frame::back) back_ends_.push_back(frame.end);
  if (int* n = counter_of(frame.kind, params_, ariths_, locales_)) ++*n;
  stack_.push_back(frame);
}

void Lexer::pop() {
  const Frame kind = stack_.back().kind;
  if (kind == Frame::back) back_ends_.pop_back();
  if (int* n = counter_of(kind, params_, ariths_, locales_)) --*n;
  stack_.pop_back();
}

void Lexer::place(std::size_t at, std::size_t length, ShellContext context) {
  ShellTemplate t{at, length, context, static_cast<int>(back_ends_.size()), false};
  if (params_)
    return refuse(at, "inside the shell's ${...}, whose quoting sh and bash read differently", kAssign);
  if (ariths_)
    return refuse(
        at, "in arithmetic ($((...)), ((...)) or $[...]), where bash runs a value's $(...) as a command",
        kNumber);
  if (locales_)
    return refuse(at, "inside $\"...\", which bash may replace by a translation", "write \"...\" instead");
  if (unsure_) return refuse(at, *unsure_, kUnsure);
  // The script frame whose word holds the template (below a "..." frame).
  auto frame = stack_.rbegin();
  while (frame->kind == Frame::dq) ++frame;
  const Command& command = frame->command;
  if (frame->word_redirect == Open::Redirect::here_string &&
      ((command.state != Command::State::words && !command.dash_c) || !command.rereads.empty()))
    return refuse(at, "in a here-string that a shell reads as its script",
                  "pass it to that shell as an argument instead (bash -s %T, and \"$@\" in the script)");
  // A redirection's target is a file name or input, not one of the command's words.
  if (frame->word_redirect == Open::Redirect::none && refused_by_command(at, *frame)) return;
  if (context == ShellContext::unquoted && top().word != npos) {
    const std::string_view word = s_.substr(top().word, at - top().word);
    if (in_subscript(word))
      return refuse(at, "in an array subscript (NAME[...]), which bash evaluates as arithmetic", kNumber);
    t.one_word = is_assignment(word) || top().word_redirect != Open::Redirect::none;
  }
  scan_.templates.push_back(t);
}

// The command the template's word belongs to, when it reads the value again
// or as a name (Command).
bool Lexer::refused_by_command(std::size_t at, const Open& frame) {
  const Command& command = frame.command;
  const bool assigned = frame.word != npos && is_assignment(s_.substr(frame.word, at - frame.word));
  if (!command.names.empty() && (!assigned || command.typed || command.names == "unset" ||
                                 command.names == "read" || command.names == "let")) {
    refuse(at,
           "in a word of " + command.names +
               ", which bash may evaluate as arithmetic (a name's subscript, an integer, a reference)",
           kNumber);
  } else if (!command.rereads.empty()) {
    refuse(at, "in a word of " + command.rereads + ", which hands it to a shell that reads it once more",
           "assign it to a variable first, outside any quotes (V=%T), and quote it for that shell yourself "
           "(printf %q \"$V\")");
  } else if (command.state == Command::State::shell_options && command.dash_c && !command.takes_next) {
    refuse(
        at, "in the script of a shell that this script starts (sh -c), which reads it once more",
        "pass it to that shell after its script, outside any quotes, and use \"$1\" or \"$@\" in the script "
        "(bash -c '... \"$@\"' bash %T)");
  } else {
    return false;
  }
  return true;
}

void Lexer::refuse(std::size_t at, std::string_view reason, std::string_view fix) {
  if (scan_.refusal) return;
  std::string text = std::string(reason) + "; ";
  const std::size_t mark = fix.find("%T");
  text += mark == npos ? std::string(fix)
                       : std::string(fix.substr(0, mark)) + std::string(s_.substr(at, tmpl(at))) +
                             std::string(fix.substr(mark + 2));
  scan_.refusal = ShellRefusal{at, std::move(text)};
}

void Lexer::refuse_templates(std::size_t from, std::size_t to, std::string_view reason,
                             std::string_view fix) {
  for (std::size_t at = s_.find("${", from); at != npos && at < to; at = s_.find("${", at + 2)) {
    if (tmpl(at)) return refuse(at, reason, fix);
  }
}

void Lexer::end_word() {
  Open& f = top();
  if (f.word == npos) return;
  // A `case` in $(...): its patterns end in a ')' that does not close the
  // $(...), and telling them apart needs a parser. Everything after is unsure.
  if (f.kind == Frame::cmd && s_.substr(f.word, i_ - f.word) == "case")
    unsure("after a 'case' inside $(...), whose patterns' ')' flowrun does not follow");
  if (f.word_redirect == Open::Redirect::none) note_word(f.command, s_.substr(f.word, i_ - f.word));
  f.word = npos;
}

void Lexer::end_command() {
  end_word();
  top().command = {};
  top().after_redirect = Open::Redirect::none;
}

ShellScan Lexer::run() {
  while (i_ < s_.size() && !scan_.refusal) step();
  // A template the walk did not place (one that follows a '$', say) is one
  // the shell does not read as written.
  if (!scan_.refusal) {
    std::size_t placed = 0;
    for (std::size_t at = s_.find("${"); at != npos; at = s_.find("${", at + 2)) {
      if (!tmpl(at)) continue;
      if (placed < scan_.templates.size() && scan_.templates[placed].offset == at) {
        ++placed;
        continue;
      }
      refuse(at, "where the shell does not read it as written", kAssign);
      break;
    }
  }
  if (scan_.refusal) scan_.templates.clear();
  return std::move(scan_);
}

void Lexer::step() {
  // A backquote body ends at its backquote, whatever is open inside it.
  if (i_ == limit()) {
    if (top().kind != Frame::back) unsure("after backquotes that close inside a nested quote or $(...)");
    while (top().kind != Frame::back) pop();
    return close_back();
  }
  switch (top().kind) {
    case Frame::top:
    case Frame::cmd:
    case Frame::back: return script_char();
    case Frame::dq:
    case Frame::locale_dq: return dq_char();
    case Frame::param: return param_char();
    case Frame::arith:
    case Frame::arith_bracket: return arith_char();
  }
}

void Lexer::close_back() {
  if (!here_docs_.empty()) unsure("after a here-document inside backquotes");
  pop();
  ++i_;
}

void Lexer::script_char() {
  const char c = s_[i_];
  const char next = i_ + 1 < s_.size() ? s_[i_ + 1] : '\0';
  if (c == '\\') {
    if (tmpl(i_ + 1))
      return refuse(i_ + 1,
                    "right after a backslash, which makes the shell read its '$' as a plain character",
                    "remove the backslash: flowrun quotes the value");
    // A line continuation is removed before the shell reads anything else,
    // so one between two characters joins them (`$\<newline>(`, `ca\<newline>se`).
    if (next == '\n' && i_ > 0 && i_ + 2 < s_.size() &&
        !std::isspace(static_cast<unsigned char>(s_[i_ - 1])) &&
        !std::isspace(static_cast<unsigned char>(s_[i_ + 2])))
      unsure("after a line continuation that joins two words");
    if (next != '\n') start_word();
    i_ += 2;
  } else if (c == '\n') {
    end_command();
    newline();
  } else if (is_blank(c)) {
    end_word();
    ++i_;
  } else if (c == '#' && top().word == npos) {
    comment();
  } else if (c == '\'') {
    start_word();
    single_quoted();
  } else if (c == '"') {
    start_word();
    push({Frame::dq});
    ++i_;
  } else if (c == '`') {
    start_word();
    backquote();
  } else if (c == '$') {
    start_word();
    dollar();
  } else if ((c == '<' || c == '>') && next == '(') {
    end_word();  // bash's process substitution: a command list, as $(...)
    push({Frame::cmd});
    i_ += 2;
  } else if (s_.substr(i_, 3) == "<<<") {
    end_word();  // a here-string: the word after it is one word, as a redirection's
    top().after_redirect = Open::Redirect::here_string;
    i_ += 3;
  } else if (c == '<' && next == '<') {
    end_word();
    here_document();
  } else if (c == '(' && next == '(') {
    end_word();
    push({Frame::arith, npos, 2});
    i_ += 2;
  } else if (c == '(' || c == ')') {
    end_command();
    ++i_;
    if (top().kind != Frame::cmd) return;
    if (c == '(') {
      ++top().depth;
    } else if (top().depth > 0) {
      --top().depth;
    } else {
      if (!here_docs_.empty() && here_docs_.back().frames == stack_.size())
        unsure("after a here-document whose $(...) ends on its own line");
      pop();
    }
  } else if (is_operator(c)) {
    if (c == '<' || c == '>') {
      // `2>`: the digits are the redirection's, not a word of the command.
      Open& f = top();
      if (f.word != npos && s_.substr(f.word, i_ - f.word).find_first_not_of("0123456789") == npos)
        f.word = npos;
      end_word();
      f.after_redirect = Open::Redirect::file;
    } else {
      end_command();
    }
    ++i_;
  } else {
    start_word();
    ++i_;
  }
}

void Lexer::dq_char() {
  const char c = s_[i_];
  if (c == '"') {
    pop();
    ++i_;
  } else if (c == '\\') {
    if (tmpl(i_ + 1))
      return refuse(i_ + 1,
                    "right after a backslash, which makes the shell read its '$' as a plain character",
                    "remove the backslash: flowrun quotes the value");
    if (i_ + 1 < s_.size() && s_[i_ + 1] == '\n' && i_ > 0 && s_[i_ - 1] == '$')
      unsure("after a line continuation that joins two words");
    i_ += 2;
  } else if (c == '$') {
    dollar();
  } else if (c == '`') {
    backquote();
  } else {
    ++i_;
  }
}

void Lexer::param_char() {
  const char c = s_[i_];
  if (c == '}') {
    pop();
    ++i_;
  } else if (c == '\\') {
    i_ += 2;
  } else if (c == '$') {
    dollar();
  } else {
    if (c == '\'' || c == '"' || c == '`')
      unsure("after a quote inside the shell's ${...}, which sh and bash read differently");
    ++i_;
  }
}

void Lexer::arith_char() {
  const char c = s_[i_];
  Open& f = top();
  const bool bracket = f.kind == Frame::arith_bracket;
  if (c == (bracket ? '[' : '(')) {
    ++f.depth;
    ++i_;
  } else if (c == (bracket ? ']' : ')')) {
    ++i_;
    if (--f.depth == 0) pop();
  } else if (c == '\\') {
    i_ += 2;
  } else if (c == '$') {
    dollar();
  } else if (c == '"') {
    push({Frame::dq});
    ++i_;
  } else if (c == '\'') {
    single_quoted();
  } else if (c == '`') {
    backquote();
  } else {
    ++i_;
  }
}

// At a '$': a template, or what the shell starts there.
void Lexer::dollar() {
  const bool script = script_frame();
  const std::string_view rest = s_.substr(i_);
  const char next = rest.size() > 1 ? rest[1] : '\0';
  if (const std::size_t length = tmpl(i_)) {
    const bool quoted = top().kind == Frame::dq || top().kind == Frame::locale_dq;
    place(i_, length, quoted ? ShellContext::double_quoted : ShellContext::unquoted);
    i_ += length;
  } else if (rest.starts_with("$((")) {
    push({Frame::arith, npos, 2});
    i_ += 3;
  } else if (next == '(') {
    push({Frame::cmd});
    i_ += 2;
  } else if (next == '[') {
    push({Frame::arith_bracket, npos, 1});
    i_ += 2;
  } else if (next == '{') {
    push({Frame::param});
    i_ += 2;
  } else if (script && next == '"') {
    push({Frame::locale_dq});
    i_ += 2;
  } else if (script && next == '\'') {
    // $'...': backslash escapes of its own (\' among them) until its quote.
    const std::size_t from = i_;
    std::size_t j = i_ + 2;
    bool escaped_quote = false;
    while (j < limit() && s_[j] != '\'') {
      escaped_quote = escaped_quote || s_.substr(j, 2) == "\\'";
      j += s_[j] == '\\' ? 2 : 1;
    }
    // dash, the usual /bin/sh, has no $'...': for it a \' ends the quote there.
    if (escaped_quote) unsure("after a $'...' holding \\', which sh and bash end in different places");
    refuse_templates(from, std::min(j, limit()), "inside $'...', whose backslash escapes no quoting survives",
                     kAssign);
    if (j >= limit()) unsure("after an unterminated $'...'");
    i_ = std::min(j + 1, limit());
  } else if (next == '$' && tmpl(i_ + 1)) {
    refuse(i_ + 1, "right after a '$': the shell reads '$$' (its process id) and then the rest",
           "remove the '$' before it");
  } else if (next != '\0' && std::string_view("$?#@*!-0123456789").find(next) != npos) {
    i_ += 2;
  } else {
    ++i_;
    while (i_ < s_.size() && is_name_char(s_[i_])) ++i_;
  }
}

void Lexer::single_quoted() {
  const std::size_t end = s_.find('\'', i_ + 1);
  const std::size_t stop = std::min(end, limit());
  for (std::size_t at = s_.find("${", i_ + 1); at != npos && at < stop; at = s_.find("${", at + 2)) {
    if (const std::size_t length = tmpl(at)) {
      place(at, length, ShellContext::single_quoted);
      at += length - 2;
    }
  }
  if (end == npos || end >= limit()) {
    unsure("after an unterminated single quote");
    i_ = stop;
    return;
  }
  i_ = end + 1;
}

// A backquote body ends at the first backquote without a backslash before
// it. Inside, the shell first removes the backslash of \\, \` and \$, and
// then reads the rest as a script: without any backslash the body reads as
// written (a Frame::back, lexed in place); with one, or inside double
// quotes (where \" joins in, differently in each shell), it is refused.
void Lexer::backquote() {
  std::size_t end = i_ + 1;
  bool backslash = false;
  while (end < limit() && s_[end] != '`') {
    if (s_[end] == '\\') {
      backslash = true;
      ++end;
    }
    ++end;
  }
  if (end >= limit()) {
    unsure("after an unterminated backquote");
    ++i_;
    return;
  }
  if (backslash || !script_frame()) {
    refuse_templates(
        i_ + 1, end,
        backslash ? "inside backquotes that hold a backslash" : "inside backquotes within double quotes",
        "write $(...) instead of the backquotes");
    i_ = end + 1;
    return;
  }
  push({Frame::back, end});
  ++i_;
}

void Lexer::comment() {
  std::size_t end = std::min(s_.find('\n', i_), limit());
  refuse_templates(i_, end, "in a comment, which a newline in the value would end",
                   "take it out of the comment");
  i_ = end;
}

// `<<WORD` or `<<-WORD`: the body starts after the end of this line.
void Lexer::here_document() {
  i_ += 2;
  bool strip = false;
  if (i_ < s_.size() && s_[i_] == '-') {
    strip = true;
    ++i_;
  }
  while (i_ < limit() && is_blank(s_[i_])) ++i_;
  std::string delimiter;
  while (i_ < limit() && !is_blank(s_[i_]) && s_[i_] != '\n' && !is_operator(s_[i_])) {
    const char c = s_[i_];
    if (c == '$' || c == '`') {
      if (tmpl(i_)) return refuse(i_, "in a here-document's delimiter", "write the delimiter as a word");
      unsure("after a here-document whose delimiter holds '$' or '`'");
    }
    if (c == '\'' || c == '"') {
      const std::size_t close = s_.find(c, i_ + 1);
      if (close == npos || close >= limit()) {
        unsure("after an unterminated here-document delimiter");
        i_ = limit();
        return;
      }
      delimiter += s_.substr(i_ + 1, close - i_ - 1);
      i_ = close + 1;
    } else if (c == '\\' && i_ + 1 < limit()) {
      delimiter += s_[i_ + 1];
      i_ += 2;
    } else {
      delimiter += c;
      ++i_;
    }
  }
  if (delimiter.empty()) unsure("after a here-document without a delimiter");
  here_docs_.push_back({delimiter, strip, stack_.size()});
}

// A newline in a script frame: here-document bodies waiting for it come now.
void Lexer::newline() {
  ++i_;
  if (here_docs_.empty()) return;
  std::vector<Pending> docs;
  docs.swap(here_docs_);
  for (const Pending& doc : docs) {
    if (doc.frames != stack_.size()) unsure("after a here-document whose line ends inside another construct");
    while (i_ < limit()) {
      std::size_t end = std::min(s_.find('\n', i_), limit());
      std::string_view line = s_.substr(i_, end - i_);
      if (doc.strip_tabs) line.remove_prefix(std::min(line.find_first_not_of('\t'), line.size()));
      refuse_templates(i_, end, "in a here-document, whose body has no quoting", kHereDoc);
      i_ = end < s_.size() && end < limit() ? end + 1 : end;
      if (line == doc.delimiter) break;
    }
  }
}

}  // namespace

ShellScan scan_shell_text(std::string_view script) {
  // flowrun's escape (placeholders.cpp): a `$` right before a `${` is dropped,
  // and that `${` is plain text, which the shell then reads as its own.
  std::string text;
  std::vector<std::size_t> source;  // each byte of text: its offset in script
  std::vector<bool> literal;
  for (std::size_t i = 0; i < script.size(); ++i) {
    if (script[i] == '$' && script.substr(i + 1, 2) == "${") {
      literal.resize(text.size() + 1, false);
      literal[text.size()] = true;
      continue;
    }
    text += script[i];
    source.push_back(i);
  }
  ShellScan scan = Lexer(text, literal).run();
  if (scan.refusal)
    scan.refusal->offset =
        scan.refusal->offset < source.size() ? source[scan.refusal->offset] : script.size();
  scan.text = std::move(text);
  return scan;
}

}  // namespace flowrun
