// The pieces of `reckonctl bench inbound` (ctl/bench_inbound.cc: the
// command and the receiving node's figures): its load (bench_inbound_load.cc:
// origins on loopback that say Hello to one node over gRPC and stream it
// threshold messages, the node they send to, the CPU clocks the figures
// read) and the training thread's side (bench_inbound_training.cc).
//
// Threads: an Origin's stream is written by one thread at a time (its
// reader thread only reads); the rest are plain functions.
#ifndef RECKON_CTL_BENCH_INBOUND_H_
#define RECKON_CTL_BENCH_INBOUND_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/reckon.grpc.pb.h"
#include "server/grpc_transport.h"
#include "server/node.h"

namespace reckon::ctl::inbound {

using Clock = std::chrono::steady_clock;
inline constexpr int kFractionBits = 32;
inline constexpr uint64_t kSeed = 1;

struct Size {
  const char* name;
  uint64_t params;
  uint64_t updates;  // per message
};

// The cluster every origin and the node share, for `params` parameters.
v1::ClusterFingerprint Fingerprint(uint64_t params);

// `count` Update frames of `origin`, seqs 1..count, each `updates` distinct
// random indices with random signs, Rice-coded, with their checksum
// contribution (what every receiver checks).
std::vector<v1::GossipFrame> MakeMessages(const std::string& origin, const Size& size, int count,
                                          uint64_t seed);

// CPU time the threads of this process whose names start with `prefix` have
// run, in ns (schedstat's first field): 0 when there are none.
uint64_t ThreadCpuNs(const std::string& prefix);
// The calling thread's CPU time, in ns.
double OwnCpuNs();
double MsSince(Clock::time_point t0);

// One origin: Hello, the node's answer, then every frame as fast as the
// stream takes them; it reads (and drops) what the node sends until the
// call ends.
class Origin {
 public:
  Origin(const std::string& address, const std::string& id, const v1::ClusterFingerprint& f)
      : stub_(v1::Gossip::NewStub(grpc::CreateCustomChannel(
            address, grpc::InsecureChannelCredentials(),
            server::GossipChannelArguments(server::TransportOptions{})))) {
    stream_ = stub_->Exchange(&context_);
    v1::GossipFrame hello;
    *hello.mutable_hello()->mutable_fingerprint() = f;
    hello.mutable_hello()->mutable_self()->set_node_id(id);
    hello.mutable_hello()->mutable_self()->set_incarnation(1);
    hello.mutable_hello()->set_listen_address("127.0.0.1:1");  // never dialed: we are linked
    stream_->Write(hello);
    v1::GossipFrame answer;
    answered_ = stream_->Read(&answer) && answer.has_hello();
    reader_ = std::thread([this] {
      v1::GossipFrame frame;
      while (stream_->Read(&frame)) {
      }
    });
  }
  ~Origin() {
    context_.TryCancel();
    reader_.join();
    (void)stream_->Finish();  // CANCELLED: the call's end, read out
  }
  bool answered() const { return answered_; }
  void Send(const std::vector<v1::GossipFrame>& frames) {
    for (const v1::GossipFrame& f : frames) {
      if (!stream_->Write(f)) return;
    }
  }
  // The k-th frame at `start` + k `interval`, until `stop`.
  void SendPaced(const std::vector<v1::GossipFrame>& frames, Clock::time_point start,
                 Clock::duration interval, const std::atomic<bool>& stop) {
    for (size_t k = 0; k < frames.size() && !stop.load(); ++k) {
      std::this_thread::sleep_until(start + static_cast<int64_t>(k) * interval);
      if (!stream_->Write(frames[k])) return;
    }
  }

 private:
  std::unique_ptr<v1::Gossip::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::GossipFrame, v1::GossipFrame>> stream_;
  bool answered_ = false;
  std::thread reader_;
};

// A node on a gossip server on loopback, and `origins` streams into it
// that said Hello ("o0", "o1", ...). The members are declared in the order
// they are to be destroyed in reverse: origins first, then the node, then
// the server (callers stop the node and shut the server down first).
struct Receiver {
  std::unique_ptr<server::GossipServer> server;
  std::unique_ptr<server::GossipNode> node;
  std::vector<std::unique_ptr<Origin>> origins;
};

// `o` without its listen address (the server's port gives it).
absl::StatusOr<Receiver> StartReceiver(server::NodeOptions o, std::span<const int64_t> initial,
                                       int origins);

// --- the training thread's side (--train-steps) ---
struct TrainingModel {
  std::string backend = "cpu";
  std::string layers = "784,512,512,10";
  std::string activation = "relu";
};

struct TrainingFigures {
  int origins = 0;
  int steps = 0;
  int threads = 0;  // the backend's (0: every core)
  uint64_t params = 0;
  double emitted_updates = 0;         // the trainer's own, a step (mean)
  double step_ms_alone = 0;           // mean
  double step_ms_absorbing = 0;       // mean, everything below included
  double apply_ms_absorbing = 0;      // applying the peers' messages, a step
  double publish_ms_absorbing = 0;    // encoding, applying and publishing its own, a step
  uint64_t messages_absorbed = 0;     // peers' messages the trainer applied
  double offered_messages_per_s = 0;  // origins / step_ms_alone
  double node_cpu_ms_per_message = 0, validation_cpu_ms_per_message = 0;
  std::string backend;  // its Describe()
};

// A backend trains `model` (batch 100, threshold 0.005) alone, then as a
// worker's training thread with gossip on while `origins` peers each send
// one message a step of the size it emits itself, at its own step rate.
absl::StatusOr<TrainingFigures> MeasureTraining(int origins, int steps, int threads,
                                                const TrainingModel& model);
void PrintTraining(const TrainingFigures& f, bool json, std::ostream& out);

}  // namespace reckon::ctl::inbound

#endif  // RECKON_CTL_BENCH_INBOUND_H_
