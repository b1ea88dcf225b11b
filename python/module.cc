// The Python module `reckon._reckon` (pybind11): python/flat_peer.h for
// Python, exchanging parameters through the buffer protocol (a contiguous
// float32 buffer: a NumPy array, or a CPU torch tensor's .numpy()) or, for
// parameters on a GPU, a device address, a count and the framework's
// stream as integers (a CUDA torch tensor's data_ptr(), numel() and
// torch.cuda.current_stream().cuda_stream), so that it depends on no
// framework's C++ ABI. python/reckon/torch.py is the PyTorch entry point
// built on it.
//
// Threads: a Peer is used from one Python thread; the GIL is released
// while it steps, joins or waits for the cluster (the gossip node's own
// threads never call into Python).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/stop_signals.h"
#include "python/flat_peer.h"
#include "server/cluster_config.h"
#include "worker/data_identity.h"
#include "worker/gossip_peers.h"

namespace py = pybind11;

namespace reckon::python {
namespace {

// A writable, contiguous float32 buffer as a span (what a step writes into).
std::span<float> FloatBuffer(py::buffer buffer, const char* what) {
  py::buffer_info info = buffer.request(/*writable=*/true);
  if (info.format != py::format_descriptor<float>::format() || info.itemsize != sizeof(float)) {
    throw py::type_error(
        absl::StrCat(what, ": a float32 buffer is needed, not format '", info.format, "'"));
  }
  // C-contiguous: the strides of a dense row-major array.
  py::ssize_t expected = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] > 1 && info.strides[d] != expected) {
      throw py::value_error(absl::StrCat(what, ": the buffer must be contiguous"));
    }
    expected *= info.shape[d];
  }
  return {static_cast<float*>(info.ptr), static_cast<size_t>(info.size)};
}

// reckon.Stopped: a SIGTERM came before the cluster agreed (the replica is
// not final).
class Stopped : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A Peer's SIGTERM handler (handle_sigterm) is base's (base/stop_signals.h):
// a C handler, since Python's run only between bytecodes, and a Peer waits
// in C++ with the GIL released; it records who sent the signal, which
// reckon.Stopped's message names. Every Peer of the process reads the one
// flag. SIGINT stays Python's KeyboardInterrupt.
void ThrowIfError(const absl::Status& s) {
  if (s.ok()) return;
  const std::string message(s.message());
  if (s.code() == absl::StatusCode::kCancelled && base::StopFlag().load()) throw Stopped(message);
  if (s.code() == absl::StatusCode::kInvalidArgument) throw py::value_error(message);
  throw std::runtime_error(absl::StrCat(absl::StatusCodeToString(s.code()), ": ", message));
}

v1::Codec WireCodec(const std::string& name) {
  if (name == "rice") return v1::CODEC_THRESHOLD_RICE;
  if (name == "packed32") return v1::CODEC_THRESHOLD_PACKED32;
  throw py::value_error(absl::StrCat("codec '", name, "': rice or packed32"));
}

