#include "tests/testing/server_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvtier::testing {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string BinaryDir() {
  if (const char* d = std::getenv("KVTIER_BINARY_DIR"); d && *d) return d;
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string exe(buf, n > 0 ? n : 0);
  for (int i = 0; i < 3; ++i) exe = exe.substr(0, exe.rfind('/'));
  return exe;
}

bool WaitUntilStopped(pid_t pid, int timeout_ms) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  for (int i = 0; i < timeout_ms; ++i) {
    std::ifstream f(path);
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t paren = stat.rfind(')');
    if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'T') {
      return true;
    }
    usleep(1000);  // polling a process state, not synchronizing test logic
  }
  return false;
}

std::string KvtierdPath() {
  if (const char* p = std::getenv("KVTIER_KVTIERD"); p && *p) return p;
  return BinaryDir() + "/service/kvtierd";
}

absl::StatusOr<ServerProcess> ServerProcess::StartKvtierd(
    const std::string& data_dir, const std::vector<std::string>& extra_args) {
  std::vector<std::string> args = {"--port", "0", "--data-dir", data_dir};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  return Start(KvtierdPath(), args);
}

absl::StatusOr<ServerProcess> ServerProcess::Start(const std::string& binary,
                                                   const std::vector<std::string>& args,
                                                   int timeout_ms,
                                                   std::string_view ready_prefix) {
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(binary.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  ServerProcess proc;
  proc.pid_ = pid;
  proc.stdout_fd_ = fds[0];

  std::string out;
  const int64_t deadline = NowMs() + timeout_ms;
  while (true) {
    if (auto nl = out.find('\n'); nl != std::string::npos) {
      std::string line = out.substr(0, nl);
      out.erase(0, nl + 1);
      if (line.rfind(ready_prefix, 0) == 0) {
        proc.address_ = line.substr(ready_prefix.size());
        auto colon = proc.address_.rfind(':');
        if (colon == std::string::npos ||
            !absl::SimpleAtoi(proc.address_.substr(colon + 1), &proc.port_)) {
          return absl::InternalError(absl::StrCat("bad ready line: ", line));
        }
        return proc;
      }
      continue;
    }
    const int64_t left = deadline - NowMs();
    if (left <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat(binary, " did not print its ready line in ", timeout_ms, " ms"));
    }
    pollfd p{proc.stdout_fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char buf[4096];
    ssize_t n = read(proc.stdout_fd_, buf, sizeof(buf));
    if (n <= 0) {
      return absl::InternalError(absl::StrCat(binary, " exited before it was ready"));
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

ServerProcess::ServerProcess(ServerProcess&& other) noexcept { *this = std::move(other); }

ServerProcess& ServerProcess::operator=(ServerProcess&& other) noexcept {
  if (this != &other) {
    Kill();
    pid_ = std::exchange(other.pid_, -1);
    stdout_fd_ = std::exchange(other.stdout_fd_, -1);
    address_ = std::move(other.address_);
    port_ = other.port_;
  }
  return *this;
}

ServerProcess::~ServerProcess() { Kill(); }

absl::StatusOr<int> ServerProcess::Terminate(int timeout_ms) {
  if (pid_ <= 0) return absl::FailedPreconditionError("not running");
  kill(pid_, SIGTERM);
  const int64_t deadline = NowMs() + timeout_ms;
  while (NowMs() < deadline) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      if (stdout_fd_ >= 0) close(std::exchange(stdout_fd_, -1));
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      return absl::InternalError(absl::StrCat("killed by signal ", WTERMSIG(status)));
    }
    usleep(10 * 1000);  // polling a child's exit, not synchronizing test logic
  }
  Kill();
  return absl::DeadlineExceededError("kvtierd did not exit after SIGTERM");
}

void ServerProcess::Kill() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  if (stdout_fd_ >= 0) close(std::exchange(stdout_fd_, -1));
}

}  // namespace kvtier::testing
