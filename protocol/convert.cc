#include "protocol/convert.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/strings.h"

namespace kvtier::protocol {

v1::Layout ToProto(const kv::Layout& layout) {
  v1::Layout p;
  p.set_num_layers(layout.num_layers);
  p.set_num_kv_heads(layout.num_kv_heads);
  p.set_head_dim(layout.head_dim);
  p.set_tokens_per_block(layout.tokens_per_block);
  p.set_dtype(layout.dtype == kv::Dtype::kBf16 ? v1::DTYPE_BF16 : v1::DTYPE_FP16);
  p.set_sink_tokens(layout.sink_tokens);
  return p;
}

kv::Layout LayoutFromProtoUnchecked(const v1::Layout& p) {
  kv::Layout layout;
  layout.num_layers = p.num_layers();
  layout.num_kv_heads = p.num_kv_heads();
  layout.head_dim = p.head_dim();
  layout.tokens_per_block = p.tokens_per_block();
  layout.dtype = p.dtype() == v1::DTYPE_BF16 ? kv::Dtype::kBf16 : kv::Dtype::kFp16;
  layout.sink_tokens = p.sink_tokens();
  return layout;
}

absl::StatusOr<kv::Layout> FromProto(const v1::Layout& p) {
  if (p.dtype() != v1::DTYPE_FP16 && p.dtype() != v1::DTYPE_BF16) {
    return absl::InvalidArgumentError("layout.dtype must be fp16 or bf16");
  }
  kv::Layout layout = LayoutFromProtoUnchecked(p);
  RETURN_IF_ERROR(layout.Validate());
  return layout;
}

v1::Codec CodecToProto(kv::CodecId codec) { return static_cast<v1::Codec>(codec); }

absl::StatusOr<kv::CodecId> CodecFromProto(v1::Codec codec, std::string_view field) {
  for (const kv::CodecId c : kv::AllCodecs()) {
    if (static_cast<int>(c) == static_cast<int>(codec)) return c;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(Sv(field), " ", static_cast<int>(codec), " is unknown"));
}

absl::Status CheckSpecMatches(const v1::NamespaceSpec& requested,
                              const v1::NamespaceSpec& stored) {
  auto mismatch = [&](std::string_view field, std::string_view want, std::string_view have) {
    return absl::FailedPreconditionError(absl::StrCat("namespace '", stored.name(), "': ", Sv(field),
                                                      " mismatch: client has ", Sv(want),
                                                      ", server has ", Sv(have)));
  };
  if (auto diff = kv::FirstDifference(LayoutFromProtoUnchecked(requested.layout()),
                                      LayoutFromProtoUnchecked(stored.layout()))) {
    return mismatch(absl::StrCat("layout.", diff->field), diff->want, diff->got);
  }
  if (requested.codec() != v1::CODEC_UNSPECIFIED && stored.codec() != v1::CODEC_UNSPECIFIED &&
      requested.codec() != stored.codec()) {
    return mismatch("codec", v1::Codec_Name(requested.codec()), v1::Codec_Name(stored.codec()));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::protocol