class PyPeer {
 public:
  PyPeer(const std::string& node_id, const std::string& model, py::buffer initial,
         const std::string& listen, const std::vector<std::string>& peers, uint64_t incarnation,
         const std::string& cluster_token, double threshold, const std::string& codec,
         bool bootstrap, uint64_t join_after_messages, const std::string& data, uint64_t seed,
         int fraction_bits, double failure_timeout_s, double quiesce_timeout_s,
         const std::string& http_listen, bool handle_sigterm, const std::string& tls_ca,
         const std::string& tls_cert, const std::string& tls_key, int heartbeat_ms, int device,
         const std::string& advertise) {
    std::span<float> start = FloatBuffer(initial, "initial");
    FlatPeerOptions o;
    o.peers.node.node_id = node_id;
    o.peers.node.incarnation = incarnation != 0 ? incarnation : server::NewIncarnation();
    o.wire_codec = WireCodec(codec);
    server::ClusterSpec spec;
    spec.model = model;
    spec.param_count = start.size();
    spec.fraction_bits = fraction_bits;
    spec.wire_codec = o.wire_codec;
    spec.seed = seed;
    spec.data = data;  // reckon-worker's: data_identity(dir) of its data
    o.peers.node.fingerprint = server::MakeFingerprint(spec);
    o.peers.node.cluster_token = cluster_token;
    const absl::Status timed =
        server::SetNodeTimings(heartbeat_ms, static_cast<int64_t>(failure_timeout_s * 1000),
                               {"heartbeat_ms", "failure_timeout_s"}, &o.peers.node);
    if (!timed.ok()) throw py::value_error(std::string(timed.message()));
    o.peers.quiesce_timeout = std::chrono::seconds(static_cast<int64_t>(quiesce_timeout_s));
    o.peers.listen = listen;
    o.peers.advertise = advertise;  // how peers reach us (default: listen, with the host's name)
    o.peers.bootstrap = bootstrap;
    o.peers.join_after_messages = join_after_messages;
    o.http_listen = http_listen;
    if (handle_sigterm) {
      base::CatchSigterm();
      o.stop = &base::StopFlag();
    }
    if (join_after_messages > 0) o.peers.join_after_why = "join_after_messages";
    o.threshold = threshold;
    worker::TlsFiles tls;
    tls.ca = tls_ca;
    tls.cert = tls_cert;
    tls.key = tls_key;
    tls.cert_name = "tls_cert";
    tls.all_names = "tls_cert, tls_key and tls_ca";
    tls.node_id_name = "node_id";
    ThrowIfError(worker::UseTls(tls, &o.peers));
    absl::StatusOr<std::vector<std::string>> resolved =
        worker::ResolvePeers(absl::StrJoin(peers, ","));
    ThrowIfError(resolved.status());
    o.peers.node.seeds = *resolved;
    o.device = device;
    absl::StatusOr<std::unique_ptr<FlatPeer>> made;
    {
      py::gil_scoped_release release;
      made = FlatPeer::Create(std::move(o), start, std::cerr);
    }
    ThrowIfError(made.status());
    peer_ = *std::move(made);
  }

  void Step(py::buffer params, int samples, double loss_sum) {
    StepAt(HostParams(params), samples, loss_sum);
  }
  void Finish(py::buffer params) { FinishAt(HostParams(params)); }
  void ReadInto(py::buffer params) { ThrowIfError(peer_->ReadInto(HostParams(params))); }
  // Parameters on the peer's GPU: `address` of `count` float32 in its
  // memory; the framework's work on `stream` so far comes first.
  void StepCuda(uintptr_t address, uint64_t count, uintptr_t stream, int samples, double loss_sum) {
    StepAt(DeviceParams(address, count, stream), samples, loss_sum);
  }
  void FinishCuda(uintptr_t address, uint64_t count, uintptr_t stream) {
    FinishAt(DeviceParams(address, count, stream));
  }
  void ReadIntoCuda(uintptr_t address, uint64_t count, uintptr_t stream) {
    ThrowIfError(peer_->ReadInto(DeviceParams(address, count, stream)));
  }
  double threshold() const { return peer_->threshold(); }
  void SetThreshold(double threshold) { ThrowIfError(peer_->SetThreshold(threshold)); }
  std::string WeightHash() {
    absl::StatusOr<std::string> h = peer_->WeightHash();
    ThrowIfError(h.status());
    return *h;
  }
  uint64_t steps() const { return peer_->steps(); }
  uint64_t updates_sent() const { return peer_->updates_sent(); }
  uint64_t bytes_sent() const { return peer_->bytes_sent(); }
  uint64_t param_count() const { return peer_->param_count(); }
  int http_port() const { return peer_->http_port(); }
  static bool stopping() { return base::StopFlag().load(); }
  std::string address() { return peer_->peers().address(); }
  int device() const { return peer_->device(); }

