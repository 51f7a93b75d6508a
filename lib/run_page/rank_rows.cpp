// A parallel step's ranks as rows of the page. One row per rank is readable
// up to a few dozen; for 1,024 ranks the person looks for the few that ended
// otherwise, so past kFoldAbove rows each node's ordinary ranks become one
// folded row and the odd ones (culprit, failed, lost, or alone in their
// stack group) keep rows of their own, first under their node.
#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <set>

#include "page_parts.h"

namespace flowrun::page {

namespace {

// One rank across the step's attempts.
struct RankLine {
  int rank = -1;
  std::string node;
  std::vector<std::pair<const AttemptPicture*, const RankBar*>> bars;  // by attempt
  bool odd = false;
};

bool odd_end(BarEnd end) { return end == BarEnd::culprit || end == BarEnd::failed || end == BarEnd::lost; }

bool was_culprit(const RankLine& line) {
  return std::any_of(line.bars.begin(), line.bars.end(), [](const auto& ab) { return ab.second->culprit; });
}

// Ranks that stand alone in a stack group while others share one: the rank
// that is elsewhere when its peers wait in a collective.
std::set<int> odd_in_stacks(const StepPicture& step) {
  std::set<int> odd;
  for (const auto& a : step.attempts) {
    if (a.stacks.size() < 2) continue;
    for (const auto& g : a.stacks)
      if (g.ranks.size() == 1 && g.missing.empty()) odd.insert(g.ranks.front());
  }
  return odd;
}

std::vector<RankLine> rank_lines(const StepPicture& step) {
  std::map<int, RankLine> by_rank;
  const std::set<int> stack_odd = odd_in_stacks(step);
  for (const auto& a : step.attempts) {
    for (const auto& b : a.bars) {
      RankLine& line = by_rank[b.rank];
      line.rank = b.rank;
      line.node = b.node;  // the last attempt's node: a spare's ranks sit under the spare
      line.bars.emplace_back(&a, &b);
      line.odd = line.odd || odd_end(b.end) || b.culprit || stack_odd.count(b.rank) > 0;
    }
  }
  std::vector<RankLine> lines;
  for (auto& [rank, line] : by_rank) lines.push_back(std::move(line));
  return lines;
}

// "0-3, 5, 7-9"
std::string rank_ranges(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") +
           (j == i ? std::to_string(ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]));
    i = j + 1;
  }
  return out;
}

std::string attempt_tip(const AttemptPicture& a, const RankBar& b, const Axis& axis) {
  std::string tip =
      fmt::format("attempt {}: rank {} {} ({})", a.restart_count, b.rank, b.how, bar_end_name(b.end));
  if (b.start_ns > 0) tip += ", from " + axis.offset(b.start_ns);
  if (b.start_ns > 0 && b.end_ns > 0) tip += ", " + span_text(b.end_ns - b.start_ns);
  if (b.stalled) tip += ", stalled";
  return tip;
}

// The worst end among a rank's attempts names its row's colour: the last
// attempt's end, unless an earlier one was odd.
BarEnd row_end(const RankLine& line) {
  for (const auto& [a, b] : line.bars)
    if (odd_end(b->end)) return b->end;
  return line.bars.back().second->end;
}

std::string stderr_block(const RankBar& b) {
  if (b.last_stderr.empty()) return "<p class=\"quiet\">its stderr is empty</p>";
  std::string out =
      fmt::format("<pre class=\"stderr\" title=\"last {} lines of stderr\">", b.last_stderr.size());
  for (const auto& line : b.last_stderr) out += esc(line) + "\n";
  return out + "</pre>";
}

// What a rank's row opens to: per attempt, how it ended, when, its last
// stderr lines and where its logs are.
std::string rank_details(const RankLine& line, const Axis& axis) {
  std::string out = "<div class=\"det\">";
  for (const auto& [a, b] : line.bars) {
    out += fmt::format("<div class=\"att\"><b>attempt {}</b> on {}: <span class=\"how k-{}\">{}</span> ({})",
                       a->restart_count, esc(b->node.empty() ? "?" : b->node), bar_end_name(b->end),
                       esc(b->how), bar_end_name(b->end));
    if (b->start_ns > 0) out += ", started " + axis.offset(b->start_ns);
    if (b->start_ns > 0 && b->end_ns > 0) out += ", ran " + span_text(b->end_ns - b->start_ns);
    if (b->stalled) out += ", <b>stalled</b> (silent past the stall timeout)";
    out += stderr_block(*b);
    out += fmt::format("<p class=\"logs\">logs: <code>{}</code> <code>{}</code></p></div>",
                       esc(b->stderr_log), esc(b->stdout_log));
  }
  return out + "</div>";
}

std::string track(const RankLine& line, const Axis& axis) {
  std::string out = "<svg class=\"track\" viewBox=\"0 0 1000 10\" preserveAspectRatio=\"none\">";
  for (const auto& [a, b] : line.bars) {
    // A culprit that ended otherwise (its node lost) keeps its colour and gets the culprit's outline.
    const std::string kind =
        std::string(bar_end_name(b->end)) + (b->culprit && b->end != BarEnd::culprit ? " culprit" : "");
    out += bar_rect(axis, b->start_ns, b->end_ns, kind, attempt_tip(*a, *b, axis));
  }
  return out + "</svg>";
}

