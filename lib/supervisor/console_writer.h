// The supervisor's writer of flowrun's console: it never holds up the loop.
// Output to a pipe or terminal is written without blocking (through a
// descriptor of its own), and what the reader has not taken waits in a
// bounded backlog; past it, whole lines of the workers' output are dropped
// and counted (their log files keep every byte), and a line says how many
// once the reader takes output again.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "flowrun/supervisor.h"

namespace boost::asio {
class io_context;
}

namespace flowrun {

class ConsoleWriter {
 public:
  // Ignores SIGPIPE (a reader that went away fails writes with EPIPE
  // instead of killing flowrun) and opens the non-blocking descriptors.
  ConsoleWriter(boost::asio::io_context& io, const Console& console);
  ~ConsoleWriter();  // writes the rest while the console takes it; says on stderr what it did not take
  ConsoleWriter(const ConsoleWriter&) = delete;
  ConsoleWriter& operator=(const ConsoleWriter&) = delete;

  // Hands `text` (whole lines) to flowrun's stdout (`i` 0) or stderr (1):
  // written now where the reader takes it, else kept, up to the backlog for
  // the workers' lines (`droppable`); past it they are counted instead.
  // flowrun's own lines are never dropped. Clears `text`.
  void write(int i, std::string& text, bool droppable);

  // The workers' lines dropped since the last call. The caller says how
  // many (a group's report does), so neither the console, once its reader
  // takes output again, nor the end of the run says them a second time.
  std::size_t take_dropped();

 private:
  int err_fd_ = 2;  // where the end of the run says what the console did not take
  struct Stream;
  void wait_for_room(int i);

  std::unique_ptr<Stream> streams_[2];  // stdout, stderr
};

}  // namespace flowrun
