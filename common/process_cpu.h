// CPU time of a process, for benchmarks that report CPU seconds per GB (`kvtier bench`,
// tests/bench/). Thread-safe.
#ifndef KVTIER_COMMON_PROCESS_CPU_H_
#define KVTIER_COMMON_PROCESS_CPU_H_

#include <cstdint>

namespace kvtier::common {

// CPU seconds (user + system, all threads) used so far by this process.
double SelfCpuSeconds();

// CPU seconds (user + system) used so far by process `pid`, from /proc/<pid>/stat; -1 if
// `pid` <= 0 or it cannot be read.
double ProcessCpuSeconds(int64_t pid);

}  // namespace kvtier::common

#endif  // KVTIER_COMMON_PROCESS_CPU_H_
