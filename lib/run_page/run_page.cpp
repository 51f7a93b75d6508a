// The page of a run (docs/cli.md "flowrun report"): a header that says how
// the run ended, the flow's steps on the run's time axis, then each step: its
// facts (why it was planned so, outputs, notes, node checks), its attempts
// (restarts and why, lost nodes, spares, world sizes, stacks) and for a
// parallel step its ranks. One file, no network: a CI artifact or a ticket
// attachment must open as it is, years later.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "page_parts.h"

namespace flowrun {

const char* bar_end_name(BarEnd end) {
  switch (end) {
    case BarEnd::ok: return "ok";
    case BarEnd::culprit: return "culprit";
    case BarEnd::failed: return "failed";
    case BarEnd::stopped: return "stopped";
    case BarEnd::lost: return "lost";
    case BarEnd::running: return "running";
  }
  return "running";
}

namespace page {

std::string esc(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      case '\0': out += "\xEF\xBF\xBD"; break;  // U+FFFD: HTML has no NUL
      default: out += c;
    }
  }
  return out;
}

double Axis::x(std::int64_t ns) const {
  const double f = static_cast<double>(ns - t0) / static_cast<double>(std::max<std::int64_t>(t1 - t0, 1));
  return std::clamp(f, 0.0, 1.0) * 1000.0;
}

std::string Axis::offset(std::int64_t ns) const {
  return "+" + span_text(std::max<std::int64_t>(ns - t0, 0));
}

std::string span_text(std::int64_t ns) {
  const double s = static_cast<double>(ns) / 1e9;
  if (s < 10) return fmt::format("{:.3f} s", s);
  if (s < 60) return fmt::format("{:.1f} s", s);
  const auto whole = static_cast<std::int64_t>(s);
  if (whole < 3600) return fmt::format("{}m{:02}s", whole / 60, whole % 60);
  return fmt::format("{}h{:02}m", whole / 3600, whole % 3600 / 60);
}

// A tick every 1, 2 or 5 times a power of ten, so that 4 to 10 fall on the run.
std::string axis_html(const Axis& axis) {
  const double span = static_cast<double>(axis.t1 - axis.t0);
  double step = std::pow(10.0, std::floor(std::log10(std::max(span, 1.0))));
  for (const double f : {0.5, 0.2, 0.1})
    if (span / (step * f * 2) <= 10) step = std::max(step * f, 1.0);
  while (span / step > 10) step *= 2;
  std::string out = fmt::format(
      "<div class=\"axisrow\"><span class=\"lbl\"></span><div class=\"axis\" data-t0-ms=\"{}\" "
      "data-t1-ms=\"{}\">",
      axis.t0 / 1'000'000, axis.t1 / 1'000'000);
  for (double t = 0; t <= span + 0.5; t += step) {
    const double pct = span > 0 ? t / span * 100 : 0;
    out += fmt::format("<span class=\"tick\" style=\"left:{:.2f}%\">{}</span>", pct,
                       "+" + span_text(static_cast<std::int64_t>(t)));
  }
  return out + "</div><span class=\"end\"></span></div>\n";
}

std::string bar_rect(const Axis& axis, std::int64_t start_ns, std::int64_t end_ns, std::string_view kind,
                     std::string_view tooltip) {
  const std::int64_t start = start_ns > 0 ? start_ns : axis.t0;
  const std::int64_t end = end_ns > 0 ? end_ns : axis.t1;
  const double x = axis.x(start);
  const double w = std::max(axis.x(end) - x, 2.0);  // a bar of a millisecond stays visible
  return fmt::format(
      "<rect class=\"bar k-{}\" x=\"{:.1f}\" y=\"1\" width=\"{:.1f}\" height=\"8\" data-start-ms=\"{}\" "
      "data-end-ms=\"{}\"><title>{}</title></rect>",
      kind, std::min(x, 998.0), w, start / 1'000'000, end / 1'000'000, esc(tooltip));
}

}  // namespace page

