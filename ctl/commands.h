// reckonctl subcommands. Each takes its arguments (after the subcommand
// words) and streams for output, and returns the process exit code:
//   0 success; 1 invalid input data (corrupt message, NaN residual, missing
//   file); 2 usage error (unknown flag, bad value). On failure exactly one
//   line goes to `err`, saying what is wrong, and nothing to `out`.
//
// Threads: each command runs on the calling thread (reckonctl's main).
#ifndef RECKON_CTL_COMMANDS_H_
#define RECKON_CTL_COMMANDS_H_

#include <ostream>
#include <string>
#include <vector>

#include "base/exit_codes.h"

namespace reckon::ctl {

// The exit codes every command follows, as reckon-worker does.
using base::kExitFailed;
using base::kExitOk;
using base::kExitStopped;
using base::kExitUsage;

// reckonctl codec encode|decode|inspect ...
int RunCodecCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// reckonctl bench codec|train [--json] ...
int RunBenchCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// reckonctl bench train: training step FLOP/s against sgemm on the same shapes.
int RunBenchTrain(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
// compare: one cluster per codec plus the dense baseline (compare_command.cc).
int RunCompareCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
// bench codec --codec dyntree8 --table1: Dettmers 2015 Table 1 (bench_table1.cc).
int RunBenchTable1(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// reckonctl local --workers N [training flags]: a cluster on loopback.
int RunLocalCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// reckonctl lab --workers N: the network lab for a script (lab_command.cc):
// namespaces described on `out`, commands (partition, heal, ...) on stdin.
int RunLabCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// reckonctl status --peer ADDR: a node's status as JSON.
int RunStatusCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// reckonctl export --checkpoint FILE --format onnx|npz --out PATH: the
// trained network for other tools (model_export.h).
int RunExportCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// reckonctl evaluate --model M.onnx --data DIR: accuracy (and with
// --confusion the confusion matrix) of an exported model on raw features;
// reckonctl predict --model M.onnx --input X.npy --out P.npy: its class
// probabilities (evaluate_command.cc, onnx_runner.h).
int RunEvaluateCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int RunPredictCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// reckonctl certs --out DIR --nodes a,b,c: a cluster CA and node certificates.
int RunCertsCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// reckonctl bench transport: gRPC stream against raw TCP, emit-to-apply
// latency, step time with gossip on and off.
int RunBenchTransport(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// reckonctl bench inbound: one node taking in K peers' messages over the
// real transport: updates/s, messages/s, node CPU per message.
int RunBenchInbound(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// reckonctl bench gpu: the CUDA threshold pass against memcpy and
// cub::DeviceSelect, its share of a training step, FLOP/s, apply rate.
int RunBenchGpu(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// reckonctl bench show --from FILE: a kept figures file (a bench's --json)
// printed again as tables (bench_show.cc).
int RunBenchShow(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace reckon::ctl

#endif  // RECKON_CTL_COMMANDS_H_
