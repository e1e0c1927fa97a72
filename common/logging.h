// A small logging shim (Abseil 20220623 has no absl/log).
//
//   KVTIER_LOG(INFO) << "opened " << path;     // INFO, WARNING, ERROR go to stderr
//   KVTIER_CHECK(ptr != nullptr) << "why";      // aborts with the message on failure
//
// Only for broken invariants and operator-facing messages: fallible operations return
// absl::Status instead. Thread-safe: each statement writes one line with one write().
#ifndef KVTIER_COMMON_LOGGING_H_
#define KVTIER_COMMON_LOGGING_H_

#include <sstream>
#include <string_view>

namespace kvtier::common {

enum class LogSeverity { kInfo, kWarning, kError, kFatal };

// Sets the lowest severity that is printed. Default: kInfo. Thread-safe.
void SetMinLogSeverity(LogSeverity severity);

// One log statement; writes its line when destroyed (and aborts for kFatal).
class LogMessage {
 public:
  LogMessage(const char* file, int line, LogSeverity severity);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;

  std::ostream& stream() { return stream_; }

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};

// Swallows the stream expression when a CHECK passes.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace kvtier::common

#define KVTIER_LOG_SEVERITY_INFO ::kvtier::common::LogSeverity::kInfo
#define KVTIER_LOG_SEVERITY_WARNING ::kvtier::common::LogSeverity::kWarning
#define KVTIER_LOG_SEVERITY_ERROR ::kvtier::common::LogSeverity::kError
#define KVTIER_LOG_SEVERITY_FATAL ::kvtier::common::LogSeverity::kFatal

#define KVTIER_LOG(severity) \
  ::kvtier::common::LogMessage(__FILE__, __LINE__, KVTIER_LOG_SEVERITY_##severity).stream()

#define KVTIER_CHECK(cond)                       \
  (cond) ? (void)0                               \
         : ::kvtier::common::LogVoidify() &      \
               KVTIER_LOG(FATAL) << "check failed: " #cond " "

#endif  // KVTIER_COMMON_LOGGING_H_
