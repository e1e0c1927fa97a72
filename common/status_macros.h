// Status helpers that Abseil 20220623 lacks.
//
//   RETURN_IF_ERROR(expr);            // returns the absl::Status of expr if not ok
//   ASSIGN_OR_RETURN(auto x, expr);   // x = *expr, or returns expr.status()
//
// Both evaluate expr exactly once. Usable in functions returning absl::Status or
// absl::StatusOr<T>.
#ifndef KVTIER_COMMON_STATUS_MACROS_H_
#define KVTIER_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KVTIER_CONCAT_INNER_(a, b) a##b
#define KVTIER_CONCAT_(a, b) KVTIER_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                           \
  do {                                                  \
    ::absl::Status kvtier_status_ = (expr);             \
    if (!kvtier_status_.ok()) return kvtier_status_;    \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  KVTIER_ASSIGN_OR_RETURN_IMPL_(KVTIER_CONCAT_(kvtier_statusor_, __LINE__), lhs, expr)

#define KVTIER_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return statusor.status();            \
  lhs = std::move(*statusor)

#endif  // KVTIER_COMMON_STATUS_MACROS_H_
