// A directory under $TMPDIR (or /tmp) that is removed with everything in it when the
// object is destroyed. Thread-compatible.
#ifndef KVTIER_TESTS_TESTING_TEMP_DIR_H_
#define KVTIER_TESTS_TESTING_TEMP_DIR_H_

#include <string>

namespace kvtier::testing {

class TempDir {
 public:
  TempDir();  // aborts if the directory cannot be created
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // Returns path() + "/" + name.
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_TEMP_DIR_H_
