#include "node_inbox.h"

#include <fmt/format.h>
#include <variant>

namespace flowrun::cluster {

namespace {

struct Takers {
  Node& n;
  NodeInbox& inbox;
  NodeGathering& gathering;
  UploadReceiver& uploads;

  // What a node sends, by message; anything else is a protocol error.
  template <class M>
  void operator()(const M&) const {
    inbox.protocol_error(n, fmt::format("unexpected {}", message_type_name(M::kType)));
  }
  void operator()(const Heartbeat&) const {}
  void operator()(const Bye&) const {}
  void operator()(const Ready& m) const { gathering.on_ready(n, m); }
  void operator()(const ShipAck& m) const { gathering.on_ship_ack(n, m); }
  void operator()(const Output& m) const { inbox.on_rank_output(n, m); }
  void operator()(const Exited& m) const { inbox.on_rank_exited(n, m); }
  void operator()(const UploadBegin& m) const { uploads.begin(n.rank, m); }
  void operator()(const UploadChunk& m) const { uploads.data(n.rank, m.data); }
  void operator()(const UploadEnd& m) const { uploads.end(n.rank, m); }
  void operator()(const UploadHole& m) const { uploads.hole(n.rank, m.bytes); }
  void operator()(const Done& m) const { inbox.on_done(n, m); }
  void operator()(const PreflightId& m) const { gathering.on_preflight_id(n, m); }
  void operator()(const PreflightDone& m) const { gathering.on_preflight_done(n, m); }
  void operator()(const Stalled& m) const { inbox.on_node_stalled(n, m); }
  void operator()(const Stop& m) const { inbox.on_node_signalled(n, m); }
  void operator()(const Stacks& m) const { inbox.on_node_stacks(n, m); }
  void operator()(const Shares& m) const { inbox.on_node_shares(n, m); }
};

}  // namespace

void take_node_frame(Node& n, Frame& frame, NodeInbox& inbox, NodeGathering& gathering,
                     UploadReceiver& uploads) {
  if (frame.type == MessageType::upload_chunk) {
    // Bulk data: read in place, not copied into a message.
    if (auto data = upload_chunk_data(frame.payload)) {
      uploads.data(n.rank, *data);
      return;
    }
  }
  std::string error;
  auto message = decode_message(frame, &error);
  if (!message) {
    inbox.protocol_error(n, fmt::format("malformed {}: {}", message_type_name(frame.type), error));
    return;
  }
  std::visit(Takers{n, inbox, gathering, uploads}, *message);
}

}  // namespace flowrun::cluster
