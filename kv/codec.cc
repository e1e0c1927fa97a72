#include "kv/codec.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "kv/codec_kernels.h"
#include "kv/codec_kivi2.h"
#include "kv/codec_lossless.h"
#include "kv/half.h"

namespace kvtier::kv {

// Multi-byte fields are copied with memcpy in host order.
static_assert(std::endian::native == std::endian::little, "kvtier codecs assume x86/ARM LE");

namespace {

using internal::CodecKernels;
using internal::kGroupSize;

constexpr uint8_t kMagic[4] = {'K', 'V', 'T', 'B'};
// Version 1: every codec's first body layout. Version 2: kivi2 with 3-bit keys, 2-bit
// values and int8 group ranges (codec_kivi2.h); Encode writes it for kivi2 only, every
// other codec is still written (and read) as version 1. Version 1 kivi2 blobs still decode.
constexpr uint16_t kFormatVersionV1 = 1;
constexpr uint16_t kFormatVersionKivi2 = 2;

constexpr CodecId kAllCodecs[] = {CodecId::kFp16,  CodecId::kBf16,  CodecId::kFp8E4M3,
                                  CodecId::kInt8,  CodecId::kInt4,  CodecId::kKivi2,
                                  CodecId::kKivi4, CodecId::kLossless};

enum class Kind { kRaw, kFp8, kPerToken, kKivi, kKivi2, kLossless };

// The format version Encode writes for `codec`.
uint16_t FormatVersionOf(CodecId codec) {
  return codec == CodecId::kKivi2 ? kFormatVersionKivi2 : kFormatVersionV1;
}

// The body kind of a blob of `codec` in format `version` (1, or 2 for kivi2).
Kind KindOf(CodecId codec, uint16_t version) {
  if (codec == CodecId::kKivi2 && version == kFormatVersionKivi2) return Kind::kKivi2;
  switch (codec) {
    case CodecId::kFp16:
    case CodecId::kBf16: return Kind::kRaw;
    case CodecId::kFp8E4M3: return Kind::kFp8;
    case CodecId::kInt8:
    case CodecId::kInt4: return Kind::kPerToken;
    case CodecId::kKivi2:
    case CodecId::kKivi4: return Kind::kKivi;
    case CodecId::kLossless: return Kind::kLossless;
  }
  return Kind::kRaw;
}

Kind KindOf(CodecId codec) { return KindOf(codec, FormatVersionOf(codec)); }

uint32_t BitsOf(CodecId codec) {
  switch (codec) {
    case CodecId::kInt8: return 8;
    case CodecId::kInt4:
    case CodecId::kKivi4: return 4;
    case CodecId::kKivi2: return 2;
    case CodecId::kFp8E4M3: return 8;
    default: return 16;
  }
}

bool IsKnownCodec(uint8_t id) {
  return std::find(std::begin(kAllCodecs), std::end(kAllCodecs), static_cast<CodecId>(id)) !=
         std::end(kAllCodecs);
}

uint32_t CeilDiv(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

// Bytes a per-token (row-grouped) slab of m tokens takes: scales, mins, packed codes.
uint64_t RowSlabBytes(uint32_t d, uint32_t m, uint32_t bits) {
  const uint64_t groups = uint64_t{m} * CeilDiv(d, kGroupSize);
  return groups * 4 + uint64_t{m} * CeilDiv(d * bits, 8);
}

// Bytes a KIVI key (column-grouped) slab of m tokens takes.
uint64_t ColSlabBytes(uint32_t d, uint32_t m, uint32_t bits) {
  const uint64_t groups = uint64_t{d} * CeilDiv(m, kGroupSize);
  return groups * 4 + uint64_t{d} * CeilDiv(m, 8 / bits);
}

uint64_t SlabBytes(CodecId codec, Kind kind, uint32_t kv, uint32_t d, uint32_t m) {
  switch (kind) {
    case Kind::kRaw:
    case Kind::kLossless: return uint64_t{m} * d * 2;  // unused: their bodies are not slabs
    case Kind::kFp8: return 4 + uint64_t{m} * d;
    case Kind::kPerToken: return RowSlabBytes(d, m, BitsOf(codec));
    case Kind::kKivi:
      return kv == 0 ? ColSlabBytes(d, m, BitsOf(codec)) : RowSlabBytes(d, m, BitsOf(codec));
    case Kind::kKivi2:
      return kv == 0 ? internal::Kivi2KeySlabBytes(d, m) : internal::Kivi2ValueSlabBytes(d, m);
  }
  return 0;
}

// Bytes of the quantized section for m tokens.
uint64_t QuantizedBytes(CodecId codec, Kind kind, const Layout& layout, uint32_t m) {
  if (m == 0) return 0;
  const uint64_t heads = uint64_t{layout.num_layers} * layout.num_kv_heads;
  return heads * (SlabBytes(codec, kind, 0, layout.head_dim, m) +
                  SlabBytes(codec, kind, 1, layout.head_dim, m));
}

// EncodedSize for a blob in format `version`.
uint64_t EncodedSizeOf(CodecId codec, uint16_t version, const Layout& layout,
                       uint32_t num_tokens, uint32_t raw_tokens) {
  const Kind kind = KindOf(codec, version);
  if (kind == Kind::kRaw) {
    return kEncodedHeaderBytes + uint64_t{num_tokens} * layout.BytesPerToken();
  }
  if (kind == Kind::kLossless) {
    return kEncodedHeaderBytes +
           internal::LosslessMaxBodyBytes(uint64_t{num_tokens} * layout.BytesPerToken() / 2);
  }
  raw_tokens = std::min(raw_tokens, num_tokens);
  return kEncodedHeaderBytes + uint64_t{raw_tokens} * layout.BytesPerToken() +
         QuantizedBytes(codec, kind, layout, num_tokens - raw_tokens);
}

uint16_t InfBits(Dtype dtype) { return dtype == Dtype::kBf16 ? 0x7f80 : 0x7c00; }

// The largest finite value of `dtype`: decoded values are clamped to +-this.
float MaxFinite(Dtype dtype) { return DtypeToFloat(dtype, InfBits(dtype) - 1); }

template <typename T>
void Put(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(v));
}
template <typename T>
T Get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Scratch space for one slab; reused across slabs of one call.
struct Scratch {
  std::vector<float> x;        // slab values as float
  std::vector<uint8_t> q;      // unpacked codes
  std::vector<float> mn, mx;   // per group
  std::vector<float> scale, inv;
  std::vector<uint16_t> bits16;  // dtype staging for params and unaligned data

