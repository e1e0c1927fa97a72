// Conversions between the kvtier.v1 proto types and the kv:: types both ends use
// (layouts, codecs), and the namespace spec check a client runs against the server's
// stored spec. Pure functions; thread-safe.
#ifndef KVTIER_PROTOCOL_CONVERT_H_
#define KVTIER_PROTOCOL_CONVERT_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv/codec.h"
#include "kv/layout.h"
#include "kvtier/v1/kvtier.pb.h"

namespace kvtier::protocol {

// Returns the proto form of `layout` (dtype always set).
v1::Layout ToProto(const kv::Layout& layout);

// Returns the kv form of `layout`. INVALID_ARGUMENT when the dtype is not fp16 or bf16 or
// kv::Layout::Validate fails (the message names the field).
absl::StatusOr<kv::Layout> FromProto(const v1::Layout& layout);

// Like FromProto but without validation: an unspecified (or unknown) dtype reads as fp16.
// For layouts that are only compared against a validated one.
kv::Layout LayoutFromProtoUnchecked(const v1::Layout& layout);

// The proto enum value of `codec` (the numbers are identical by construction).
v1::Codec CodecToProto(kv::CodecId codec);

// The codec `codec` names. INVALID_ARGUMENT "<field> <n> is unknown" for
// CODEC_UNSPECIFIED or a value that is not in kv::AllCodecs(), so a codec added to
// kv/codec.h and the proto enum is accepted without editing this check.
absl::StatusOr<kv::CodecId> CodecFromProto(v1::Codec codec, std::string_view field);

// Returns FAILED_PRECONDITION naming the first field where the stored namespace differs
// from the requested one ("namespace 'n': layout.head_dim mismatch: client has 128,
// server has 64"): layout fields (kv::FirstDifference; an unspecified dtype reads as
// fp16) and the codec when both name one. Informational fields are ignored.
absl::Status CheckSpecMatches(const v1::NamespaceSpec& requested, const v1::NamespaceSpec& stored);

}  // namespace kvtier::protocol

#endif  // KVTIER_PROTOCOL_CONVERT_H_
