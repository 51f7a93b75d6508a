// The pieces format_run_page() is made of, shared by its two sources
// (run_page.cpp: the page, the flow and each step's facts; rank_rows.cpp: a
// step's rank rows, grouped by node and folded past kFoldAbove).
#pragma once

#include <string>
#include <string_view>

#include "flowrun/run_page.h"

namespace flowrun::page {

// Text from a run, made safe inside an element or a quoted attribute.
std::string esc(std::string_view text);

// The run's time axis: every bar and tick of the page maps [t0, t1] onto the
// same width, so that steps and ranks line up.
struct Axis {
  std::int64_t t0 = 0, t1 = 1;
  // A position in the SVG tracks' viewBox (0..1000) and in percent.
  double x(std::int64_t ns) const;
  // "+1.250 s" from the run's start.
  std::string offset(std::int64_t ns) const;
};

// "0.012 s", "12.4 s", "3m05s", "2h04m".
std::string span_text(std::int64_t ns);

// The ticks line above a group of tracks (HTML, so that the labels are not
// stretched with the tracks).
std::string axis_html(const Axis& axis);

// One rect of a track, coloured by `kind`, with a tooltip; `start_ns` and
// `end_ns` ride along as data-start-ms / data-end-ms (unix ms), so that a
// reader (or a test) can check them against results.json. An end of 0 draws
// to the axis' end (a bar still running).
std::string bar_rect(const Axis& axis, std::int64_t start_ns, std::int64_t end_ns, std::string_view kind,
                     std::string_view tooltip);

// A parallel step's ranks: one row per rank, by node; past kFoldAbove rows
// the ordinary ranks of a node fold into one row.
std::string rank_rows_html(const StepPicture& step, const Axis& axis);

}  // namespace flowrun::page
