// The supervisor's writer of flowrun's console: it never blocks the loop.
// Output to a pipe or terminal is written without blocking (through a
// descriptor of its own), and what the reader has not taken waits in a
// backlog. Past 4 MiB the writer holds the ranks (the supervisor stops
// reading their pipes, so they wait as they would writing to that pipe
// themselves) until the reader has taken half of it: a reader that keeps
// taking output, however slowly, gets every line. Only a reader that has
// taken nothing for `Console::reader_wait_s` (a paused pager, a pipe nobody
// reads) loses lines: the ranks go on, whole lines of their output past the
// backlog are dropped and counted (their log files keep every byte), and a
// line says how many once the reader takes output again.
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "flowrun/supervisor.h"

namespace flowrun {

class ConsoleWriter {
 public:
  // Ignores SIGPIPE (a reader that went away fails writes with EPIPE
  // instead of killing flowrun) and opens the non-blocking descriptors.
  // `hold(true)` asks the caller to stop handing over the workers' output
  // (the backlog is full and its reader is taking it), `hold(false)` to go on.
  ConsoleWriter(boost::asio::io_context& io, const Console& console, std::function<void(bool hold)> hold);
  ~ConsoleWriter();  // writes the rest while the console takes it; says on stderr what it did not take
  ConsoleWriter(const ConsoleWriter&) = delete;
  ConsoleWriter& operator=(const ConsoleWriter&) = delete;

  // Hands `text` (whole lines) to flowrun's stdout (`i` 0) or stderr (1):
  // written now where the reader takes it, else kept. The workers' lines
  // (`droppable`) past the backlog are counted instead, once its reader has
  // taken nothing for the reader's wait (or while more arrives than a hold
  // can stop: 16 times the backlog). flowrun's own lines are never dropped.
  // Clears `text`.
  void write(int i, std::string& text, bool droppable);

  // The workers' lines dropped since the last call. The caller says how
  // many (a group's report does), so neither the console, once its reader
  // takes output again, nor the end of the run says them a second time.
  std::size_t take_dropped();

 private:
  int err_fd_ = 2;  // where the end of the run says what the console did not take
  struct Stream;
  void wait_for_room(int i);
  void update_hold();
  void watch_reader();  // while holding: drops instead once a reader has taken nothing for the wait

  std::function<void(bool)> hold_;
  bool holding_ = false;
  std::int64_t reader_wait_ns_;
  boost::asio::steady_timer idle_timer_;

  std::unique_ptr<Stream> streams_[2];  // stdout, stderr
};

}  // namespace flowrun
