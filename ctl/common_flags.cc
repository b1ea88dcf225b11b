#include "ctl/common_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(bool, json, false, "print JSON instead of a table");
ABSL_FLAG(int64_t, steps, 200, "timed training steps");
ABSL_FLAG(double, threshold, 0, "tau, rounded to the fixed-point grid");
ABSL_FLAG(int64_t, workers, 4, "workers to start (local: 1 to 64; lab: 1 to 250)");
ABSL_FLAG(std::string, link, "",
          "each worker in its own network namespace behind a link like "
          "rate=100mbit,delay=1ms[,jitter=,loss=,duplicate=,queue=] (root only; local: empty "
          "runs on loopback)");
ABSL_FLAG(int64_t, link_mtu, 1500, "the MTU of every worker's interface in the network lab");
ABSL_FLAG(std::string, out, "",
          "certs: the directory for ca.pem, ca.key, <node>.pem, <node>.key, reckonctl.*; export: "
          "the file to write");
ABSL_FLAG(std::string, input, "",
          "codec encode: raw little-endian float32 residual (R.f32); codec decode, inspect: a "
          "file holding one serialized Update; predict: a .npy of raw features, [N, D] (float32, "
          "float16 or an integer type)");
ABSL_FLAG(std::string, format, "",
          "codec encode: rice or packed32 (default rice); export: onnx or npz");
ABSL_FLAG(std::string, peer, "", "host:port of a worker's gossip service");
ABSL_FLAG(int64_t, timeout_ms, 2000, "give up after this long");
ABSL_FLAG(std::string, tls_cert, "", "with a TLS cluster: a certificate of its CA (PEM)");
ABSL_FLAG(std::string, tls_key, "", "its key (PEM)");
ABSL_FLAG(std::string, tls_ca, "", "the cluster CA's certificate (PEM)");
ABSL_FLAG(std::string, cluster_token, "",
          "the cluster's --cluster-token, when it has one (a worker refuses a status or an export "
          "without it)");

namespace reckon::ctl {

absl::StatusOr<server::TlsConfig> ClientTlsFromFlags() {
  const std::string cert = absl::GetFlag(FLAGS_tls_cert), key = absl::GetFlag(FLAGS_tls_key),
                    ca = absl::GetFlag(FLAGS_tls_ca);
  if (cert.empty() && key.empty() && ca.empty()) return server::TlsConfig{};
  return server::LoadTls(ca, cert, key);
}

}  // namespace reckon::ctl