  void Reserve(uint64_t elems, uint64_t groups) {
    x.resize(elems);
    q.resize(elems);
    mn.resize(groups);
    mx.resize(groups);
    scale.resize(groups);
    inv.resize(groups);
    bits16.resize(std::max(elems, 2 * groups));
  }
};

// Converts n dtype elements at `src` (any alignment) to float.
void LoadFloats(Dtype dtype, const uint8_t* src, size_t n, Scratch& s, float* out) {
  if (reinterpret_cast<uintptr_t>(src) % alignof(uint16_t) == 0) {
    DtypeToFloatN(dtype, reinterpret_cast<const uint16_t*>(src), out, n);
  } else {
    std::memcpy(s.bits16.data(), src, n * 2);
    DtypeToFloatN(dtype, s.bits16.data(), out, n);
  }
}

// Converts n floats to dtype elements at `dst` (any alignment).
void StoreFloats(Dtype dtype, const float* in, size_t n, Scratch& s, uint8_t* dst) {
  if (reinterpret_cast<uintptr_t>(dst) % alignof(uint16_t) == 0) {
    FloatToDtypeN(dtype, in, reinterpret_cast<uint16_t*>(dst), n);
  } else {
    FloatToDtypeN(dtype, in, s.bits16.data(), n);
    std::memcpy(dst, s.bits16.data(), n * 2);
  }
}

// From per-group min/max in s.mn / s.mx, computes the stored params (see
// CodecKernels::make_params), writes them at `out` (scales then mins, dtype bits) and
// leaves the float scale in s.scale and its reciprocal in s.inv.
void MakeParams(const CodecKernels& k, Dtype dtype, size_t groups, uint32_t qmax, Scratch& s,
                uint8_t* out) {
  uint16_t* codes = s.bits16.data();
  k.make_params(dtype, groups, qmax, s.mn.data(), s.mx.data(), s.scale.data(), s.inv.data(),
                codes, codes + groups);
  std::memcpy(out, codes, groups * 4);
}

// Reads `groups` scales then mins (dtype) from `in` into s.scale / s.mn. DATA_LOSS if a
// scale is negative or any param is not finite.
absl::Status ReadParams(Dtype dtype, size_t groups, const uint8_t* in, Scratch& s) {
  std::memcpy(s.bits16.data(), in, groups * 4);
  const uint16_t inf = InfBits(dtype);
  uint32_t bad = 0;
  for (size_t g = 0; g < groups; ++g) {
    const uint16_t sc = s.bits16[g];
    const uint16_t mn = s.bits16[groups + g];
    bad |= static_cast<uint32_t>(sc >= inf) | static_cast<uint32_t>((mn & 0x7fff) >= inf);
  }
  if (bad) return absl::DataLossError("encoded block has a negative or non-finite scale or min");
  DtypeToFloatN(dtype, s.bits16.data(), s.scale.data(), groups);
  DtypeToFloatN(dtype, s.bits16.data() + groups, s.mn.data(), groups);
  return absl::OkStatus();
}

// Encodes one per-token slab (m rows of d) from s.x into out.
void EncodeRowSlab(const CodecKernels& k, Dtype dtype, uint32_t d, uint32_t m, uint32_t bits,
                   Scratch& s, uint8_t* out) {
  const size_t groups = size_t{m} * CeilDiv(d, kGroupSize);
  k.min_max_rows(s.x.data(), m, d, s.mn.data(), s.mx.data());
  const uint32_t qmax = (1u << bits) - 1;
  MakeParams(k, dtype, groups, qmax, s, out);
  uint8_t* codes = out + groups * 4;
  if (bits == 8) {
    k.quant_rows(s.x.data(), m, d, s.mn.data(), s.inv.data(), qmax, codes);
  } else {
    k.quant_rows(s.x.data(), m, d, s.mn.data(), s.inv.data(), qmax, s.q.data());
    k.pack_rows(s.q.data(), m, d, bits, codes);
  }
}

absl::Status DecodeRowSlab(const CodecKernels& k, Dtype dtype, uint32_t d, uint32_t m,
                           uint32_t bits, const uint8_t* in, Scratch& s) {
  const size_t groups = size_t{m} * CeilDiv(d, kGroupSize);
  RETURN_IF_ERROR(ReadParams(dtype, groups, in, s));
  const uint8_t* codes = in + groups * 4;
  if (bits != 8) {
    k.unpack_rows(codes, m, d, bits, s.q.data());
    codes = s.q.data();
  }
  k.dequant_rows(codes, m, d, s.scale.data(), s.mn.data(), MaxFinite(dtype), s.x.data());
  return absl::OkStatus();
}

// Encodes one KIVI key slab: per channel, chunks of up to 32 tokens.
void EncodeColSlab(const CodecKernels& k, Dtype dtype, uint32_t d, uint32_t m, uint32_t bits,
                   Scratch& s, uint8_t* out) {
  const uint32_t chunks = CeilDiv(m, kGroupSize);
  const size_t groups = size_t{chunks} * d;
  for (uint32_t c = 0; c < chunks; ++c) {
    const uint32_t t0 = c * kGroupSize;
    const uint32_t rows = std::min(kGroupSize, m - t0);
    k.min_max_cols(s.x.data() + size_t{t0} * d, rows, d, s.mn.data() + size_t{c} * d,
                   s.mx.data() + size_t{c} * d);
  }
  const uint32_t qmax = (1u << bits) - 1;
  MakeParams(k, dtype, groups, qmax, s, out);
  for (uint32_t c = 0; c < chunks; ++c) {
    const uint32_t t0 = c * kGroupSize;
    const uint32_t rows = std::min(kGroupSize, m - t0);
    k.quant_cols(s.x.data() + size_t{t0} * d, rows, d, s.mn.data() + size_t{c} * d,
                 s.inv.data() + size_t{c} * d, qmax, s.q.data() + size_t{t0} * d);
  }
  k.pack_cols(s.q.data(), m, d, bits, out + groups * 4);
}

absl::Status DecodeColSlab(const CodecKernels& k, Dtype dtype, uint32_t d, uint32_t m,
                           uint32_t bits, const uint8_t* in, Scratch& s) {
  const uint32_t chunks = CeilDiv(m, kGroupSize);
  const size_t groups = size_t{chunks} * d;
  RETURN_IF_ERROR(ReadParams(dtype, groups, in, s));
  k.unpack_cols(in + groups * 4, m, d, bits, s.q.data());
  for (uint32_t c = 0; c < chunks; ++c) {
    const uint32_t t0 = c * kGroupSize;
    const uint32_t rows = std::min(kGroupSize, m - t0);
    k.dequant_cols(s.q.data() + size_t{t0} * d, rows, d, s.scale.data() + size_t{c} * d,
                   s.mn.data() + size_t{c} * d, MaxFinite(dtype), s.x.data() + size_t{t0} * d);
  }
  return absl::OkStatus();
}

}  // namespace

void EncodeRawHeader(CodecId codec, const Layout& layout, uint32_t num_tokens,
                     uint32_t raw_tokens, uint64_t body_bytes, uint8_t* out) {
  std::memcpy(out, kMagic, 4);
  Put<uint16_t>(out + 4, FormatVersionOf(codec));
  out[6] = static_cast<uint8_t>(codec);
  out[7] = static_cast<uint8_t>(layout.dtype);
  Put<uint32_t>(out + 8, layout.num_layers);
  Put<uint32_t>(out + 12, layout.num_kv_heads);
  Put<uint32_t>(out + 16, layout.head_dim);
  Put<uint32_t>(out + 20, num_tokens);
  Put<uint32_t>(out + 24, raw_tokens);
  Put<uint32_t>(out + 28, 0);
  Put<uint64_t>(out + 32, body_bytes);
}

std::span<const CodecId> AllCodecs() { return kAllCodecs; }

const char* CodecName(CodecId codec) {
  switch (codec) {
    case CodecId::kFp16: return "fp16";
    case CodecId::kBf16: return "bf16";
    case CodecId::kFp8E4M3: return "fp8_e4m3";
    case CodecId::kInt8: return "int8";
    case CodecId::kInt4: return "int4";
    case CodecId::kKivi2: return "kivi2";
    case CodecId::kKivi4: return "kivi4";
    case CodecId::kLossless: return "lossless";
  }
  return "unknown";
}

absl::StatusOr<CodecId> ParseCodecName(std::string_view name) {
  std::string names;
  for (CodecId codec : kAllCodecs) {
    if (name == CodecName(codec)) return codec;
    absl::StrAppend(&names, names.empty() ? "" : ", ", CodecName(codec));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown codec name \"", Sv(name), "\" (want one of ", names, ")"));
}

