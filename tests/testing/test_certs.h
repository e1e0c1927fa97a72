// Test certificates made with Debian's `openssl` command: a CA per TestCa, and leaf
// certificates it signs with the subject CN and subject alternative names a test asks
// for, usable both as server and as client certificates (EC P-256, valid two days).
#ifndef KVTIER_TESTS_TESTING_TEST_CERTS_H_
#define KVTIER_TESTS_TESTING_TEST_CERTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvtier::testing {

// PEM files of one issued certificate.
struct CertFiles {
  std::string cert_file;
  std::string key_file;
};

// One certificate authority in `dir` (files named after `name`). Thread-compatible.
class TestCa {
 public:
  // Makes the CA's key and self-signed certificate in `dir` (which must exist).
  // INTERNAL with the command when openssl fails.
  static absl::StatusOr<TestCa> Create(const std::string& dir, const std::string& name);

  const std::string& ca_file() const { return ca_file_; }

  // Issues `leaf` (files <dir>/<leaf>.pem and .key; an existing pair is replaced by
  // renaming new files over it, so a file watcher never sees half a file) with subject
  // CN `common_name` and `sans` (openssl syntax: "IP:127.0.0.1", "DNS:localhost").
  // INTERNAL when openssl fails.
  absl::StatusOr<CertFiles> Issue(const std::string& leaf, const std::string& common_name,
                                  const std::vector<std::string>& sans) const;

 private:
  TestCa() = default;
  std::string dir_;
  std::string name_;
  std::string ca_file_;
  std::string ca_key_;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_TEST_CERTS_H_
