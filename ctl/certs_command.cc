// reckonctl certs --out DIR --nodes w0,w1,... : a cluster CA and a
// certificate per node (common name = node id, Ed25519), plus one for the
// operator's reckonctl, for tests and small deployments. A production
// cluster may use its own CA instead: what reckon needs is in server/tls.h.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "ctl/commands.h"
#include "ctl/common_flags.h"
#include "server/node.h"
#include "server/tls.h"

ABSL_FLAG(std::string, nodes, "", "node ids, comma-separated (each worker's --node-id)");
ABSL_FLAG(std::string, hosts, "", "extra DNS names or IPs for every certificate");
ABSL_FLAG(std::string, ca_name, "reckon cluster CA", "the CA's common name");
ABSL_FLAG(int64_t, days, 365, "validity in days");

namespace reckon::ctl {
namespace {

// Private keys are readable by their owner only.
bool WriteFile(const std::filesystem::path& path, const std::string& text, bool secret) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return false;
  return chmod(path.c_str(), secret ? 0600 : 0644) == 0;
}

}  // namespace

int RunCertsCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const base::FlagScope scope{
      "reckonctl certs",
      {{"out", "", true}, {"nodes", "", true}, {"hosts"}, {"ca_name"}, {"days"}}};
  if (int code = base::ParseFlagsOrExit(scope, args, out, err); code >= 0) return code;
  const std::string dir = absl::GetFlag(FLAGS_out), nodes = absl::GetFlag(FLAGS_nodes),
                    hosts = absl::GetFlag(FLAGS_hosts), ca_name = absl::GetFlag(FLAGS_ca_name);
  const int64_t days = absl::GetFlag(FLAGS_days);
  std::vector<std::string> ids = absl::StrSplit(nodes, ',', absl::SkipEmpty());
  std::vector<std::string> extra = absl::StrSplit(hosts, ',', absl::SkipEmpty());
  if (ids.empty() || days < 1 || days > 36500) {
    err << "reckonctl certs: --nodes needs at least one node id and --days 1..36500\n";
    return kExitUsage;
  }
  for (const std::string& id : ids) {
    if (!server::ValidNodeId(id) || id == "ca" || id == "reckonctl") {
      err << "reckonctl certs: '" << id
          << "' is not a node id ([A-Za-z0-9._-], 1-63 characters; not 'ca' or 'reckonctl')\n";
      return kExitUsage;
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    err << "reckonctl certs: cannot create " << dir << ": " << ec.message() << "\n";
    return kExitFailed;
  }
  absl::StatusOr<server::KeyAndCertificate> ca =
      server::MakeCertificateAuthority(ca_name, static_cast<int>(days));
  if (!ca.ok()) {
    err << "reckonctl certs: " << ca.status().message() << "\n";
    return kExitFailed;
  }
  const std::filesystem::path base(dir);
  bool written = WriteFile(base / "ca.pem", ca->cert_pem, false) &&
                 WriteFile(base / "ca.key", ca->key_pem, true);
  ids.push_back("reckonctl");  // the operator's client certificate
  for (const std::string& id : ids) {
    absl::StatusOr<server::KeyAndCertificate> cert =
        server::IssueCertificate(*ca, id, extra, static_cast<int>(days));
    if (!cert.ok()) {
      err << "reckonctl certs: " << cert.status().message() << "\n";
      return kExitFailed;
    }
    written = written && WriteFile(base / (id + ".pem"), cert->cert_pem, false) &&
              WriteFile(base / (id + ".key"), cert->key_pem, true);
  }
  if (!written) {
    err << "reckonctl certs: cannot write the files in " << dir << "\n";
    return kExitFailed;
  }
  out << "reckonctl certs: wrote ca.pem (keep ca.key offline) and a certificate and key for "
      << ids.size() - 1 << " node(s) and reckonctl in " << dir << "\n"
      << "  worker: --tls-cert " << (base / (ids[0] + ".pem")).string() << " --tls-key "
      << (base / (ids[0] + ".key")).string() << " --tls-ca " << (base / "ca.pem").string() << "\n";
  return kExitOk;
}

}  // namespace reckon::ctl
