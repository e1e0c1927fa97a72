// The TLS part of the deploy consistency checks (tests/deploy/kustomize_consistency_test):
// what deploy/components/tls must get right for kvtierd to start and stay reachable.
// Test-only code. Thread-compatible.
#ifndef KVTIER_TESTS_DEPLOY_TLS_CHECKS_H_
#define KVTIER_TESTS_DEPLOY_TLS_CHECKS_H_

#include <string>
#include <vector>

#include "tests/deploy/mini_yaml.h"

namespace kvtier::testing {

// kvtierd's TLS as rendered.
struct TlsRendering {
  bool on = false;                           // kvtierd's args have --tls-cert
  std::string cert_file, key_file, ca_file;  // from --tls-cert / --tls-key / --tls-client-ca
  bool require_client_cert = false;
  std::string secret_name;             // the Secret volume holding the files
  std::vector<std::string> dns_names;  // of the cert-manager Certificate writing that Secret
};

// What a rendered StatefulSet pod needs for TLS, given kvtierd's `container`, its `args`,
// the `pod` spec, every rendered document, the gRPC port, the headless Service's name and
// the namespace. Nothing when the args have no --tls-cert. Else: the three files are in
// one read-only Secret volume mounted without subPath (a subPath mount never sees a
// renewal); a cert-manager Certificate writes that Secret, for server and client auth,
// with the DNS name *.<headless>.<namespace>.svc.cluster.local that peers check, issued
// by a rendered Issuer; every probe is an exec of `kvtier health --server
// 127.0.0.1:<port>` with those files and a --tls-server-name the certificate covers.
// Returns the problems found (empty = consistent) and fills `out`.
std::vector<std::string> CheckTls(const std::vector<YamlNode>& docs, const YamlNode& pod,
                                  const YamlNode& container, const std::vector<std::string>& args,
                                  int grpc_port, const std::string& headless, const std::string& ns,
                                  TlsRendering* out);

// True if DNS name `pattern` (possibly "*.rest") covers `name`.
bool DnsNameCovers(const std::string& pattern, const std::string& name);

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_DEPLOY_TLS_CHECKS_H_
