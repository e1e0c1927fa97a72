#include "storage/store_types.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvtier::storage {

const char* TierName(Tier tier) {
  switch (tier) {
    case Tier::kNone:
      return "none";
    case Tier::kHot:
      return "hot";
    case Tier::kCold:
      return "cold";
  }
  return "none";
}

uint64_t PiecesSize(std::span<const std::string_view> pieces) {
  uint64_t n = 0;
  for (std::string_view p : pieces) n += p.size();
  return n;
}

std::string JoinPieces(std::span<const std::string_view> pieces) {
  std::string out;
  out.reserve(PiecesSize(pieces));
  for (std::string_view p : pieces) out.append(p);
  return out;
}

absl::StatusOr<kv::EncodedInfo> ParsePiecesHeader(std::span<const std::string_view> pieces) {
  std::array<uint8_t, kv::kEncodedHeaderBytes> header;
  size_t copied = 0;
  for (std::string_view p : pieces) {
    if (copied == header.size()) break;
    const size_t n = std::min(p.size(), header.size() - copied);
    std::memcpy(header.data() + copied, p.data(), n);
    copied += n;
  }
  return kv::ParseHeaderPrefix(std::span<const uint8_t>(header.data(), copied), PiecesSize(pieces));
}

bool IsValidName(std::string_view s) {
  if (s.empty() || s.size() > kMaxNameBytes) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '/' || c == '-';
    if (!ok) return false;
  }
  return true;
}

namespace {

bool ValidCodec(kv::CodecId codec) {
  for (kv::CodecId c : kv::AllCodecs()) {
    if (c == codec) return true;
  }
  return false;
}

}  // namespace

absl::Status NamespaceOptions::Validate() const {
  if (!IsValidName(name)) {
    return absl::InvalidArgumentError(absl::StrCat("name must be 1..", kMaxNameBytes,
                                                   " chars of [A-Za-z0-9._/-], got '", name, "'"));
  }
  if (!IsValidName(tenant)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tenant must be 1..", kMaxNameBytes, " chars of [A-Za-z0-9._/-], got '", tenant, "'"));
  }
  if (model_id.size() > kMaxModelIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("model_id longer than ", kMaxModelIdBytes));
  }
  RETURN_IF_ERROR(layout.Validate());
  if (sink_blocks > kMaxSinkBlocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("sink_blocks must be at most ", kMaxSinkBlocks, ", got ", sink_blocks));
  }
  if (!ValidCodec(codec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("codec id ", static_cast<int>(codec), " is unknown"));
  }
  if ((codec == kv::CodecId::kFp16 && layout.dtype != kv::Dtype::kFp16) ||
      (codec == kv::CodecId::kBf16 && layout.dtype != kv::Dtype::kBf16)) {
    return absl::InvalidArgumentError(absl::StrCat("codec ", kv::CodecName(codec),
                                                   " does not match layout dtype ",
                                                   kv::DtypeName(layout.dtype)));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::storage
