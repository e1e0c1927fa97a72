#include "storage/slab_file.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace kvtier::storage {
namespace {

absl::Status Errno(const char* what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat("cold slab ", what, " ", path, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SlabFile>> SlabFile::Open(const std::string& path,
                                                         uint64_t limit_bytes) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("open", path);
  // For ReadDirectAt; file systems without O_DIRECT (tmpfs) leave it -1.
  const int direct_fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  return std::unique_ptr<SlabFile>(new SlabFile(path, fd, direct_fd, limit_bytes));
}

SlabFile::~SlabFile() {
  ::close(fd_);
  if (direct_fd_ >= 0) ::close(direct_fd_);
}

SlabFile::AlignedBuffer::~AlignedBuffer() { std::free(data); }

bool SlabFile::Cached(uint64_t offset, uint64_t bytes) const {
  // cachestat(2) (Linux 6.5; no glibc wrapper yet): unlike a RWF_NOWAIT read it starts
  // no read-ahead. Where it is missing, say cached: the page cache is used as before.
  struct {
    uint64_t off, len;
  } range = {offset, bytes};
  struct {
    uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
  } stat = {};
  constexpr long kCachestat = 451;
  if (::syscall(kCachestat, fd_, &range, &stat, 0) != 0) return true;
  // Mostly cached, or dirty (a direct read would first wait for its write-back).
  const uint64_t pages = (bytes + kUnitBytes - 1) / kUnitBytes;
  return stat.nr_dirty > 0 || stat.nr_writeback > 0 || 2 * stat.nr_cache >= pages;
}

absl::Status SlabFile::Reserve(AlignedBuffer* buffer, size_t bytes) {
  if (buffer->capacity >= bytes) return absl::OkStatus();
  std::free(buffer->data);
  buffer->data = nullptr;
  buffer->capacity = 0;
  void* p = nullptr;
  if (posix_memalign(&p, kDirectAlign, bytes) != 0) {
    return absl::ResourceExhaustedError("cold slab: no memory for a direct read");
  }
  buffer->data = static_cast<uint8_t*>(p);
  buffer->capacity = bytes;
  return absl::OkStatus();
}

absl::StatusOr<size_t> SlabFile::ReadDirectAt(uint64_t offset, uint8_t* dst, size_t bytes) const {
  if (direct_fd_ < 0) return absl::UnimplementedError("the cold slab has no O_DIRECT reads");
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n =
        ::pread(direct_fd_, dst + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("read", path_);
    if (n == 0) break;  // the end of the file
    done += static_cast<size_t>(n);
    if (done % kDirectAlign != 0) break;  // the end of the file, mid-page
  }
  return done;
}

absl::Status SlabFile::Reset(const std::vector<Extent>& used) {
  common::MutexLock lock(&mu_);
  free_by_offset_.clear();
  free_by_size_.clear();
  end_ = 0;
  used_ = 0;
  for (const Extent& e : used) {
    if (e.offset < end_ || e.offset % kUnitBytes != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cold slab extent at ", e.offset, " overlaps or is misaligned"));
    }
    if (e.offset > end_) AddFreeLocked(end_, e.offset - end_);
    end_ = e.offset + Round(e.bytes);
    used_ += Round(e.bytes);
  }
  return absl::OkStatus();
}

std::optional<uint64_t> SlabFile::Allocate(uint64_t bytes) {
  const uint64_t need = Round(bytes);
  common::MutexLock lock(&mu_);
  auto fit = free_by_size_.lower_bound({need, 0});
  if (fit != free_by_size_.end()) {
    const auto [length, offset] = *fit;
    free_by_size_.erase(fit);
    free_by_offset_.erase(offset);
    if (length > need) {
      free_by_offset_.emplace(offset + need, length - need);
      free_by_size_.emplace(length - need, offset + need);
    }
    used_ += need;
    return offset;
  }
  if (limit_ != 0 && end_ + need > limit_) return std::nullopt;
  const uint64_t offset = end_;
  end_ += need;
  used_ += need;
  return offset;
}

void SlabFile::Free(uint64_t offset, uint64_t bytes) {
  const uint64_t length = Round(bytes);
  common::MutexLock lock(&mu_);
  KVTIER_CHECK(used_ >= length && offset + length <= end_) << "free of an unallocated extent";
  used_ -= length;
  AddFreeLocked(offset, length);
}

std::map<uint64_t, uint64_t>::const_iterator SlabFile::FreeRangeHoldingLocked(
    uint64_t offset, uint64_t length) const {
  auto it = free_by_offset_.upper_bound(offset);
  if (it == free_by_offset_.begin()) return free_by_offset_.end();
  --it;
  return it->first + it->second >= offset + length ? it : free_by_offset_.end();
}

bool SlabFile::IsFree(uint64_t offset, uint64_t bytes) const {
  const uint64_t length = Round(std::max<uint64_t>(bytes, 1));
  common::MutexLock lock(&mu_);
  return offset >= end_ || FreeRangeHoldingLocked(offset, length) != free_by_offset_.end();
}

bool SlabFile::Claim(uint64_t offset, uint64_t bytes) {
  const uint64_t length = Round(std::max<uint64_t>(bytes, 1));
  if (offset % kUnitBytes != 0) return false;
  common::MutexLock lock(&mu_);
  if (offset >= end_) {
    // Free ranges never touch end_, so [end_, offset) joins no neighbour but may merge
    // with none: add it as it is.
    if (offset > end_) {
      free_by_offset_.emplace(end_, offset - end_);
      free_by_size_.emplace(offset - end_, end_);
    }
    end_ = offset + length;
    used_ += length;
    return true;
  }
  const auto it = FreeRangeHoldingLocked(offset, length);
  if (it == free_by_offset_.end()) return false;
  const uint64_t start = it->first;
  const uint64_t stop = it->first + it->second;  // below end_ (free ranges never touch it)
  free_by_size_.erase({it->second, it->first});
  free_by_offset_.erase(it);
  if (offset > start) {
    free_by_offset_.emplace(start, offset - start);
    free_by_size_.emplace(offset - start, start);
  }
  if (stop > offset + length) {
    free_by_offset_.emplace(offset + length, stop - offset - length);
    free_by_size_.emplace(stop - offset - length, offset + length);
  }
  used_ += length;
  return true;
}

void SlabFile::AddFreeLocked(uint64_t offset, uint64_t length) {
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      length += prev->second;
      free_by_size_.erase({prev->second, prev->first});
      free_by_offset_.erase(prev);
    }
  }
  if (next != free_by_offset_.end() && offset + length == next->first) {
    length += next->second;
    free_by_size_.erase({next->second, next->first});
    free_by_offset_.erase(next);
  }
  if (offset + length == end_) {  // the top of the used part: give it back to the end
    end_ = offset;
    return;
  }
  free_by_offset_.emplace(offset, length);
  free_by_size_.emplace(length, offset);
}

