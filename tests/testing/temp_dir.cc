#include "tests/testing/temp_dir.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "common/logging.h"

namespace kvtier::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/kvtier-test-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  KVTIER_CHECK(mkdtemp(buf.data()) != nullptr) << "mkdtemp failed for " << tmpl;
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace kvtier::testing
