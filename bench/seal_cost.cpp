// seal_cost: what sealing the control plane's frames (protocol.h) costs in
// CPU time, for docs/benchmarks.md: 1 GiB in 1 MiB upload_chunk frames sealed
// and opened (the gather's bytes; the head opens them all), and 1024 agents'
// keys, ciphers and rendezvous frames on both sides. CPU time, not wall
// time, so a loaded machine still gives the cost.
//
//   seal_cost
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <initializer_list>
#include <string>

#include "flowrun/protocol.h"

namespace {

using namespace flowrun;

double cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Seals `frame` with `seal`, reads it back and opens it with `open`; adds the
// CPU time of each half.
void pass(std::string frame, FrameCipher& seal, FrameCipher& open, double& seal_s, double& open_s) {
  double t = cpu_s();
  seal.seal(frame);
  seal_s += cpu_s() - t;
  FrameReader reader("peer");
  reader.feed(frame);
  Frame got = *reader.next();
  std::string error;
  t = cpu_s();
  if (!open.open(got, &error)) {
    std::fprintf(stderr, "seal_cost: %s\n", error.c_str());
    std::exit(1);
  }
  open_s += cpu_s() - t;
}

}  // namespace

int main() {
  const std::string chunk(std::size_t{1} << 20, 'z');
  const FrameKeys keys = derive_frame_keys(make_token(), make_nonce(), make_nonce(), "node");
  FrameCipher seal(keys.agent_to_head, Direction::agent_to_head);
  FrameCipher open(keys.agent_to_head, Direction::agent_to_head);
  double seal_s = 0, open_s = 0;
  for (int i = 0; i < 1024; ++i)
    pass(encode_one_field_frame(MessageType::upload_chunk, "data", chunk), seal, open, seal_s, open_s);
  std::printf("gather: 1 GiB in 1 MiB frames: seal %.3f s (%.2f GB/s), open %.3f s (%.2f GB/s) of CPU\n",
              seal_s, 1.073741824 / seal_s, open_s, 1.073741824 / open_s);

  const std::string token = make_token();
  double head_s = 0, agent_s = 0;
  for (int i = 0; i < 1024; ++i) {
    const std::string node = "rdzv-" + std::to_string(i);
    const std::string agent_nonce = make_nonce(), head_nonce = make_nonce();
    double t = cpu_s();
    const FrameKeys head_keys = derive_frame_keys(token, agent_nonce, head_nonce, node);
    FrameCipher head_seal(head_keys.head_to_agent, Direction::head_to_agent);
    FrameCipher head_open(head_keys.agent_to_head, Direction::agent_to_head);
    head_s += cpu_s() - t;
    t = cpu_s();
    const FrameKeys agent_keys = derive_frame_keys(token, agent_nonce, head_nonce, node);
    FrameCipher agent_seal(agent_keys.agent_to_head, Direction::agent_to_head);
    FrameCipher agent_open(agent_keys.head_to_agent, Direction::head_to_agent);
    agent_s += cpu_s() - t;
    // assign and start from the head; ready, exited and done from the agent (their sizes here).
    for (std::size_t size : {600u, 300u})
      pass(encode_frame(MessageType::assign, std::string(size, 'a')), head_seal, agent_open, head_s, agent_s);
    for (std::size_t size : {80u, 200u, 40u})
      pass(encode_frame(MessageType::ready, std::string(size, 'r')), agent_seal, head_open, agent_s, head_s);
  }
  std::printf(
      "rendezvous: 1024 agents' keys, ciphers and 5 frames each: head %.1f ms, agents %.1f ms of CPU\n",
      head_s * 1e3, agent_s * 1e3);
  return 0;
}
