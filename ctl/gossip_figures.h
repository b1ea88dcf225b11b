// What a cluster of synthetic workers (reckon-worker --synthetic) measured
// of the gossip layer, from their summaries: the figures of docs/scaling.md's
// node-count table, printed by `reckonctl local` when its workers are
// synthetic.
//
// Threads: functions, any thread. Errors: a summary without what a figure
// needs is kInvalidArgument naming the field.
#ifndef RECKON_CTL_GOSSIP_FIGURES_H_
#define RECKON_CTL_GOSSIP_FIGURES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/json.h"

namespace reckon::ctl {

struct GossipFigures {
  int nodes = 0;
  std::string overlay = "mesh";     // how fresh messages travelled (worker --gossip-overlay)
  double messages_per_node = 0;     // own messages each origin emitted (mean)
  double message_bytes = 0;         // mean serialized Update
  double seconds = 0;               // mean emitting time (train_seconds)
  // Per node, means over the nodes: gossip frames out and in per second of
  // emitting, and the CPU time while emitting per message handled then (own
  // emitted plus peers' applied; arrivals timed stand for the latter), in
  // microseconds.
  // cpu_cores: CPU seconds per second while emitting (heartbeats and
  // checks included, which a low rate spreads over few messages).
  double bytes_out_per_s = 0, bytes_in_per_s = 0, cpu_us_per_message = 0, cpu_cores = 0;
  double max_rss_mb = 0;  // the largest peak resident memory of a node
  // From the origin emitting a message to its arrival: at one receiver (over
  // every message and receiver), and at the last of the N-1 receivers (over
  // every message that reached all of them), in milliseconds.
  double to_one_p50_ms = 0, to_one_p99_ms = 0, to_all_p50_ms = 0, to_all_p99_ms = 0;
  // Messages some receiver did not time: it joined after them, and had them
  // in its snapshot (one or two per origin while a cluster starts), or its
  // log's cap was reached (arrivals_dropped).
  double messages_untimed = 0, arrivals_dropped = 0;
  // Copies that arrived at a node holding them already (all nodes): the
  // bytes either overlay spends beyond one copy per member.
  double duplicates = 0;
};

// The figures from the summaries' JSON (bytes_sent, bytes_received,
// emit_cpu_seconds, max_rss_bytes, train_seconds, steps, wire_bytes,
// arrivals). kInvalidArgument naming what is missing.
absl::StatusOr<GossipFigures> ComputeGossipFigures(const std::vector<base::Json>& summaries);

// One line for the terminal, and the figures as a JSON object.
std::string GossipFiguresLine(const GossipFigures& f);
base::Json GossipFiguresJson(const GossipFigures& f);

}  // namespace reckon::ctl

#endif  // RECKON_CTL_GOSSIP_FIGURES_H_
