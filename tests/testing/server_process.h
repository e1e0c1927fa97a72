// Starts a real kvtierd process for integration tests and stops it.
//
// kvtierd's contract (service/main.cc): with `--port 0` it binds a free port, prints
// `kvtierd bound on HOST:PORT` (health NOT_SERVING while the store loads) and, once the
// store is open and the health service is SERVING, exactly one line
// `kvtierd listening on HOST:PORT` to stdout (flushed).
#ifndef KVTIER_TESTS_TESTING_SERVER_PROCESS_H_
#define KVTIER_TESTS_TESTING_SERVER_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvtier::testing {

// Returns the build directory: $KVTIER_BINARY_DIR (set by CTest), or, for a test binary
// run by hand, three levels above /proc/self/exe (<build>/tests/<folder>/<test>).
std::string BinaryDir();

// Returns the path in $KVTIER_KVTIERD when given, else BinaryDir()/service/kvtierd.
std::string KvtierdPath();

// SIGSTOP is delivered asynchronously: returns once /proc/<pid>/stat says `pid` is
// stopped (state T), or false after about `timeout_ms` (polled every millisecond).
bool WaitUntilStopped(pid_t pid, int timeout_ms = 5000);

// One kvtierd child process. Thread-compatible. The destructor SIGKILLs a running child.
class ServerProcess {
 public:
  // Spawns `binary args...` (args should include --port 0 and --data-dir), waits up to
  // `timeout_ms` for the "listening on" line and returns the process. Stderr of the child
  // goes to the test's stderr. DEADLINE_EXCEEDED / INTERNAL on failure (child killed).
  // With ready_prefix "kvtierd bound on " it returns as soon as the port is bound (health
  // NOT_SERVING while the store loads).
  static absl::StatusOr<ServerProcess> Start(const std::string& binary,
                                             const std::vector<std::string>& args,
                                             int timeout_ms = 20000,
                                             std::string_view ready_prefix = kReadyPrefix);
  static constexpr std::string_view kReadyPrefix = "kvtierd listening on ";
  static constexpr std::string_view kBoundPrefix = "kvtierd bound on ";
  // Start(KvtierdPath(), {"--port", "0", "--data-dir", data_dir, extra_args...}).
  static absl::StatusOr<ServerProcess> StartKvtierd(
      const std::string& data_dir, const std::vector<std::string>& extra_args = {});

  ServerProcess(ServerProcess&& other) noexcept;
  ServerProcess& operator=(ServerProcess&& other) noexcept;
  ~ServerProcess();

  const std::string& address() const { return address_; }  // "127.0.0.1:PORT"
  int port() const { return port_; }
  pid_t pid() const { return pid_; }

  // Sends SIGTERM and waits up to timeout_ms; returns the exit code (or INTERNAL if it
  // died from a signal / DEADLINE_EXCEEDED if still running, after which it is SIGKILLed).
  absl::StatusOr<int> Terminate(int timeout_ms = 20000);
  // SIGKILL and reap.
  void Kill();

 private:
  ServerProcess() = default;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string address_;
  int port_ = 0;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_SERVER_PROCESS_H_