uint64_t EncodedSize(CodecId codec, const Layout& layout, uint32_t num_tokens,
                     uint32_t raw_tokens) {
  return EncodedSizeOf(codec, FormatVersionOf(codec), layout, num_tokens, raw_tokens);
}

uint32_t ProtectedTokens(const Layout& layout, uint32_t block_index, uint32_t num_tokens,
                         const CodecOptions& options) {
  if (!options.keep_sinks || block_index != 0) return 0;
  return std::min(layout.sink_tokens, num_tokens);
}

absl::StatusOr<std::string> Encode(CodecId codec, const Layout& layout,
                                   uint32_t block_index, std::span<const uint8_t> raw,
                                   const CodecOptions& options) {
  return internal::EncodeWithKernels(internal::ActiveKernels(), codec, layout, block_index, raw,
                                     options);
}

absl::StatusOr<std::string> internal::EncodeWithKernels(const CodecKernels& k, CodecId codec,
                                                        const Layout& layout,
                                                        uint32_t block_index,
                                                        std::span<const uint8_t> raw,
                                                        const CodecOptions& options) {
  RETURN_IF_ERROR(layout.Validate());
  if (!IsKnownCodec(static_cast<uint8_t>(codec))) {
    return absl::InvalidArgumentError(
        absl::StrCat("codec id ", static_cast<int>(codec), " is unknown"));
  }
  const uint64_t bpt = layout.BytesPerToken();
  if (raw.empty() || raw.size() % bpt != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw payload size ", raw.size(), " is not a positive multiple of ", bpt,
                     " bytes per token (", layout.DebugString(), ")"));
  }
  if (raw.size() / bpt > UINT32_MAX) {
    return absl::InvalidArgumentError("raw payload holds too many tokens");
  }
  const auto n = static_cast<uint32_t>(raw.size() / bpt);
  Layout blob = layout;
  blob.tokens_per_block = n;
  blob.sink_tokens = 0;
  RETURN_IF_ERROR(blob.Validate());

  const Kind kind = KindOf(codec);
  const Dtype dtype = layout.dtype;
  const uint32_t d = layout.head_dim;
  const uint64_t slabs = 2ull * layout.num_layers * layout.num_kv_heads;
  if (kind == Kind::kRaw) {
    const Dtype want = codec == CodecId::kFp16 ? Dtype::kFp16 : Dtype::kBf16;
    if (want != dtype) {
      return absl::InvalidArgumentError(absl::StrCat("codec ", CodecName(codec),
                                                     " does not match layout.dtype ",
                                                     DtypeName(dtype)));
    }
  }
  if (kind == Kind::kFp8 && !options.fp8_scales.empty()) {
    if (options.fp8_scales.size() != slabs) {
      return absl::InvalidArgumentError(
          absl::StrCat("options.fp8_scales has ", options.fp8_scales.size(),
                       " values; want 2 * num_layers * num_kv_heads = ", slabs));
    }
    for (size_t i = 0; i < slabs; ++i) {
      const float v = options.fp8_scales[i];
      if (!std::isfinite(v) || !(v >= FLT_MIN)) {
        return absl::InvalidArgumentError(
            absl::StrCat("options.fp8_scales[", i, "] = ", v, " is not a positive normal float"));
      }
    }
  }
  if (kind == Kind::kPerToken || kind == Kind::kKivi || kind == Kind::kKivi2) {
    // Min-max quantization cannot represent inf/NaN; refuse rather than emit garbage.
    // bf16 magnitudes >= 2^126 are refused too, so code * scale + min stays finite.
    const uint16_t limit = dtype == Dtype::kBf16 ? 0x7e80 : InfBits(dtype);
    if (k.max_abs_bits(raw.data(), raw.size() / 2, 0xffff) >= limit) {
      return absl::InvalidArgumentError(absl::StrCat(
          "raw payload holds inf or NaN", dtype == Dtype::kBf16 ? " or |x| >= 2^126" : "",
          "; codec ", CodecName(codec), " needs finite values"));
    }
  }

  if (kind == Kind::kLossless) {
    std::string out(kEncodedHeaderBytes, '\0');
    RETURN_IF_ERROR(internal::AppendLosslessBody(k, raw, out));
    EncodeRawHeader(codec, layout, n, n, out.size() - kEncodedHeaderBytes,
                    reinterpret_cast<uint8_t*>(out.data()));
    return out;
  }
  const uint32_t r = kind == Kind::kRaw ? n : ProtectedTokens(layout, block_index, n, options);
  const uint64_t size = EncodedSize(codec, layout, n, r);
  std::string out(size, '\0');
  uint8_t* o = reinterpret_cast<uint8_t*>(out.data());
  EncodeRawHeader(codec, layout, n, r, size - kEncodedHeaderBytes, o);
  o += kEncodedHeaderBytes;
  if (kind == Kind::kRaw) {
    std::memcpy(o, raw.data(), raw.size());
    return out;
  }
  const uint64_t slab_in = uint64_t{n} * d * 2;  // source bytes per slab
  if (r > 0) {
    const uint64_t raw_part = uint64_t{r} * d * 2;
    for (uint64_t sl = 0; sl < slabs; ++sl) {
      std::memcpy(o, raw.data() + sl * slab_in, raw_part);
      o += raw_part;
    }
  }
  const uint32_t m = n - r;
  if (m == 0) return out;

  Scratch s;
  const uint64_t elems = uint64_t{m} * d;
  s.Reserve(elems, std::max<uint64_t>(uint64_t{m} * CeilDiv(d, kGroupSize),
                                      uint64_t{d} * CeilDiv(m, kGroupSize)));
  const uint32_t bits = BitsOf(codec);
  for (uint64_t sl = 0; sl < slabs; ++sl) {
    const uint8_t* src = raw.data() + sl * slab_in + uint64_t{r} * d * 2;
    const uint32_t kv_of_slab = static_cast<uint32_t>((sl / layout.num_kv_heads) % 2);
    switch (kind) {
      case Kind::kFp8: {
        float scale;
        if (!options.fp8_scales.empty()) {
          scale = options.fp8_scales[sl];
        } else {
          const float amax = DtypeToFloat(dtype, k.max_abs_bits(src, elems, InfBits(dtype)));
          scale = std::max(amax / 448.0f, FLT_MIN);
        }
        Put<float>(o, scale);
        LoadFloats(dtype, src, elems, s, s.x.data());
        k.encode_fp8(s.x.data(), elems, 1.0f / scale, o + 4);
        break;
      }
      case Kind::kPerToken:
        LoadFloats(dtype, src, elems, s, s.x.data());
        EncodeRowSlab(k, dtype, d, m, bits, s, o);
        break;
      case Kind::kKivi:
        LoadFloats(dtype, src, elems, s, s.x.data());
        if (kv_of_slab == 0) {
          EncodeColSlab(k, dtype, d, m, bits, s, o);
        } else {
          EncodeRowSlab(k, dtype, d, m, bits, s, o);
        }
        break;
      case Kind::kKivi2:
        LoadFloats(dtype, src, elems, s, s.x.data());
        if (kv_of_slab == 0) {
          internal::EncodeKivi2Keys(dtype, s.x.data(), d, m, o);
        } else {
          internal::EncodeKivi2Values(dtype, s.x.data(), d, m, o);
        }
        break;
      case Kind::kRaw:
      case Kind::kLossless: break;
    }
    o += SlabBytes(codec, kind, kv_of_slab, d, m);
  }
  return out;
}

