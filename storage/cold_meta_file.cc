#include "storage/cold_meta_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <span>

#include "absl/strings/str_cat.h"
#include "storage/checksum.h"

namespace kvtier::storage {
namespace {

constexpr uint32_t kMetaMagic = 0x4d54564b;  // "KVTM"
constexpr uint32_t kMetaVersion = 1;

void PutU32(std::string* out, uint32_t v) { out->append(reinterpret_cast<char*>(&v), 4); }
void PutU64(std::string* out, uint64_t v) { out->append(reinterpret_cast<char*>(&v), 8); }

uint64_t Checksum(std::string_view bytes) {
  return PayloadChecksum(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

absl::Status Errno(const char* what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat("cold.meta ", what, " ", path, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, std::string_view bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno("write", path);
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

std::string EncodeColdMeta(const ColdMeta& meta) {
  std::string out;
  PutU32(&out, kMetaMagic);
  PutU32(&out, kMetaVersion);
  PutU32(&out, meta.slab_format);
  PutU64(&out, meta.seq_ceiling);
  PutU32(&out, meta.clean ? 1 : 0);
  PutU64(&out, meta.blocks);
  PutU32(&out, static_cast<uint32_t>(meta.namespaces.size()));
  for (const auto& [id, spec] : meta.namespaces) {
    PutU32(&out, id);
    PutU32(&out, static_cast<uint32_t>(spec.size()));
    out.append(spec);
  }
  PutU64(&out, Checksum(out));
  return out;
}

absl::StatusOr<ColdMeta> ParseColdMeta(std::string_view in) {
  if (in.size() < 44) return absl::DataLossError("cold.meta is truncated");
  uint64_t sum;
  std::memcpy(&sum, in.data() + in.size() - 8, 8);
  in.remove_suffix(8);
  if (Checksum(in) != sum) return absl::DataLossError("cold.meta checksum mismatch");
  bool ok = true;
  auto u32 = [&]() -> uint32_t {
    uint32_t v = 0;
    if (in.size() < 4) {
      ok = false;
      return 0;
    }
    std::memcpy(&v, in.data(), 4);
    in.remove_prefix(4);
    return v;
  };
  if (u32() != kMetaMagic) return absl::DataLossError("cold.meta has no magic");
  if (const uint32_t v = u32(); v != kMetaVersion) {
    return absl::DataLossError(absl::StrCat("cold.meta has unknown version ", v));
  }
  ColdMeta meta;
  meta.slab_format = u32();
  if (in.size() < 8) return absl::DataLossError("cold.meta is truncated");
  std::memcpy(&meta.seq_ceiling, in.data(), 8);
  in.remove_prefix(8);
  const uint32_t clean = u32();
  if (!ok || clean > 1 || in.size() < 8) return absl::DataLossError("cold.meta is malformed");
  meta.clean = clean == 1;
  std::memcpy(&meta.blocks, in.data(), 8);
  in.remove_prefix(8);
  const uint32_t count = u32();
  for (uint32_t i = 0; ok && i < count; ++i) {
    const uint32_t id = u32();
    const uint32_t n = u32();
    if (!ok || in.size() < n) {
      ok = false;
      break;
    }
    meta.namespaces[id] = std::string(in.substr(0, n));
    in.remove_prefix(n);
  }
  if (!ok || !in.empty()) return absl::DataLossError("cold.meta is malformed");
  return meta;
}

absl::StatusOr<std::optional<ColdMeta>> ReadColdMetaFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    return Errno("open", path);
  }
  std::string bytes;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const absl::Status st = Errno("read", path);
      ::close(fd);
      return st;
    }
    if (n == 0) break;
    bytes.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  absl::StatusOr<ColdMeta> meta = ParseColdMeta(bytes);
  if (!meta.ok()) return absl::DataLossError(absl::StrCat(meta.status().message(), ": ", path));
  return std::optional<ColdMeta>(*std::move(meta));
}

absl::Status WriteColdMetaFile(const std::string& path, const ColdMeta& meta) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("open", tmp);
  absl::Status st = WriteAll(fd, EncodeColdMeta(meta), tmp);
  if (st.ok() && ::fsync(fd) != 0) st = Errno("fsync", tmp);
  ::close(fd);
  if (!st.ok()) return st;
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Errno("rename", path);
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return Errno("open directory of", path);
  const bool synced = ::fsync(dfd) == 0;
  ::close(dfd);
  return synced ? absl::OkStatus() : Errno("fsync directory of", path);
}

}  // namespace kvtier::storage
