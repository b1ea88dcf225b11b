// reckonctl: the operator's tool. Subcommands: local, compare, lab, status, certs, export,
// evaluate, predict, codec, bench.
// See docs/reckonctl.md for each one's flags.
#include <iostream>
#include <string>
#include <vector>

#include "base/allocator.h"
#include "base/flags.h"
#include "codec/elementwise.h"
#include "ctl/commands.h"

namespace {

constexpr char kUsage[] =
    "usage: reckonctl <command> [args]\n"
    "commands:\n"
    "  local [--workers N] [flags]   train a cluster of workers on this machine\n"
    "  compare [--workers N] [--codecs threshold,onebit,dyntree8,dense] [--csv F] [--chart F.svg]\n"
    "                                one cluster per codec plus a dense worker alone: a table\n"
    "  lab --workers N [--link SHAPE] a network lab for scripts: namespaces, then\n"
    "                                partition/heal/shape commands on stdin\n"
    "  status --peer ADDR            a worker's status as JSON\n"
    "  certs --out DIR --nodes A,B   a cluster CA and node certificates for mutual TLS\n"
    "  export --checkpoint F --format onnx|npz --out PATH\n"
    "                                the trained network for other tools: raw features in\n"
    "  evaluate --model M.onnx --data DIR [--confusion]\n"
    "                                an exported model's accuracy on a data folder's test split\n"
    "  predict --model M.onnx --input X.npy --out P.npy\n"
    "                                an exported model's class probabilities for raw features\n"
    "  codec encode|decode|inspect   encode a float32 residual; decode or inspect an Update\n"
    "  bench codec [--json]          codec size and speed against entropy and zstd\n"
    "  bench codec --codec dyntree8 --table1 [--json]\n"
    "                                Dettmers 2015 Table 1: the dynamic tree's errors\n"
    "  bench train [--json]          training step FLOP/s against sgemm on the same shapes\n"
    "  bench transport [--json]      gRPC stream vs raw TCP, gossip latency and step overhead\n"
    "  bench inbound [--json]        one node taking in its peers' messages: updates/s, CPU\n"
    "  bench gpu [--json]            CUDA threshold pass vs memcpy and CUB, step share, apply\n"
    "  bench show --from FILE        a kept figures file (a bench's --json) as tables again\n";

}  // namespace

int main(int argc, char** argv) {
  reckon::base::TuneAllocatorForLargeFrames();
  // A bad RECKON_CPU_ISA stops the process here, before anything starts
  // (codec/elementwise.h), not at the codec's first pass.
  reckon::codec::IsaCeilingName();
  std::ios::sync_with_stdio(false);
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    (args.empty() ? std::cerr : std::cout) << kUsage;
    return args.empty() ? reckon::ctl::kExitUsage : reckon::ctl::kExitOk;
  }
  if (args[0] == "--version") {  // as every subcommand prints it (base/flags.h)
    return reckon::base::ParseFlagsOrExit({"reckonctl", {}}, args, std::cout, std::cerr);
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  int code;
  if (args[0] == "local") {
    code = reckon::ctl::RunLocalCommand(rest, std::cout, std::cerr);
  } else if (args[0] == "compare") {
    code = reckon::ctl::RunCompareCommand(rest, std::cout, std::cerr);
  } else if (args[0] == "lab") {
    code = reckon::ctl::RunLabCommand(rest, std::cout, std::cerr);
  } else if (args[0] == "status") {
    code = reckon::ctl::RunStatusCommand(rest, std::cout, std::cerr);
  } else if (args[0] == "certs") {
    code = reckon::ctl::RunCertsCommand(rest, std::cout, std::cerr);
  } else if (args[0] == "export") {
    code = reckon::ctl::RunExportCommand(rest, std::cout, std::cerr);
  } else if (args[0] == "evaluate") {
    code = reckon::ctl::RunEvaluateCommand(rest, std::cout, std::cerr);
  } else if (args[0] == "predict") {
    code = reckon::ctl::RunPredictCommand(rest, std::cout, std::cerr);
  } else if (args[0] == "codec") {
    code = reckon::ctl::RunCodecCommand(rest, std::cout, std::cerr);
  } else if (args[0] == "bench") {
    code = reckon::ctl::RunBenchCommand(rest, std::cout, std::cerr);
  } else {
    std::cerr << "reckonctl: unknown command '" << args[0] << "'\n" << kUsage;
    code = reckon::ctl::kExitUsage;
  }
  std::cout.flush();
  return code;
}
