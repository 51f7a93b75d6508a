// Errors and diagnostics shared by every module.
//
// Expected outcomes (a refused plan, a failed worker) are values. Problems the
// user must fix are reported as Diagnostics, all of a phase at once, each with
// the file, line and column it is about. Anything else is an exception derived
// from flowrun::Error, caught once in main and printed as
// "flowrun: error: ...".
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace flowrun {

// Process exit codes. The full table lives in docs/cli.md.
enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,  // internal or I/O error
  kExitUsage = 2,    // bad command line, bad spec, or a plan that cannot be made
};

// A generic fatal error; what() is the whole message, without "flowrun: error:".
// One that a failed system call caused carries its errno, so that a caller
// tells a full disk (ENOSPC) from the rest by the number, not by the words.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, int exit_code = kExitFailure, int err = 0)
      : std::runtime_error(message), exit_code_(exit_code), err_(err) {}
  int exit_code() const { return exit_code_; }
  int err() const { return err_; }  // the errno; 0 when none caused it

 private:
  int exit_code_;
  int err_;
};

// A position in a source file. Both 1-based; 0 means "unknown".
struct Location {
  int line = 0;
  int column = 0;
  friend bool operator==(const Location&, const Location&) = default;
};

// One problem in a file the user wrote.
struct Diagnostic {
  std::string file;     // as the user named it on the command line
  Location loc;         // where; {0,0} when the problem is about the whole file
  std::string path;     // dotted key path, e.g. "steps.train.parallel.gpus"; may be empty
  std::string message;  // what is wrong, then what is expected

  // "FILE:LINE:COL: PATH: MESSAGE" (parts that are unknown are left out).
  std::string to_string() const;
  friend bool operator==(const Diagnostic&, const Diagnostic&) = default;
};

// Thrown when a phase found one or more diagnostics; carries all of them.
class DiagnosticError : public Error {
 public:
  explicit DiagnosticError(std::vector<Diagnostic> diagnostics);
  const std::vector<Diagnostic>& diagnostics() const { return diagnostics_; }

 private:
  std::vector<Diagnostic> diagnostics_;
};

// Sorts by file, line, column (stable for equal positions).
void sort_diagnostics(std::vector<Diagnostic>& diagnostics);

}  // namespace flowrun