namespace {

using page::esc;

constexpr std::string_view kStyle = R"(
body{font:14px/1.4 system-ui,sans-serif;margin:1.2em;color:#222;background:#fff}
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.15em;margin:1.2em 0 .3em;border-bottom:1px solid #ddd}
code,pre{font:12px ui-monospace,monospace}pre.stderr{background:#f6f6f6;padding:.4em;margin:.3em 0;white-space:pre-wrap;overflow-wrap:anywhere}
.state{padding:0 .4em;border-radius:3px;color:#fff}.s-succeeded{background:#2e7d32}.s-failed,.s-killed{background:#c62828}.s-running{background:#1565c0}
.live{background:#e3f2fd;padding:.4em;border-left:4px solid #1565c0}.error{color:#c62828}
.legend span{display:inline-block;margin-right:1em}.legend i{display:inline-block;width:1.2em;height:.8em;margin-right:.3em;vertical-align:middle}
.k-ok{--c:#2e7d32}.k-culprit{--c:#c62828}.k-failed{--c:#ef6c00}.k-stopped{--c:#9e9e9e}.k-lost{--c:#6a1b9a}.k-running{--c:#1565c0}
rect.bar{fill:var(--c)}rect.culprit{stroke:#c62828;stroke-width:3}details[data-culprit] .lbl{color:#c62828;font-weight:bold}i.sw{background:var(--c)}details.rank>summary .lbl{border-left:4px solid var(--c);padding-left:.3em}
span.how{color:var(--c);font-weight:bold}
details.rank>summary,.axisrow,.steprow{display:grid;grid-template-columns:11em 1fr 14em;gap:.6em;align-items:center;background:none}
details.rank>summary{cursor:pointer;list-style:none}details.rank>summary:hover{background:#f0f4ff}
details.rank.odd>summary .lbl{font-weight:bold}details.rank.k-culprit>summary .lbl{color:#c62828}
.track{width:100%;height:12px;background:#fafafa;border:1px solid #eee}.axis{position:relative;height:1.3em;border-bottom:1px solid #999}
.tick{position:absolute;font-size:11px;color:#555;transform:translateX(-50%);white-space:nowrap}.tick:first-child{transform:none}
.end{font-size:12px;color:#444;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.node{margin:.4em 0 .6em}.node-h{font-size:12px;color:#555;border-top:1px dashed #ccc;padding-top:.2em}
.det{margin:.2em 0 .6em 11.6em;padding:.3em .6em;border-left:3px solid #ccc}.att{margin-bottom:.5em}
.quiet{color:#777;margin:.2em 0}.facts li,.attempts li{margin:.2em 0}.stackodd{color:#c62828;font-weight:bold}.slow{color:#c62828}
table.folded{border-collapse:collapse;font-size:12px}table.folded td,table.folded th{border-bottom:1px solid #eee;padding:0 .5em;text-align:left}
)";

// Opens the row a link's #fragment names (report.html#train-r3): a link in a
// ticket points at the rank it is about. Nothing from the run is in it.
constexpr std::string_view kScript = R"(
function openTarget(){var id=decodeURIComponent(location.hash.slice(1));if(!id)return;
var el=document.getElementById(id);if(!el)return;var d=el.closest('details');
while(d){d.open=true;d=d.parentElement.closest('details');}el.scrollIntoView();}
window.addEventListener('hashchange',openTarget);openTarget();
)";

std::string run_state_text(const RunPicture& run) {
  std::string text = run.state;
  if (run.exit_code) text += fmt::format(", exit {}", *run.exit_code);
  return text;
}

page::Axis axis_of(const RunPicture& run) {
  page::Axis axis;
  axis.t0 = run.start_ns;
  axis.t1 = run.state == "running" || run.end_ns == 0 ? run.taken_ns : run.end_ns;
  for (const auto& s : run.steps) {
    for (const auto& a : s.attempts) {
      for (const auto& b : a.bars) {
        if (b.start_ns > 0 && (axis.t0 == 0 || b.start_ns < axis.t0)) axis.t0 = b.start_ns;
        axis.t1 = std::max(axis.t1, b.end_ns);
      }
    }
  }
  if (axis.t1 <= axis.t0) axis.t1 = axis.t0 + 1'000'000;
  return axis;
}

std::string header_html(const RunPicture& run, const page::Axis& axis) {
  std::string out = fmt::format(
      "<header><h1>run {} <span class=\"state s-{}\" id=\"run-state\">{}</span></h1>\n"
      "<p>flow <b>{}</b> &middot; flowrun on {} &middot; {} &middot; run directory <code>{}</code></p>\n",
      esc(run.run_id), esc(run.state), esc(run_state_text(run)), esc(run.flow), esc(run.host),
      run.state == "running" ? "running for " + page::span_text(axis.t1 - axis.t0)
                             : "took " + page::span_text(axis.t1 - axis.t0),
      esc(run.run_dir));
  if (run.state == "running")
    out +=
        "<p class=\"live\" id=\"still-running\">This run is still running: the page is a snapshot of what "
        "its "
        "run directory held when it was made. Run <code>flowrun report</code> again for a newer one.</p>\n";
  if (!run.error.empty()) out += "<p class=\"error\">flowrun: error: " + esc(run.error) + "</p>\n";
  out += "<p class=\"legend\">";
  for (const BarEnd e :
       {BarEnd::ok, BarEnd::culprit, BarEnd::failed, BarEnd::stopped, BarEnd::lost, BarEnd::running}) {
    static constexpr const char* kWords[] = {"succeeded",          "culprit (the root cause)",
                                             "failed after it",    "stopped by flowrun",
                                             "lost with its node", "running"};
    out +=
        fmt::format("<span><i class=\"sw k-{}\"></i>{}</span>", bar_end_name(e), kWords[static_cast<int>(e)]);
  }
  return out + "</p></header>\n";
}

const char* outcome_kind(const std::string& outcome) {
  if (outcome == "succeeded") return "ok";
  if (outcome == "failed") return "culprit";
  if (outcome == "stalled" || outcome == "timed_out") return "failed";
  if (outcome == "running" || outcome.empty()) return "running";
  return "stopped";
}

// The flow: one row per step, each attempt a bar.
std::string flow_html(const RunPicture& run, const page::Axis& axis) {
  std::string out = "<section id=\"flow\"><h2>Steps</h2>\n" + page::axis_html(axis);
  for (const auto& s : run.steps) {
    std::string svg = "<svg class=\"track\" viewBox=\"0 0 1000 10\" preserveAspectRatio=\"none\">";
    for (const auto& a : s.attempts) {
      std::int64_t start = a.start_ns, end = a.end_ns;
      for (const auto& b : a.bars) {  // a running attempt has no span of its own yet
        if (start == 0 || (b.start_ns > 0 && b.start_ns < start)) start = b.start_ns;
      }
      const std::string tip = fmt::format("{} attempt {}: {}", s.name, a.restart_count, a.outcome);
      svg += page::bar_rect(axis, start, end, outcome_kind(a.outcome), tip);
    }
    svg += "</svg>";
    std::string state = s.state;
    if (s.exit_code && *s.exit_code != 0) state += fmt::format(" (exit {})", *s.exit_code);
    if (s.attempts.size() > 1) state += fmt::format(", {} attempts", s.attempts.size());
    out += fmt::format(
        "<div class=\"steprow\" data-step=\"{0}\" data-state=\"{1}\"><span class=\"lbl\"><a "
        "href=\"#step-{0}\">{0}</a>"
        "</span>{2}<span class=\"end\">{3}</span></div>\n",
        esc(s.name), esc(s.state), svg, esc(state));
  }
  return out + "</section>\n";
}

std::string list_items(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += "<li>" + esc(item) + "</li>";
  return out;
}

std::string facts_html(const StepPicture& s) {
  std::string out = "<ul class=\"facts\">";
  if (!s.retry.empty()) out += "<li class=\"retry\">" + esc(s.retry) + "</li>";
  out += list_items(s.notes);
  if (!s.outputs.empty()) {
    std::vector<std::string> names;
    for (const auto& o : s.outputs) names.push_back(esc(o));
    std::string collected;
    for (const auto& c : s.collected)
      collected += (collected.empty() ? "" : ", ") + ("<code>" + esc(c) + "</code>");
    out += fmt::format("<li class=\"outputs\">outputs {}: {} in <code>{}/outputs</code></li>",
                       fmt::join(names, ", "),
                       collected.empty() ? "none collected" : "collected " + collected, esc(s.dir));
  }
  for (const auto& c : s.node_checks) {
    if (!c.ok)
      out += "<li class=\"excluded\">node <b>" + esc(c.node) +
             "</b> left out by its node check: " + esc(c.detail) + "</li>";
  }
  const std::size_t checked_ok = static_cast<std::size_t>(std::count_if(
      s.node_checks.begin(), s.node_checks.end(), [](const NodeCheckPicture& c) { return c.ok; }));
  if (checked_ok > 0) out += fmt::format("<li>{} nodes passed their node checks</li>", checked_ok);
  out += "</ul>";
  if (!s.why.empty())
    out +=
        "<details class=\"why\"><summary>why this plan</summary><ul>" + list_items(s.why) + "</ul></details>";
  return out;
}

// The ranks the samples named slow while the attempt ran.
std::string slow_html(const AttemptPicture& a) {
  if (a.slow_ranks.empty()) return "";
  std::vector<std::string> ranks;
  for (const int r : a.slow_ranks) ranks.push_back(std::to_string(r));
  return fmt::format("<div class=\"slow\" data-slow-ranks=\"{}\">the slow rank{}: {} ({})</div>",
                     fmt::join(ranks, ","), ranks.size() == 1 ? "" : "s", fmt::join(ranks, ", "),
                     esc(a.slow_why));
}

std::string stacks_html(const AttemptPicture& a) {
  if (a.stacks.empty()) return "";
  std::size_t total = 0;
  for (const auto& g : a.stacks) total += g.ranks.size();
  std::string out = fmt::format(
      "<div class=\"stacks\">stacks ({}), taken before flowrun stopped the ranks:<ul>", esc(a.stacks_source));
  for (const auto& g : a.stacks) {
    std::vector<std::string> ranks;
    for (const int r : g.ranks) ranks.push_back(std::to_string(r));
    const bool odd = a.stacks.size() > 1 && g.ranks.size() == 1 && g.missing.empty();
    const std::string who = g.ranks.size() == 1 ? "rank " + ranks.front()
                                                : fmt::format("ranks {} ({} of {})", fmt::join(ranks, ", "),
                                                              g.ranks.size(), total);
    out += fmt::format(
        "<li{}>{} {} {}{}</li>", odd ? " class=\"stackodd\" data-odd-rank=\"" + ranks.front() + "\"" : "",
        who, g.ranks.size() == 1 ? "is" : "are",
        g.missing.empty() ? "in <code>" + esc(g.where) + "</code>" : "without a stack: " + esc(g.missing),
        odd ? ": the odd one" : "");
  }
  return out + "</ul></div>";
}

std::string attempts_html(const StepPicture& s) {
  if (s.attempts.empty()) return "";
  std::string out = "<ol class=\"attempts\" start=\"0\">";
  for (const auto& a : s.attempts) {
    std::string line = fmt::format("<li data-attempt=\"{}\" data-world-size=\"{}\"><b>attempt {}</b>: {}",
                                   a.restart_count, a.world_size, a.restart_count, esc(a.outcome));
    if (s.parallel) line += fmt::format(", world size {}", a.world_size);
    if (a.culprit_rank)
      line += fmt::format(", culprit <a href=\"#{}-r{}\">rank {}</a>", esc(s.name), *a.culprit_rank,
                          *a.culprit_rank);
    if (!a.cause.empty()) line += " (" + esc(a.cause) + ")";
    if (!a.exception.empty()) line += ": <code>" + esc(a.exception) + "</code>";
    if (!a.restart_reason.empty())
      line += fmt::format("<br>{}: {}", a.restarted ? "restarted" : "not restarted", esc(a.restart_reason));
    for (const auto& r : a.replaced) line += "<br><span class=\"spare\">" + esc(r) + "</span>";
    if (!a.dropped_nodes.empty())
      line += "<br>went on without " + esc(fmt::format("{}", fmt::join(a.dropped_nodes, ", ")));
    if (!a.added_nodes.empty())
      line += "<br>joined since: " + esc(fmt::format("{}", fmt::join(a.added_nodes, ", ")));
    out += line + slow_html(a) + stacks_html(a) + "</li>";
  }
  return out + "</ol>";
}

std::string step_html(const StepPicture& s, const page::Axis& axis) {
  std::string title = s.state;
  if (s.exit_code) title += fmt::format(", exit {}", *s.exit_code);
  std::string out = fmt::format(
      "<section class=\"step\" id=\"step-{0}\" data-step=\"{0}\" data-state=\"{1}\"><h2>step {0}: {2}</h2>\n",
      esc(s.name), esc(s.state), esc(title));
  out += facts_html(s) + attempts_html(s);
  if (s.parallel && !s.attempts.empty()) {
    out += page::axis_html(axis) + page::rank_rows_html(s, axis);
  } else if (!s.attempts.empty() && !s.attempts.back().bars.empty()) {
    const RankBar& b = s.attempts.back().bars.front();
    out += fmt::format("<p>{} &middot; logs <code>{}</code> <code>{}</code></p>", esc(b.how),
                       esc(b.stderr_log), esc(b.stdout_log));
    if (!b.last_stderr.empty()) {
      out += "<pre class=\"stderr\">";
      for (const auto& l : b.last_stderr) out += esc(l) + "\n";
      out += "</pre>";
    }
  }
  return out + "</section>\n";
}

}  // namespace

std::string format_run_page(const RunPicture& run) {
  const page::Axis axis = axis_of(run);
  std::string out = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width\"><title>flowrun: {} "
      "({})</title><style>{}</style>"
      "</head>\n<body data-run=\"{}\" data-state=\"{}\">\n",
      esc(run.run_id), esc(run.state), kStyle, esc(run.run_id), esc(run.state));
  out += header_html(run, axis) + flow_html(run, axis);
  for (const auto& s : run.steps) out += step_html(s, axis);
  return out + "<script>" + std::string(kScript) + "</script>\n</body></html>\n";
}

}  // namespace flowrun
