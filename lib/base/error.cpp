#include "flowrun/error.h"

#include <algorithm>

namespace flowrun {

std::string Diagnostic::to_string() const {
  std::string out = file;
  if (loc.line > 0) {
    out += ':' + std::to_string(loc.line);
    if (loc.column > 0) out += ':' + std::to_string(loc.column);
  }
  if (!out.empty()) out += ": ";
  if (!path.empty()) out += path + ": ";
  out += message;
  return out;
}

namespace {
std::string summarize(const std::vector<Diagnostic>& diagnostics) {
  if (diagnostics.empty()) return "no diagnostics";
  std::string out = diagnostics.front().to_string();
  if (diagnostics.size() > 1) out += " (and " + std::to_string(diagnostics.size() - 1) + " more)";
  return out;
}
}  // namespace

DiagnosticError::DiagnosticError(std::vector<Diagnostic> diagnostics)
    : Error(summarize(diagnostics), kExitUsage), diagnostics_(std::move(diagnostics)) {}

void sort_diagnostics(std::vector<Diagnostic>& diagnostics) {
  std::stable_sort(diagnostics.begin(), diagnostics.end(), [](const Diagnostic& a, const Diagnostic& b) {
    if (a.file != b.file) return a.file < b.file;
    if (a.loc.line != b.loc.line) return a.loc.line < b.loc.line;
    return a.loc.column < b.loc.column;
  });
}

}  // namespace flowrun
