#include "kv/codec_lossless.h"

#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace kvtier::kv::internal {
namespace {

constexpr uint64_t kDirectoryBytes = 12;
constexpr uint8_t kStored = 0;
constexpr uint8_t kZstd = 1;
// Level 1 with a 7-byte minimum match and the smallest hash table (64 entries): KV high
// bytes are low-entropy noise, where short matches cost more than Huffman-coded literals.
// On the synthetic K/V of codec_bench this takes bf16 high planes from 0.39 (plain level 1)
// to 0.35 of their size, their order-0 entropy, and encodes several times faster; fp16
// planes are unchanged (0.71, also their entropy). Higher levels do not do better; long
// runs (padding, constant channels) still find their matches.
constexpr int kZstdLevel = 1;
constexpr int kZstdMinMatch = 7;
constexpr int kZstdHashLog = 6;

struct CCtxDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};

struct Plane {
  uint8_t mode = kStored;
  const uint8_t* data = nullptr;
  uint64_t size = 0;
};

// Compresses plane `in` (n bytes) into `scratch` (ZSTD_compressBound(n) bytes) and
// returns whichever of the two forms is smaller.
absl::StatusOr<Plane> PackPlane(ZSTD_CCtx* cctx, const uint8_t* in, size_t n, uint8_t* scratch,
                                size_t cap) {
  const size_t z = ZSTD_compress2(cctx, scratch, cap, in, n);
  if (ZSTD_isError(z)) {
    return absl::InternalError(absl::StrCat("zstd compress: ", ZSTD_getErrorName(z)));
  }
  if (z < n) return Plane{kZstd, scratch, z};
  return Plane{kStored, in, n};
}

// Checks, from the sizes and the zstd frame header alone, that `plane` can hold n bytes.
absl::Status CheckPlane(const char* which, const Plane& plane, size_t n) {
  if (plane.mode == kStored) {
    if (plane.size != n) {
      return absl::DataLossError(
          absl::StrCat("lossless block ", which, " plane holds ", plane.size, " bytes; want ", n));
    }
    return absl::OkStatus();
  }
  if (ZSTD_findFrameCompressedSize(plane.data, plane.size) != plane.size ||
      ZSTD_getFrameContentSize(plane.data, plane.size) != n) {
    return absl::DataLossError(
        absl::StrCat("lossless block ", which, " plane is not one zstd frame of ", n, " bytes"));
  }
  return absl::OkStatus();
}

// Returns the n bytes of a plane that passed CheckPlane: the stored bytes, or the frame
// decompressed into `scratch` (n bytes).
absl::StatusOr<const uint8_t*> UnpackPlane(const char* which, const Plane& plane, size_t n,
                                           uint8_t* scratch) {
  if (plane.mode == kStored) return plane.data;
  const size_t got = ZSTD_decompress(scratch, n, plane.data, plane.size);
  if (ZSTD_isError(got)) {
    return absl::DataLossError(absl::StrCat(
        "lossless block ", which, " plane does not decompress: ", ZSTD_getErrorName(got)));
  }
  if (got != n) {
    return absl::DataLossError(
        absl::StrCat("lossless block ", which, " plane decompresses to ", got, " bytes; want ", n));
  }
  return scratch;
}

template <typename T>
void Put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(v));
  out.append(b, sizeof(b));
}

}  // namespace

uint64_t LosslessMaxBodyBytes(uint64_t elements) { return kDirectoryBytes + 2 * elements; }

uint64_t LosslessMinBodyBytes(uint64_t elements) {
  // A zstd frame takes at least its magic and descriptor (5 bytes) plus 4 bytes (an RLE
  // block) per 128 KiB of content; a stored plane takes n bytes.
  const uint64_t min_frame = 5 + 4 * ((elements + ZSTD_BLOCKSIZE_MAX - 1) / ZSTD_BLOCKSIZE_MAX);
  return kDirectoryBytes + 2 * std::min(elements, min_frame);
}

