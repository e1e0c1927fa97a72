#include "common/byte_size.h"

#include <cctype>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace kvtier::common {
namespace {

struct Suffix {
  std::string_view short_name;
  std::string_view iec_name;
  int shift;
};

constexpr Suffix kSuffixes[] = {
    {"K", "KiB", 10}, {"M", "MiB", 20}, {"G", "GiB", 30}, {"T", "TiB", 40}};

absl::Status Refuse(std::string_view text, std::string_view what, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(Sv(what), ": \"", Sv(text), "\" ", Sv(why),
                                                 "; expected ", Sv(kByteSizeSyntax)));
}

}  // namespace

absl::StatusOr<uint64_t> ParseByteSize(std::string_view text, std::string_view what) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) {
    ++digits;
  }
  uint64_t n = 0;
  if (digits == 0) return Refuse(text, what, "is not a size");
  if (!absl::SimpleAtoi(Sv(text.substr(0, digits)), &n)) {
    return Refuse(text, what, "overflows 64 bits");
  }
  const std::string_view suffix = text.substr(digits);
  if (suffix.empty()) return n;
  for (const Suffix& s : kSuffixes) {
    if (suffix != s.short_name && suffix != s.iec_name) continue;
    if (n > (UINT64_MAX >> s.shift)) return Refuse(text, what, "overflows 64 bits");
    return n << s.shift;
  }
  return Refuse(text, what, absl::StrCat("has an unknown suffix \"", Sv(suffix), "\""));
}

}  // namespace kvtier::common
