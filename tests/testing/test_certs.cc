#include "tests/testing/test_certs.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kvtier::testing {
namespace {

constexpr char kKeyOptions[] = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

absl::Status Run(const std::string& command) {
  const std::string quiet = absl::StrCat(command, " >/dev/null 2>&1");
  if (std::system(quiet.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("failed: ", command));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TestCa> TestCa::Create(const std::string& dir, const std::string& name) {
  TestCa ca;
  ca.dir_ = dir;
  ca.name_ = name;
  ca.ca_file_ = absl::StrCat(dir, "/", name, "-ca.pem");
  ca.ca_key_ = absl::StrCat(dir, "/", name, "-ca.key");
  absl::Status s = Run(absl::StrCat(
      "openssl req -x509 ", kKeyOptions, " -days 2 -subj '/CN=", name, " test CA' -keyout '",
      ca.ca_key_, "' -out '", ca.ca_file_,
      "' -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign"));
  if (!s.ok()) return s;
  return ca;
}

absl::StatusOr<CertFiles> TestCa::Issue(const std::string& leaf, const std::string& common_name,
                                        const std::vector<std::string>& sans) const {
  const std::string base = absl::StrCat(dir_, "/", leaf);
  const std::string tmp = absl::StrCat(base, ".new");
  {
    std::ofstream ext(tmp + ".ext");
    ext << "basicConstraints=CA:FALSE\n"
        << "keyUsage=digitalSignature,keyEncipherment\n"
        << "extendedKeyUsage=serverAuth,clientAuth\n";
    if (!sans.empty()) ext << "subjectAltName=" << absl::StrJoin(sans, ",") << "\n";
  }
  absl::Status s = Run(absl::StrCat("openssl req ", kKeyOptions, " -subj '/CN=", common_name,
                                    "' -keyout '", tmp, ".key' -out '", tmp, ".csr'"));
  if (s.ok()) {
    s = Run(absl::StrCat("openssl x509 -req -days 2 -in '", tmp, ".csr' -CA '", ca_file_,
                         "' -CAkey '", ca_key_, "' -CAcreateserial -CAserial '", base,
                         ".srl' -extfile '", tmp, ".ext' -out '", tmp, ".pem'"));
  }
  if (!s.ok()) return s;
  CertFiles files{.cert_file = base + ".pem", .key_file = base + ".key"};
  if (std::rename((tmp + ".key").c_str(), files.key_file.c_str()) != 0 ||
      std::rename((tmp + ".pem").c_str(), files.cert_file.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, ".* over ", base, ".*"));
  }
  return files;
}

}  // namespace kvtier::testing