absl::Status AppendLosslessBody(const CodecKernels& kernels, std::span<const uint8_t> raw,
                                std::string& out) {
  const size_t n = raw.size() / 2;
  const size_t cap = ZSTD_compressBound(n);
  // planes: hi, lo; then one compression scratch per plane.
  auto buf = std::make_unique_for_overwrite<uint8_t[]>(2 * n + 2 * cap);
  uint8_t* hi = buf.get();
  uint8_t* lo = hi + n;
  kernels.split_planes(raw.data(), n, hi, lo);
  std::unique_ptr<ZSTD_CCtx, CCtxDeleter> cctx(ZSTD_createCCtx());
  if (cctx == nullptr ||
      ZSTD_isError(ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, kZstdLevel)) ||
      ZSTD_isError(ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_minMatch, kZstdMinMatch)) ||
      ZSTD_isError(ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_hashLog, kZstdHashLog))) {
    return absl::InternalError("cannot set up a zstd compression context");
  }
  absl::StatusOr<Plane> hp = PackPlane(cctx.get(), hi, n, lo + n, cap);
  if (!hp.ok()) return hp.status();
  absl::StatusOr<Plane> lp = PackPlane(cctx.get(), lo, n, lo + n + cap, cap);
  if (!lp.ok()) return lp.status();
  out.reserve(out.size() + kDirectoryBytes + hp->size + lp->size);
  out.push_back(static_cast<char>(hp->mode));
  out.push_back(static_cast<char>(lp->mode));
  Put<uint16_t>(out, 0);
  Put<uint32_t>(out, static_cast<uint32_t>(hp->size));
  Put<uint32_t>(out, static_cast<uint32_t>(lp->size));
  out.append(reinterpret_cast<const char*>(hp->data), hp->size);
  out.append(reinterpret_cast<const char*>(lp->data), lp->size);
  return absl::OkStatus();
}

absl::Status DecodeLosslessBody(const CodecKernels& kernels, std::span<const uint8_t> body,
                                std::span<uint8_t> raw_out) {
  const size_t n = raw_out.size() / 2;
  if (body.size() < kDirectoryBytes) {
    return absl::DataLossError("lossless block is shorter than its plane directory");
  }
  const uint8_t* b = body.data();
  uint16_t reserved;
  uint32_t hs, ls;
  std::memcpy(&reserved, b + 2, 2);
  std::memcpy(&hs, b + 4, 4);
  std::memcpy(&ls, b + 8, 4);
  if (b[0] > kZstd || b[1] > kZstd || reserved != 0) {
    return absl::DataLossError(absl::StrCat("lossless block has unknown plane modes ",
                                            static_cast<int>(b[0]), ", ", static_cast<int>(b[1]),
                                            " or reserved bits"));
  }
  if (kDirectoryBytes + uint64_t{hs} + ls != body.size()) {
    return absl::DataLossError(absl::StrCat("lossless block planes of ", hs, " + ", ls,
                                            " bytes do not fill its ", body.size(), "-byte body"));
  }
  const Plane hp{b[0], b + kDirectoryBytes, hs};
  const Plane lp{b[1], b + kDirectoryBytes + hs, ls};
  if (absl::Status st = CheckPlane("high", hp, n); !st.ok()) return st;
  if (absl::Status st = CheckPlane("low", lp, n); !st.ok()) return st;
  std::unique_ptr<uint8_t[]> scratch;
  const size_t zstd_planes = (hp.mode == kZstd) + (lp.mode == kZstd);
  if (zstd_planes > 0) scratch = std::make_unique_for_overwrite<uint8_t[]>(zstd_planes * n);
  uint8_t* const hi_scratch = hp.mode == kZstd ? scratch.get() : nullptr;
  uint8_t* const lo_scratch =
      lp.mode == kZstd ? scratch.get() + (hp.mode == kZstd ? n : 0) : nullptr;
  absl::StatusOr<const uint8_t*> hi = UnpackPlane("high", hp, n, hi_scratch);
  if (!hi.ok()) return hi.status();
  absl::StatusOr<const uint8_t*> lo = UnpackPlane("low", lp, n, lo_scratch);
  if (!lo.ok()) return lo.status();
  kernels.merge_planes(*hi, *lo, n, raw_out.data());
  return absl::OkStatus();
}

}  // namespace kvtier::kv::internal
