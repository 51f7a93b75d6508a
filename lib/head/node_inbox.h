// What a node of a multi-node step sends the head, message by message: a
// frame from its connection is decoded and handed to the piece that takes
// it (the phases before the ranks start, the uploads, or the head's
// NodeInbox); a malformed or unexpected message is a protocol error.
// Internal to lib/head.
#pragma once

#include <string>

#include "flowrun/messages.h"
#include "flowrun/protocol.h"

#include "node_gathering.h"
#include "node_table.h"
#include "upload_receiver.h"

namespace flowrun::cluster {

// The messages of a running attempt, as the head takes them.
class NodeInbox {
 public:
  virtual void on_rank_output(Node& n, const Output& m) = 0;
  virtual void on_rank_exited(Node& n, const Exited& m) = 0;
  virtual void on_done(Node& n, const Done& m) = 0;
  // Ranks of `n` wrote nothing for the step's stall_timeout.
  virtual void on_node_stalled(Node& n, const Stalled& m) = 0;
  // The stacks of its live ranks: before its stop's signals, or on demand.
  virtual void on_node_stacks(Node& n, const Stacks& m) = 0;
  // The tallies of its ranks' samples so far (forensics' sample).
  virtual void on_node_shares(Node& n, const Shares& m) = 0;
  // Its agent got a signal.
  virtual void on_node_signalled(Node& n, const Stop& m) = 0;
  virtual void protocol_error(Node& n, const std::string& what) = 0;

 protected:
  ~NodeInbox() = default;
};

// Frame `frame` from node `n`, to the piece that takes it.
void take_node_frame(Node& n, Frame& frame, NodeInbox& inbox, NodeGathering& gathering,
                     UploadReceiver& uploads);

}  // namespace flowrun::cluster
