#include "tests/deploy/tls_checks.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kvtier::testing {
namespace {

// The value after `flag` in `args` ("--flag value" or "--flag=value"), or "".
std::string FlagValue(const std::vector<std::string>& args, const std::string& flag) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == flag && i + 1 < args.size()) return args[i + 1];
    if (absl::StartsWith(args[i], flag + "=")) return args[i].substr(flag.size() + 1);
  }
  return "";
}

std::string Dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

std::vector<std::string> Scalars(const YamlNode* seq) {
  std::vector<std::string> out;
  if (seq != nullptr && seq->is_seq()) {
    for (const YamlNode& n : seq->seq) out.push_back(n.scalar);
  }
  return out;
}

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

bool DnsNameCovers(const std::string& pattern, const std::string& name) {
  if (pattern == name) return true;
  if (!absl::StartsWith(pattern, "*.")) return false;
  const size_t dot = name.find('.');
  return dot != std::string::npos && dot > 0 && name.substr(dot) == pattern.substr(1);
}

std::vector<std::string> CheckTls(const std::vector<YamlNode>& docs, const YamlNode& pod,
                                  const YamlNode& container, const std::vector<std::string>& args,
                                  int grpc_port, const std::string& headless, const std::string& ns,
                                  TlsRendering* out) {
  std::vector<std::string> problems;
  auto problem = [&](std::string p) { problems.push_back(std::move(p)); };
  out->cert_file = FlagValue(args, "--tls-cert");
  out->on = !out->cert_file.empty();
  if (!out->on) return problems;
  out->key_file = FlagValue(args, "--tls-key");
  out->ca_file = FlagValue(args, "--tls-client-ca");
  out->require_client_cert = Contains(args, "--tls-require-client-cert");
  if (out->key_file.empty()) problem("--tls-cert without --tls-key");
  if (out->ca_file.empty()) problem("no --tls-client-ca: peers cannot verify each other");

  // The files: one read-only Secret volume, no subPath.
  const std::string dir = Dir(out->cert_file);
  for (const std::string& f : {out->key_file, out->ca_file}) {
    if (!f.empty() && Dir(f) != dir) problem(absl::StrCat(f, " is not next to ", out->cert_file));
  }
  std::string volume;
  if (const YamlNode* vm = container.Child("volumeMounts"); vm != nullptr && vm->is_seq()) {
    for (const YamlNode& m : vm->seq) {
      if (m.Str("mountPath") != dir) continue;
      volume = m.Str("name");
      if (m.Child("subPath") != nullptr) {
        problem(absl::StrCat("TLS volume ", volume,
                             " is mounted with subPath: renewals never "
                             "reach kvtierd"));
      }
      if (m.Str("readOnly") != "true") problem(absl::StrCat("TLS volume ", volume, " is writable"));
    }
  }
  if (volume.empty()) {
    problem(absl::StrCat("no volume mounted at ", dir, " (the TLS files' directory)"));
  } else if (const YamlNode* vols = pod.Child("volumes"); vols != nullptr && vols->is_seq()) {
    for (const YamlNode& v : vols->seq) {
      if (v.Str("name") == volume) out->secret_name = v.Str("secret.secretName");
    }
    if (out->secret_name.empty()) problem(absl::StrCat("TLS volume ", volume, " is not a Secret"));
  }

  // The Certificate writing that Secret, and its Issuer.
  const YamlNode* cert = nullptr;
  for (const YamlNode& d : docs) {
    if (d.Str("kind") == "Certificate" && d.Str("spec.secretName") == out->secret_name) {
      cert = &d;
    }
  }
  if (!out->secret_name.empty() && cert == nullptr) {
    problem(absl::StrCat("no cert-manager Certificate writes Secret ", out->secret_name));
  }
  if (cert != nullptr) {
    out->dns_names = Scalars(cert->Get("spec.dnsNames"));
    const std::vector<std::string> usages = Scalars(cert->Get("spec.usages"));
    for (const char* u : {"server auth", "client auth"}) {
      if (!Contains(usages, u)) problem(absl::StrCat("Certificate usages lack \"", u, "\""));
    }
    const std::string peer_name =
        absl::StrCat("kvtier-0.", headless, ".", ns, ".svc.cluster.local");
    bool covered = false;
    for (const std::string& n : out->dns_names) covered |= DnsNameCovers(n, peer_name);
    if (!covered) {
      problem(absl::StrCat("Certificate dnsNames do not cover the pods' names (*.", headless, ".",
                           ns, ".svc.cluster.local): peers would reject each other"));
    }
    const std::string issuer = cert->Str("spec.issuerRef.name");
    const std::string kind = cert->Str("spec.issuerRef.kind", "Issuer");
    bool found = kind == "ClusterIssuer";  // cluster-scoped: not part of this rendering
    for (const YamlNode& d : docs)
      found |= d.Str("kind") == kind && d.Str("metadata.name") == issuer;
    if (!found) problem(absl::StrCat("Certificate issuer ", kind, "/", issuer, " is not rendered"));
  }

  // Probes: the kubelet's gRPC probe speaks plaintext, so `kvtier health` over TLS.
  for (const char* probe : {"livenessProbe", "readinessProbe", "startupProbe"}) {
    const YamlNode* p = container.Child(probe);
    if (p == nullptr) continue;  // reported by the caller
    const std::vector<std::string> cmd = Scalars(p->Get("exec.command"));
    if (cmd.size() < 2 || cmd[0] != "kvtier" || cmd[1] != "health") {
      problem(absl::StrCat(probe,
                           " is not an exec of `kvtier health` (a native gRPC probe "
                           "cannot speak TLS)"));
      continue;
    }
    if (FlagValue(cmd, "--server") != absl::StrCat("127.0.0.1:", grpc_port)) {
      problem(absl::StrCat(probe, " --server is not 127.0.0.1:", grpc_port));
    }
    if (FlagValue(cmd, "--tls-ca") != out->ca_file ||
        (out->require_client_cert && (FlagValue(cmd, "--tls-cert") != out->cert_file ||
                                      FlagValue(cmd, "--tls-key") != out->key_file))) {
      problem(absl::StrCat(probe, " does not use kvtierd's CA, certificate and key"));
    }
    const std::string name = FlagValue(cmd, "--tls-server-name");
    bool covered = false;
    for (const std::string& n : out->dns_names) covered |= DnsNameCovers(n, name);
    if (!covered) {
      problem(absl::StrCat(probe, " --tls-server-name \"", name,
                           "\" is not a DNS name of the certificate"));
    }
  }
  return problems;
}

}  // namespace kvtier::testing