absl::StatusOr<EncodedInfo> ParseHeader(std::span<const uint8_t> encoded) {
  return ParseHeaderPrefix(encoded.first(std::min<size_t>(encoded.size(), kEncodedHeaderBytes)),
                           encoded.size());
}

absl::StatusOr<EncodedInfo> ParseHeaderPrefix(std::span<const uint8_t> header,
                                              uint64_t encoded_size) {
  if (encoded_size < kEncodedHeaderBytes || header.size() < kEncodedHeaderBytes) {
    return absl::DataLossError(absl::StrCat("encoded block is ", encoded_size,
                                            " bytes, shorter than its ", kEncodedHeaderBytes,
                                            "-byte header"));
  }
  const uint8_t* h = header.data();
  if (std::memcmp(h, kMagic, 4) != 0) {
    return absl::InvalidArgumentError("encoded block has a bad magic (want \"KVTB\")");
  }
  const auto version = Get<uint16_t>(h + 4);
  if (version != kFormatVersionV1 && version != kFormatVersionKivi2) {
    return absl::InvalidArgumentError(absl::StrCat("encoded block format version ", version,
                                                   " is not supported (want ",
                                                   kFormatVersionV1, " or ",
                                                   kFormatVersionKivi2, ")"));
  }
  if (!IsKnownCodec(h[6])) {
    return absl::InvalidArgumentError(
        absl::StrCat("encoded block has unknown codec id ", static_cast<int>(h[6])));
  }
  if (version == kFormatVersionKivi2 && static_cast<CodecId>(h[6]) != CodecId::kKivi2) {
    return absl::InvalidArgumentError(
        absl::StrCat("encoded block format version 2 is only defined for kivi2, not codec id ",
                     static_cast<int>(h[6])));
  }
  if (h[7] != static_cast<uint8_t>(Dtype::kFp16) && h[7] != static_cast<uint8_t>(Dtype::kBf16)) {
    return absl::InvalidArgumentError(
        absl::StrCat("encoded block has unknown dtype ", static_cast<int>(h[7])));
  }
  EncodedInfo info;
  info.format_version = version;
  info.codec = static_cast<CodecId>(h[6]);
  info.layout.dtype = static_cast<Dtype>(h[7]);
  info.layout.num_layers = Get<uint32_t>(h + 8);
  info.layout.num_kv_heads = Get<uint32_t>(h + 12);
  info.layout.head_dim = Get<uint32_t>(h + 16);
  info.num_tokens = Get<uint32_t>(h + 20);
  info.raw_tokens = Get<uint32_t>(h + 24);
  info.layout.tokens_per_block = info.num_tokens;
  info.layout.sink_tokens = 0;
  if (Get<uint32_t>(h + 28) != 0) {
    return absl::InvalidArgumentError("encoded block has nonzero reserved header bits");
  }
  if (absl::Status st = info.layout.Validate(); !st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("encoded block header: ", st.message()));
  }
  const Kind kind = KindOf(info.codec, version);
  if (kind == Kind::kRaw) {
    const Dtype want = info.codec == CodecId::kFp16 ? Dtype::kFp16 : Dtype::kBf16;
    if (want != info.layout.dtype) {
      return absl::InvalidArgumentError("encoded block codec does not match its dtype");
    }
  }
  if ((kind == Kind::kRaw || kind == Kind::kLossless) && info.raw_tokens != info.num_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "encoded block raw_tokens must equal num_tokens for codec ", CodecName(info.codec)));
  } else if (info.raw_tokens > info.num_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("encoded block raw_tokens ",
                                                   info.raw_tokens, " exceeds num_tokens ",
                                                   info.num_tokens));
  }
  const uint64_t body = Get<uint64_t>(h + 32);
  if (body != encoded_size - kEncodedHeaderBytes) {
    return absl::DataLossError(absl::StrCat("encoded block body_bytes ", body, " but ",
                                            encoded_size - kEncodedHeaderBytes,
                                            " bytes follow the header"));
  }
  info.raw_bytes = uint64_t{info.num_tokens} * info.layout.BytesPerToken();
  const uint64_t want =
      EncodedSizeOf(info.codec, version, info.layout, info.num_tokens, info.raw_tokens);
  if (kind == Kind::kLossless) {
    // Data-dependent size: from what the smallest planes take up to the bound.
    const uint64_t least = kEncodedHeaderBytes + internal::LosslessMinBodyBytes(info.raw_bytes / 2);
    if (encoded_size > want || encoded_size < least) {
      return absl::DataLossError(absl::StrCat("encoded block is ", encoded_size,
                                              " bytes; its header implies ", least, " to ",
                                              want));
    }
  } else if (want != encoded_size) {
    return absl::DataLossError(
        absl::StrCat("encoded block is ", encoded_size, " bytes; its header implies ", want));
  }
  info.encoded_bytes = encoded_size;
  return info;
}

