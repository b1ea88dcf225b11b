// What a run reports when it ends: reckon-worker writes it with
// --summary-json, `reckonctl local` and the tests read it back. The JSON
// field names are documented in docs/guide-worker.md ("The summary"); keep them.
//
// Threads: values, written once at the end of a run; any thread. Errors:
// none (the writer's file errors are reckon-worker's).
#ifndef RECKON_WORKER_SUMMARY_H_
#define RECKON_WORKER_SUMMARY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/json.h"

namespace reckon::worker {

struct TrainSummary {
  std::string backend;
  std::string model;
  uint64_t params = 0;
  std::string codec;              // "dense" or the threshold wire codec
  double threshold = 0, tau = 0;  // tau: at the end (the controller may move it)
  int64_t step_quanta = 0;
  double target_density = 0;
  int epochs = 0;
  int64_t steps = 0;
  int batch = 0;  // the minibatch size at the end
  // Auto batch: the size chosen at each selection, in order.
  std::vector<int> batch_choices;
  uint64_t samples = 0;
  double train_seconds = 0;
  double samples_per_s = 0;
  double train_flops_per_s = 0;  // 6 x MACs x samples / s: forward + backward, nominal
  double train_loss = 0;         // mean over the last epoch
  double test_loss = 0;
  double test_accuracy = 0;
  uint64_t updates_sent = 0;
  uint64_t wire_bytes = 0;       // serialized Update messages (dense: fp32 per parameter)
  uint64_t dense_bytes = 0;      // what fp32 gradients would take: steps x params x 4
  double compression_ratio = 0;  // dense_bytes / wire_bytes
  double update_density = 0;     // updates / (steps x params)
  std::string weight_hash;
  // With peers: this origin, its version vector at the end ({"origin": seq})
  // and the node's counters ({"name": count}).
  std::string node_id;
  uint64_t incarnation = 0;
  base::Json version_vector = base::Json::object();
  base::Json node_counters = base::Json::object();
  bool stopped_early = false;  // by a signal
  // Whether weight_hash is the run's final replica: alone, every epoch (or
  // --max-steps) trained; with peers, the cluster agreed it is done
  // (quiescent). False when stopped early: the replica at the stop.
  bool final_replica = false;
  // With peers: how many times the cluster agreed it is done with this
  // worker in it: 1 at the end of training; with --after-training serve,
  // one more each time it agreed again at another vector (a member cut off
  // or restarted added steps), the summary rewritten each time. 0 when not
  // final.
  int agreements = 0;
  // --pretrain-samples: whether this worker pre-trained and started from the
  // result, how long that took, and (with peers) the size of the dense
  // Update that carried it to the cluster (not in wire_bytes, which counts
  // the steps' messages).
  bool pretrained = false;
  double pretrain_seconds = 0;
  uint64_t pretrain_start_bytes = 0;
  // With peers: whether the momentum rule followed the cluster's size, the
  // most workers it was matched to, and the longest round trip to the peers
  // (in steps, rounded to halves) it was matched to.
  bool momentum_matched = false;
  int max_training_members = 1;
  double max_peer_round_trip_steps = 0;
  // With peers: every gossip frame this node sent and received (the
  // node's frame_bytes_sent / frame_bytes_received: serialized protobuf,
  // relays and heartbeats included; not gRPC's framing or snapshots).
  uint64_t bytes_sent = 0, bytes_received = 0;
  // The process's CPU time (user + system) and peak resident memory, at the
  // end (getrusage).
  double cpu_seconds = 0;
  uint64_t max_rss_bytes = 0;
  // --synthetic: the process's CPU time while it emitted (first message to
  // last: the cost of gossip without start-up and joining); each peer
  // message's arrival here (worker/synthetic.h
  // ArrivalLog::ToJson), and how many went unrecorded past its cap.
  double emit_cpu_seconds = 0;
  base::Json arrivals = base::Json::object();
  uint64_t arrivals_dropped = 0;
};

// Fills bytes_sent / bytes_received from node_counters (when there) and the
// process's CPU time and peak memory.
void AddResourceUse(TrainSummary* summary);

// The summary as one JSON object: TrainSummary's fields under their names,
// except node_counters, which is "node".
base::Json SummaryToJson(const TrainSummary& summary);

}  // namespace reckon::worker

#endif  // RECKON_WORKER_SUMMARY_H_
