#include "common/logging.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <ctime>
#include <string>

namespace kvtier::common {
namespace {

std::atomic<int> g_min_severity{static_cast<int>(LogSeverity::kInfo)};

char SeverityChar(LogSeverity s) {
  switch (s) {
    case LogSeverity::kInfo: return 'I';
    case LogSeverity::kWarning: return 'W';
    case LogSeverity::kError: return 'E';
    case LogSeverity::kFatal: return 'F';
  }
  return '?';
}

}  // namespace

void SetMinLogSeverity(LogSeverity severity) {
  g_min_severity.store(static_cast<int>(severity), std::memory_order_relaxed);
}

LogMessage::LogMessage(const char* file, int line, LogSeverity severity)
    : severity_(severity) {
  std::string_view path(file);
  if (auto slash = path.rfind('/'); slash != std::string_view::npos) {
    path.remove_prefix(slash + 1);
  }
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  tm utc;
  gmtime_r(&ts.tv_sec, &utc);
  char when[32];
  strftime(when, sizeof(when), "%m%d %H:%M:%S", &utc);
  stream_ << SeverityChar(severity) << when << '.' << (ts.tv_nsec / 1000) << ' ' << path
          << ':' << line << "] ";
}

LogMessage::~LogMessage() {
  if (static_cast<int>(severity_) >= g_min_severity.load(std::memory_order_relaxed) ||
      severity_ == LogSeverity::kFatal) {
    stream_ << '\n';
    const std::string line = stream_.str();
    // One write() per line so concurrent lines do not interleave.
    ssize_t unused = ::write(STDERR_FILENO, line.data(), line.size());
    (void)unused;
  }
  if (severity_ == LogSeverity::kFatal) std::abort();
}

}  // namespace kvtier::common