absl::Status SlabFile::Write(uint64_t offset, std::string_view data, bool sync) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n =
        ::pwrite(fd_, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno("write", path_);
    done += static_cast<size_t>(n);
  }
  return sync ? Sync() : absl::OkStatus();
}

absl::Status SlabFile::Read(uint64_t offset, uint64_t bytes, std::string* out) const {
  out->resize(bytes);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n =
        ::pread(fd_, out->data() + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("read", path_);
    if (n == 0) {
      return absl::DataLossError(
          absl::StrCat("cold slab ", path_, " ends inside the extent at ", offset, " (truncated)"));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status SlabFile::ReadV(uint64_t offset, std::span<const std::span<uint8_t>> buffers) const {
  std::vector<struct iovec> iov;
  iov.reserve(buffers.size());
  for (const std::span<uint8_t>& b : buffers) {
    if (!b.empty()) iov.push_back({b.data(), b.size()});
  }
  size_t next = 0;  // the first iovec not yet filled
  while (next < iov.size()) {
    const int count = static_cast<int>(std::min<size_t>(iov.size() - next, IOV_MAX));
    const ssize_t n = ::preadv(fd_, iov.data() + next, count, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("read", path_);
    if (n == 0) {
      return absl::DataLossError(
          absl::StrCat("cold slab ", path_, " ends inside the extent at ", offset, " (truncated)"));
    }
    offset += static_cast<uint64_t>(n);
    size_t left = static_cast<size_t>(n);
    while (left > 0 && left >= iov[next].iov_len) {
      left -= iov[next].iov_len;
      ++next;
    }
    if (left > 0) {  // a short read inside iov[next]: go on from there
      iov[next].iov_base = static_cast<uint8_t*>(iov[next].iov_base) + left;
      iov[next].iov_len -= left;
    }
  }
  return absl::OkStatus();
}

absl::Status SlabFile::Sync() {
  if (::fdatasync(fd_) != 0) return Errno("fdatasync", path_);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> SlabFile::FileBytes() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) return Errno("fstat", path_);
  return static_cast<uint64_t>(st.st_size);
}

uint64_t SlabFile::used_bytes() const {
  common::MutexLock lock(&mu_);
  return used_;
}

uint64_t SlabFile::end_bytes() const {
  common::MutexLock lock(&mu_);
  return end_;
}

}  // namespace kvtier::storage