 private:
  std::span<float> HostParams(py::buffer params) {
    if (peer_->device() >= 0) {
      throw py::value_error(absl::StrCat("this peer's parameters are on cuda:", peer_->device(),
                                         ": step_cuda, finish_cuda, read_into_cuda"));
    }
    return FloatBuffer(params, "params");
  }
  std::span<float> DeviceParams(uintptr_t address, uint64_t count, uintptr_t stream) {
    if (peer_->device() < 0) {
      throw py::value_error("this peer's parameters are in host memory: step, finish, read_into");
    }
    if (address == 0 || address % alignof(float) != 0) {
      throw py::value_error(absl::StrCat("device address ", address, " is not a float32 array's"));
    }
    ThrowIfError(peer_->OrderAfter(stream));
    return {reinterpret_cast<float*>(address), count};
  }
  void StepAt(std::span<float> p, int samples, double loss_sum) {
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = peer_->Step(p, samples, loss_sum);
    }
    ThrowIfError(s);
  }
  void FinishAt(std::span<float> p) {
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = peer_->Finish(p);
    }
    ThrowIfError(s);
  }

  std::unique_ptr<FlatPeer> peer_;
};

}  // namespace
}  // namespace reckon::python

PYBIND11_MODULE(_reckon, m) {
  using reckon::python::PyPeer;
  m.doc() = "reckon: Strom's threshold gossip for a framework's flat float32 parameters";
  py::register_exception<reckon::python::Stopped>(m, "Stopped");
  // Whether parameters on a GPU can be taken (this build had nvcc).
  m.attr("built_with_cuda") = bool(RECKON_HAVE_CUDA);
  // What reckon-worker puts in its fingerprint for the data in `dir` (a
  // peer joining its cluster passes it as `data`).
  m.def(
      "data_identity",
      [](const std::string& dir) {
        absl::StatusOr<std::string> id = reckon::worker::DataIdentity(dir);
        reckon::python::ThrowIfError(id.status());
        return *id;
      },
      py::arg("dir"));
  py::class_<PyPeer>(m, "FlatPeer")
      .def(py::init<const std::string&, const std::string&, py::buffer, const std::string&,
                    const std::vector<std::string>&, uint64_t, const std::string&, double,
                    const std::string&, bool, uint64_t, const std::string&, uint64_t, int, double,
                    double, const std::string&, bool, const std::string&, const std::string&,
                    const std::string&, int, int, const std::string&>(),
           py::arg("node_id"), py::arg("model"), py::arg("initial"),
           py::arg("listen") = "0.0.0.0:7070", py::arg("peers") = std::vector<std::string>{},
           py::arg("incarnation") = 0, py::arg("cluster_token") = "", py::arg("threshold") = 0.005,
           py::arg("codec") = "rice", py::arg("bootstrap") = false,
           py::arg("join_after_messages") = 0, py::arg("data") = "", py::arg("seed") = 1,
           py::arg("fraction_bits") = 32, py::arg("failure_timeout_s") = 3.0,
           py::arg("quiesce_timeout_s") = 600.0, py::arg("http_listen") = "",
           py::arg("handle_sigterm") = true, py::arg("tls_ca") = "", py::arg("tls_cert") = "",
           py::arg("tls_key") = "", py::arg("heartbeat_ms") = 100, py::arg("device") = -1,
           py::arg("advertise") = "")
      .def("step", &PyPeer::Step, py::arg("params"), py::arg("samples") = 0,
           py::arg("loss_sum") = 0.0)
      .def("finish", &PyPeer::Finish, py::arg("params"))
      .def("read_into", &PyPeer::ReadInto, py::arg("params"))
      .def("step_cuda", &PyPeer::StepCuda, py::arg("address"), py::arg("count"), py::arg("stream"),
           py::arg("samples") = 0, py::arg("loss_sum") = 0.0)
      .def("finish_cuda", &PyPeer::FinishCuda, py::arg("address"), py::arg("count"),
           py::arg("stream"))
      .def("read_into_cuda", &PyPeer::ReadIntoCuda, py::arg("address"), py::arg("count"),
           py::arg("stream"))
      .def_property_readonly("device", &PyPeer::device)
      .def_property("threshold", &PyPeer::threshold, &PyPeer::SetThreshold)
      .def("weight_hash", &PyPeer::WeightHash)
      .def_property_readonly("steps", &PyPeer::steps)
      .def_property_readonly("updates_sent", &PyPeer::updates_sent)
      .def_property_readonly("bytes_sent", &PyPeer::bytes_sent)
      .def_property_readonly("param_count", &PyPeer::param_count)
      .def_property_readonly("address", &PyPeer::address)
      .def_property_readonly("http_port", &PyPeer::http_port)
      .def_property_readonly_static("stopping", [](py::object) { return PyPeer::stopping(); });
}
