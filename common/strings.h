// String glue for Debian's Abseil 20220623, which is built with its own absl::string_view
// (ABSL_OPTION_USE_STD_STRING_VIEW 0): absl::StrCat and friends do not accept a
// std::string_view. Wrap such arguments with Sv().
#ifndef KVTIER_COMMON_STRINGS_H_
#define KVTIER_COMMON_STRINGS_H_

#include <string_view>

#include "absl/strings/string_view.h"

namespace kvtier {

// Returns an absl::string_view over the same bytes as `s`.
inline absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace kvtier

#endif  // KVTIER_COMMON_STRINGS_H_