absl::Status Decode(std::span<const uint8_t> encoded, std::span<uint8_t> raw_out) {
  return internal::DecodeWithKernels(internal::ActiveKernels(), encoded, raw_out);
}

absl::Status internal::DecodeWithKernels(const CodecKernels& k,
                                         std::span<const uint8_t> encoded,
                                         std::span<uint8_t> raw_out) {
  ASSIGN_OR_RETURN(const EncodedInfo info, ParseHeader(encoded));
  if (raw_out.size() != info.raw_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("raw_out is ", raw_out.size(),
                                                   " bytes; the block decodes to ",
                                                   info.raw_bytes));
  }
  const Layout& layout = info.layout;
  const Kind kind = KindOf(info.codec, info.format_version);
  const Dtype dtype = layout.dtype;
  const uint32_t d = layout.head_dim;
  const uint32_t n = info.num_tokens;
  const uint32_t r = info.raw_tokens;
  const uint8_t* in = encoded.data() + kEncodedHeaderBytes;
  if (kind == Kind::kRaw) {
    std::memcpy(raw_out.data(), in, info.raw_bytes);
    return absl::OkStatus();
  }
  if (kind == Kind::kLossless) {
    return internal::DecodeLosslessBody(k, encoded.subspan(kEncodedHeaderBytes), raw_out);
  }
  const uint64_t slabs = 2ull * layout.num_layers * layout.num_kv_heads;
  const uint64_t slab_out = uint64_t{n} * d * 2;
  if (r > 0) {
    const uint64_t raw_part = uint64_t{r} * d * 2;
    for (uint64_t sl = 0; sl < slabs; ++sl) {
      std::memcpy(raw_out.data() + sl * slab_out, in, raw_part);
      in += raw_part;
    }
  }
  const uint32_t m = n - r;
  if (m == 0) return absl::OkStatus();
  Scratch s;
  const uint64_t elems = uint64_t{m} * d;
  s.Reserve(elems, std::max<uint64_t>(uint64_t{m} * CeilDiv(d, kGroupSize),
                                      uint64_t{d} * CeilDiv(m, kGroupSize)));
  const uint32_t bits = BitsOf(info.codec);
  for (uint64_t sl = 0; sl < slabs; ++sl) {
    uint8_t* dst = raw_out.data() + sl * slab_out + uint64_t{r} * d * 2;
    const uint32_t kv = static_cast<uint32_t>((sl / layout.num_kv_heads) % 2);
    switch (kind) {
      case Kind::kFp8: {
        const float scale = Get<float>(in);
        if (!std::isfinite(scale) || !(scale > 0.0f)) {
          return absl::DataLossError(
              absl::StrCat("encoded fp8 block has invalid scale ", scale, " in slab ", sl));
        }
        k.decode_fp8(in + 4, elems, scale, MaxFinite(dtype), s.x.data());
        break;
      }
      case Kind::kPerToken:
        RETURN_IF_ERROR(DecodeRowSlab(k, dtype, d, m, bits, in, s));
        break;
      case Kind::kKivi:
        if (kv == 0) {
          RETURN_IF_ERROR(DecodeColSlab(k, dtype, d, m, bits, in, s));
        } else {
          RETURN_IF_ERROR(DecodeRowSlab(k, dtype, d, m, bits, in, s));
        }
        break;
      case Kind::kKivi2:
        if (kv == 0) {
          RETURN_IF_ERROR(internal::DecodeKivi2Keys(dtype, in, d, m, s.x.data()));
        } else {
          RETURN_IF_ERROR(internal::DecodeKivi2Values(dtype, in, d, m, s.x.data()));
        }
        break;
      case Kind::kRaw:
      case Kind::kLossless: break;
    }
    StoreFloats(dtype, s.x.data(), elems, s, dst);
    in += SlabBytes(info.codec, kind, kv, d, m);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> DecodeToString(std::span<const uint8_t> encoded) {
  ASSIGN_OR_RETURN(const EncodedInfo info, ParseHeader(encoded));
  std::string out(info.raw_bytes, '\0');
  RETURN_IF_ERROR(Decode(encoded, {reinterpret_cast<uint8_t*>(out.data()), out.size()}));
  return out;
}

}  // namespace kvtier::kv
