#include "storage/namespace_record.h"

#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "kv/layout.h"

#include "absl/strings/str_cat.h"

namespace kvtier::storage {

std::string SerializeNamespace(const NamespaceOptions& ns) {
  std::string out;
  auto put_str = [&out](std::string_view s) {
    uint32_t n = static_cast<uint32_t>(s.size());
    out.append(reinterpret_cast<const char*>(&n), 4);
    out.append(s);
  };
  auto put_u32 = [&out](uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
  put_u32(kNamespaceRecordVersion);
  put_str(ns.name);
  put_str(ns.tenant);
  put_str(ns.model_id);
  put_u32(ns.layout.num_layers);
  put_u32(ns.layout.num_kv_heads);
  put_u32(ns.layout.head_dim);
  put_u32(ns.layout.tokens_per_block);
  put_u32(static_cast<uint32_t>(ns.layout.dtype));
  put_u32(ns.layout.sink_tokens);
  put_u32(static_cast<uint32_t>(ns.codec));
  put_u32(ns.keep_sinks);
  put_u32(ns.write_through);
  put_u32(ns.cold_zstd);
  put_u32(ns.sink_blocks);
  return out;
}

absl::StatusOr<NamespaceOptions> ParseNamespace(std::string_view in) {
  NamespaceOptions ns;
  bool ok = true;
  auto get_u32 = [&]() -> uint32_t {
    if (in.size() < 4) {
      ok = false;
      return 0;
    }
    uint32_t v;
    std::memcpy(&v, in.data(), 4);
    in.remove_prefix(4);
    return v;
  };
  auto get_str = [&]() -> std::string {
    uint32_t n = get_u32();
    if (!ok || in.size() < n) {
      ok = false;
      return "";
    }
    std::string s(in.substr(0, n));
    in.remove_prefix(n);
    return s;
  };
  if (get_u32() != kNamespaceRecordVersion)
    return absl::DataLossError("namespace record version is unknown");
  ns.name = get_str();
  ns.tenant = get_str();
  ns.model_id = get_str();
  ns.layout.num_layers = get_u32();
  ns.layout.num_kv_heads = get_u32();
  ns.layout.head_dim = get_u32();
  ns.layout.tokens_per_block = get_u32();
  // Enum and flag fields are range-checked before the cast, so a damaged 0x101 is never
  // read back as 0x01.
  const uint32_t dtype = get_u32();
  ns.layout.sink_tokens = get_u32();
  const uint32_t codec = get_u32();
  const uint32_t keep_sinks = get_u32();
  const uint32_t write_through = get_u32();
  const uint32_t cold_zstd = get_u32();
  ns.sink_blocks = get_u32();
  if (!ok || !in.empty()) return absl::DataLossError("namespace record is malformed");
  if (dtype > 0xff || codec > 0xff || keep_sinks > 1 || write_through > 1 || cold_zstd > 1) {
    return absl::DataLossError("namespace record has an out-of-range enum or flag field");
  }
  ns.layout.dtype = static_cast<kv::Dtype>(dtype);
  ns.codec = static_cast<kv::CodecId>(codec);
  ns.keep_sinks = keep_sinks != 0;
  ns.write_through = write_through != 0;
  ns.cold_zstd = cold_zstd != 0;
  if (absl::Status valid = ns.Validate(); !valid.ok()) {
    return absl::DataLossError(absl::StrCat("namespace record is invalid: ", valid.message()));
  }
  return ns;
}

std::string FirstNamespaceDifference(const NamespaceOptions& a, const NamespaceOptions& b) {
  if (a.tenant != b.tenant) return "tenant";
  if (a.model_id != b.model_id) return "model_id";
  if (std::optional<kv::LayoutDiff> d = kv::FirstDifference(a.layout, b.layout,
                                                             /*compare_tokens=*/true)) {
    return absl::StrCat("layout.", d->field);
  }
  if (a.codec != b.codec) return "codec";
  if (a.keep_sinks != b.keep_sinks) return "keep_sinks";
  if (a.write_through != b.write_through) return "write_through";
  if (a.cold_zstd != b.cold_zstd) return "cold_zstd";
  if (a.sink_blocks != b.sink_blocks) return "sink_blocks";
  return "";
}

}  // namespace kvtier::storage
