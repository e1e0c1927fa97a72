// Byte sizes written by people: "4194304", "4K" / "4KiB", "4M" / "4MiB", "4G" / "4GiB",
// "4T" / "4TiB" (powers of 1024). Decimal units ("4MB", "4KB") are refused rather than
// guessed at. Used by kvtierd's flags and config and by the `kvtier` tool. Thread-safe.
#ifndef KVTIER_COMMON_BYTE_SIZE_H_
#define KVTIER_COMMON_BYTE_SIZE_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvtier::common {

// The accepted forms, for usage texts and error messages.
inline constexpr std::string_view kByteSizeSyntax =
    "a byte count (4194304) or a binary size: 4K, 4M, 4G, 4T or 4KiB, 4MiB, 4GiB, 4TiB";

// Parses `text` into bytes. INVALID_ARGUMENT "<what>: ..." naming the text and listing
// the accepted forms (kByteSizeSyntax) for anything else: empty, no digits, an unknown or
// decimal suffix, or a value over 2^64 - 1.
absl::StatusOr<uint64_t> ParseByteSize(std::string_view text, std::string_view what);

}  // namespace kvtier::common

#endif  // KVTIER_COMMON_BYTE_SIZE_H_