std::string rank_row(const std::string& step, const RankLine& line, const Axis& axis) {
  const auto& last = *line.bars.back().second;
  return fmt::format(
      "<details class=\"rank k-{end}{odd}\" id=\"{step}-r{rank}\" data-rank=\"{rank}\" "
      "data-end=\"{end}\"{culprit}>"
      "<summary><span class=\"lbl\">rank {rank}</span>{track}<span class=\"end\">{how}</span></summary>{det}"
      "</details>\n",
      fmt::arg("end", bar_end_name(row_end(line))), fmt::arg("odd", line.odd ? " odd" : ""),
      fmt::arg("culprit", was_culprit(line) ? " data-culprit=\"yes\"" : ""), fmt::arg("step", esc(step)),
      fmt::arg("rank", line.rank), fmt::arg("track", track(line, axis)), fmt::arg("how", esc(last.how)),
      fmt::arg("det", rank_details(line, axis)));
}

// Several ordinary ranks of one node as one row: per attempt one bar from the
// first start to the last end, coloured as most of them ended.
std::string folded_row(const std::string& step, const std::vector<const RankLine*>& lines, const Axis& axis) {
  std::vector<int> ranks;
  std::map<const AttemptPicture*, std::pair<std::int64_t, std::int64_t>> spans;
  std::map<const AttemptPicture*, std::map<BarEnd, int>> ends;
  std::map<std::string, int> hows;
  std::vector<const AttemptPicture*> order;
  for (const RankLine* line : lines) {
    ranks.push_back(line->rank);
    for (const auto& [a, b] : line->bars) {
      if (!spans.count(a)) {
        order.push_back(a);
        spans[a] = {b->start_ns, b->end_ns};
      }
      auto& [s, e] = spans[a];
      if (b->start_ns > 0 && (s == 0 || b->start_ns < s)) s = b->start_ns;
      if (e != 0 && (b->end_ns == 0 || b->end_ns > e)) e = b->end_ns;  // one still running keeps it open
      ++ends[a][b->end];
    }
    ++hows[line->bars.back().second->how];
  }
  std::string svg = "<svg class=\"track\" viewBox=\"0 0 1000 10\" preserveAspectRatio=\"none\">";
  BarEnd row = BarEnd::ok;
  for (const AttemptPicture* a : order) {
    const auto& counts = ends[a];
    row = std::max_element(counts.begin(), counts.end(), [](auto& x, auto& y) {
            return x.second < y.second;
          })->first;
    std::string tip = fmt::format("attempt {}: ranks {}:", a->restart_count, rank_ranges(ranks));
    for (const auto& [end, n] : counts) tip += fmt::format(" {} {}", n, bar_end_name(end));
    svg += bar_rect(axis, spans[a].first, spans[a].second, bar_end_name(row), tip);
  }
  svg += "</svg>";
  std::string summary;
  for (const auto& [how, n] : hows)
    summary += fmt::format("{}{} {}", summary.empty() ? "" : ", ", n, esc(how));
  std::string det =
      "<div class=\"det\"><table class=\"folded\"><tr><th>rank</th><th>ended</th><th>last stderr line</th>"
      "<th>stderr log</th></tr>";
  for (const RankLine* line : lines) {
    const RankBar& b = *line->bars.back().second;
    det += fmt::format(
        "<tr id=\"{}-r{}\"><td>{}</td><td><span class=\"how "
        "k-{}\">{}</span></td><td><code>{}</code></td><td><code>{}</code></td></tr>",
        esc(step), line->rank, line->rank, bar_end_name(b.end), esc(b.how),
        esc(b.last_stderr.empty() ? "" : b.last_stderr.back()), esc(b.stderr_log));
  }
  det += "</table></div>";
  return fmt::format(
      "<details class=\"rank fold k-{}\" data-ranks=\"{}\" data-count=\"{}\" data-end=\"{}\"><summary>"
      "<span class=\"lbl\">ranks {} ({})</span>{}<span class=\"end\">{}</span></summary>{}</details>\n",
      bar_end_name(row), rank_ranges(ranks), ranks.size(), bar_end_name(row), rank_ranges(ranks),
      ranks.size(), svg, summary, det);
}

}  // namespace

std::string rank_rows_html(const StepPicture& step, const Axis& axis) {
  const std::vector<RankLine> lines = rank_lines(step);
  const bool fold = lines.size() > kFoldAbove;
  // Nodes in the order of their first rank.
  std::vector<std::string> nodes;
  std::map<std::string, std::vector<const RankLine*>> by_node;
  for (const auto& line : lines) {
    if (!by_node.count(line.node)) nodes.push_back(line.node);
    by_node[line.node].push_back(&line);
  }
  std::string out =
      fmt::format("<div class=\"ranks\" data-step=\"{}\" data-rank-count=\"{}\" data-folded=\"{}\">\n",
                  esc(step.name), lines.size(), fold ? "yes" : "no");
  for (const auto& node : nodes) {
    const auto& members = by_node[node];
    std::vector<int> ranks;
    for (const RankLine* l : members) ranks.push_back(l->rank);
    out += fmt::format(
        "<div class=\"node\" data-node=\"{}\"><div class=\"node-h\">node {} &middot; {} {}</div>\n",
        esc(node), esc(node.empty() ? "?" : node), ranks.size() == 1 ? "rank" : "ranks", rank_ranges(ranks));
    std::vector<const RankLine*> ordinary;
    for (const RankLine* l : members) {
      if (fold && !l->odd)
        ordinary.push_back(l);
      else
        out += rank_row(step.name, *l, axis);
    }
    if (ordinary.size() == 1) out += rank_row(step.name, *ordinary.front(), axis);
    if (ordinary.size() > 1) out += folded_row(step.name, ordinary, axis);
    out += "</div>\n";
  }
  return out + "</div>\n";
}

}  // namespace flowrun::page
