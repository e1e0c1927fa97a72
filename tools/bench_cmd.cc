// `kvtier bench`: a closed-loop load generator against kvtierd (--server) or, with the
// same workload expressed as SET/GET, against Redis (--redis) for comparison.
//
// Workload: a key space of --keys blocks of --block-size bytes. Every thread owns the
// keys i with i % threads == thread, so puts of one key never race. Each phase first
// touches every key once (untimed: the server's hot tier and Redis' memory are populated
// and page-faulted), then runs --seconds of closed-loop operations per thread.
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "common/process_cpu.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "kv/codec.h"
#include "protocol/lookup_form.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "tools/synthetic_blocks.h"

namespace kvtier::tools {
namespace {

namespace v1 = ::kvtier::v1;
using Clock = std::chrono::steady_clock;

constexpr char kBenchUsage[] =
    "usage: kvtier bench (--server HOST:PORT | --redis HOST:PORT|unix:PATH) [flags]\n"
    "\n"
    "  --threads N         client threads (default 4)\n"
    "  --block-size SIZE   bytes per block, a multiple of 64KiB (default 2MiB)\n"
    "  --keys N            key space in blocks (default 64; must fit the server's hot tier)\n"
    "  --seconds S         duration of each phase (default 5)\n"
    "  --ops LIST          phases to run one after another: put,get,lookup (default put,get)\n"
    "  --mix put=W,get=W,lookup=W  run one mixed phase with these weights instead\n"
    "  --batch N           blocks per Put/Get call (kvtier only; default 1)\n"
    "  --channels N        TCP connections to kvtierd (default = threads)\n"
    "  --chunk SIZE        Put chunk message size (default 1MiB)\n"
    "  --lookup-keys N     keys per Lookup (default 8)\n"
    "  --lookup-full       lookups expand the answer into one BlockLocation per key\n"
    "                      (kvtier only; default: keep the compact form)\n"
    "  --lease-ms MS       lookups lease what they report for MS (kvtier only; the lease is\n"
    "                      released after each timed lookup, untimed; default 0 = no lease)\n"
    "  --namespace NS      kvtier namespace (default bench-<block KiB>k)\n"
    "  --server-pid PID    also report the CPU time of this (local) server process\n"
    "  --grpc-window SIZE, --grpc-frame SIZE, --grpc-read-chunk SIZE\n"
    "                      HTTP/2 stream window, max frame, min socket read (0 = gRPC default)\n"
    "  --no-shm            never use the same-node shared-memory path (payloads over TCP)\n"
    "  --no-shm-socket     shared-memory calls as gRPC streams, not frames on the shm socket\n"
    "                      (ClientOptions::shared_memory_socket_calls = false; for A/B)\n"
    "  --ucx               payloads over the server's UCX data path (ucx.enabled), even on\n"
    "                      its host; transports from UCX_TLS (default: off, gRPC streams)\n"
    "  --no-ucx-calls      a Put's header over gRPC, not as a call frame over UCX\n"
    "                      (ClientOptions::ucx_calls = false; for A/B)\n"
    "  --coalesce-us US, --coalesce-bytes SIZE\n"
    "                      the client's coalescing of concurrent calls (ClientOptions::\n"
    "                      coalesce_max_delay_us / coalesce_max_bytes; 0 = off; default the\n"
    "                      client's: 200 us, 2MiB)\n"
    "  --ucx-coalesce-bytes SIZE\n"
    "                      coalesce_max_bytes of calls over UCX (ClientOptions::\n"
    "                      ucx_coalesce_max_bytes; 0 = as --coalesce-bytes; default 16MiB)\n"
    "  --shm-bytes SIZE    the client's shared region (ClientOptions::shared_memory_bytes;\n"
    "                      default: room for every thread's batch; with --cold-prefix the\n"
    "                      client's default, 64MiB, which the chain's Get goes through in\n"
    "                      pieces)\n"
    "  --get-piece-bytes SIZE\n"
    "                      a larger Get is sent as pipelined pieces of SIZE (ClientOptions::\n"
    "                      get_piece_bytes; 0 = one call; default the client's: 16MiB)\n"
    "  --tls-ca FILE, --tls-cert FILE, --tls-key FILE, --tls-server-name NAME, --tls\n"
    "                      connect over TLS (as `kvtier stats`)\n"
    "  --shared-buffers    put from / get into buffers in the client's shared region\n"
    "                      (AllocateSharedBuffer): no client-side payload copy (with\n"
    "                      --cold-prefix: the chain's Get, the region sized for it)\n"
    "  --redis-raw-get     read GET replies off the socket straight into the destination\n"
    "                      buffer instead of through hiredis (an upper bound for Redis)\n"
    "  --cold-prefix N     instead of the phases: put an N-block chain, then per round make\n"
    "                      it cold (admin Evict), Lookup it (compact form), wait --delay-ms,\n"
    "                      Get it (one call), Lookup it again (hot); rounds alternate\n"
    "                      prefetch off / on (LookupRequest.prefetch). Reports Get and Lookup\n"
    "                      wall time p50/p99 (docs/prefetch.md)\n"
    "  --rounds R          --cold-prefix rounds per arm (default 10)\n"
    "  --delay-ms MS       --cold-prefix: time between the Lookup and the Get (default 5)\n"
    "  --drop-settle-ms MS --cold-prefix --drop-cache: wait this long after the drop before\n"
    "                      the Lookup, so the Lookup does not pay for the drop, and as\n"
    "                      long before the hot Lookup, so both follow the same idle time\n"
    "                      (default 0)\n"
    "  --drop-cache FILE   --cold-prefix: before each round, drop FILE (the server's\n"
    "                      <data-dir>/cold.slab, same host) from the page cache\n"
    "                      (posix_fadvise DONTNEED), so cold reads come from the disk;\n"
    "                      after each prefetch-off round's Get, FILE is also read whole\n"
    "                      with O_DIRECT in 1 MiB reads (as dd bs=1M iflag=direct) and\n"
    "                      the off rounds' cold Get GB/s is reported against it\n"
    "  --json              one JSON object per phase on stdout\n";

enum class Op { kPut = 0, kGet = 1, kLookup = 2 };

// One worker's connection to the system under test.
class Backend {
 public:
  virtual ~Backend() = default;
  // Performs `op` on keys[first, first+count) (wrapping); returns payload bytes moved.
  virtual absl::StatusOr<uint64_t> Do(Op op, const std::vector<size_t>& key_indexes) = 0;
  // Untimed cleanup after each Do (e.g. releasing a lease the op took).
  virtual absl::Status AfterOp() { return absl::OkStatus(); }
};

struct Workload {
  std::vector<std::string> keys;
  std::string payload;  // the block every put sends (encoded fp16 for kvtier)
  uint64_t block_bytes = 0;
  std::string ns;
  int lookup_keys = 8;
  uint64_t lease_ms = 0;  // Lookup leases (kvtier only)
  bool lookup_full = false;  // expand Lookup answers (LookupOptions::keep_compact false)
};

class KvtierBackend : public Backend {
 public:
  // With `shared_buffers` the put payload and the get buffers live in the client's shared
  // region (see Client::AllocateSharedBuffer); otherwise in private memory.
  static absl::StatusOr<std::unique_ptr<KvtierBackend>> Create(client::Client* client,
                                                               const Workload* w, int batch,
                                                               bool shared_buffers) {
    std::unique_ptr<KvtierBackend> b(new KvtierBackend(client, w));
    const size_t get_bytes = w->payload.size() + 4096;
    for (int i = 0; i < batch; ++i) {
      if (shared_buffers) {
        ASSIGN_OR_RETURN(client::SharedBuffer sb, client->AllocateSharedBuffer(get_bytes));
        b->shared_.push_back(std::move(sb));
        b->get_spans_.push_back(b->shared_.back().span());
      } else {
        b->private_.emplace_back(get_bytes, '\0');
        b->get_spans_.emplace_back(reinterpret_cast<uint8_t*>(b->private_.back().data()), get_bytes);
      }
      std::memset(b->get_spans_.back().data(), 1, get_bytes);  // touched up front
    }
    b->payload_ = kv::AsBytes(w->payload);
    if (shared_buffers) {
      ASSIGN_OR_RETURN(client::SharedBuffer sb, client->AllocateSharedBuffer(w->payload.size()));
      std::memcpy(sb.data(), w->payload.data(), w->payload.size());
      b->payload_ = std::span<const uint8_t>(sb.data(), w->payload.size());
      b->shared_.push_back(std::move(sb));
    }
    return b;
  }

  absl::StatusOr<uint64_t> Do(Op op, const std::vector<size_t>& idx) override {
    keys_.resize(idx.size());  // assign, not push_back: the strings keep their buffers
    for (size_t j = 0; j < idx.size(); ++j) keys_[j].assign(w_->keys[idx[j]]);
    switch (op) {
      case Op::kPut: {
        std::vector<client::PutBlock> blocks(idx.size());
        for (size_t i = 0; i < idx.size(); ++i) {
          blocks[i].key = keys_[i];
          blocks[i].payload = payload_;
        }
        ASSIGN_OR_RETURN(auto r, client_->PutBlocks(w_->ns, blocks));
        if (r.blocks_stored != blocks.size()) {
          return absl::InternalError(absl::StrCat("put stored ", r.blocks_stored, " of ",
                                                  blocks.size(), " blocks"));
        }
        return uint64_t{w_->payload.size()} * blocks.size();
      }
      case Op::kGet: {
        ASSIGN_OR_RETURN(auto infos,
                         client_->GetBlocksInto(w_->ns, keys_,
                                                std::span(get_spans_).first(idx.size())));
        uint64_t bytes = 0;
        for (const auto& info : infos) {
          if (!info.found()) return absl::NotFoundError("get: a bench key is missing");
          bytes += info.size();
        }
        return bytes;
      }
      case Op::kLookup: {
        client::LookupOptions options;
        options.lease_ms = w_->lease_ms;
        // As an engine reads it: tiers and leases by index (unless --lookup-full).
        options.keep_compact = !w_->lookup_full;
        ASSIGN_OR_RETURN(auto r, client_->Lookup(w_->ns, keys_, options));
        if (w_->lease_ms > 0) {
          if (r.leased_blocks() != keys_.size()) {
            return absl::ResourceExhaustedError(absl::StrCat(
                "lookup leased ", r.leased_blocks(), " of ", keys_.size(), " blocks (limit ",
                v1::LeaseLimit_Name(r.lease_limit()), "; raise the server's max_leased_bytes)"));
          }
          lease_id_ = protocol::LookupLeaseId(r, 0);
        }
        return 0;
      }
    }
    return 0;
  }

 private:
  KvtierBackend(client::Client* client, const Workload* w) : client_(client), w_(w) {}

  absl::Status AfterOp() override {
    if (lease_id_ == 0) return absl::OkStatus();
    const uint64_t id = std::exchange(lease_id_, 0);
    return client_->ReleaseLease(w_->ns, id).status();
  }

  client::Client* client_;
  const Workload* w_;
  std::span<const uint8_t> payload_;              // what every put sends
  std::vector<std::span<uint8_t>> get_spans_;     // one get buffer per batch slot
  std::vector<client::SharedBuffer> shared_;      // with --shared-buffers
  std::vector<std::string> private_;              // without
  std::vector<std::string> keys_;
  uint64_t lease_id_ = 0;  // taken by the last lookup, released by AfterOp
};

class RedisBackend : public Backend {
 public:
  // `raw_get`: read GET replies straight off the socket into the destination buffer (no
  // hiredis reader): an upper bound for any Redis client.
  static absl::StatusOr<std::unique_ptr<RedisBackend>> Connect(const std::string& addr,
                                                               const Workload* w,
                                                               bool raw_get) {
    timeval tv{5, 0};
    redisContext* c = nullptr;
    if (addr.rfind("unix:", 0) == 0) {
      c = redisConnectUnixWithTimeout(addr.substr(5).c_str(), tv);
    } else {
      const auto colon = addr.rfind(':');
      int port = 0;
      if (colon == std::string::npos || !absl::SimpleAtoi(addr.substr(colon + 1), &port)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--redis expects HOST:PORT or unix:PATH, got '", addr, "'"));
      }
      c = redisConnectWithTimeout(addr.substr(0, colon).c_str(), port, tv);
    }
    if (c == nullptr || c->err) {
      std::string err = c ? c->errstr : "out of memory";
      if (c) redisFree(c);
      return absl::UnavailableError(absl::StrCat("redis ", addr, ": ", err));
    }
    redisSetTimeout(c, tv);
    // Keep the reader's buffer between replies instead of freeing it whenever it is
    // empty and over 16 KiB (hiredis' default), which would re-grow it for every 2 MiB GET.
    c->reader->maxbuf = 0;
    return std::unique_ptr<RedisBackend>(new RedisBackend(c, w, raw_get));
  }
  ~RedisBackend() override { redisFree(c_); }

  absl::StatusOr<uint64_t> Do(Op op, const std::vector<size_t>& idx) override {
    uint64_t bytes = 0;
    for (size_t i : idx) {
      const std::string& key = w_->keys[i];
      redisReply* reply = nullptr;
      if (op == Op::kPut) {
        // The strongest client we could write: the RESP command goes out with one
        // writev straight from the caller's memory (like redis-benchmark, which formats
        // its command once), then hiredis reads the reply.
        RETURN_IF_ERROR(WriteSet(key));
        void* r = nullptr;
        if (redisGetReply(c_, &r) != REDIS_OK) r = nullptr;
        reply = static_cast<redisReply*>(r);
      } else if (op == Op::kGet && raw_get_) {
        ASSIGN_OR_RETURN(uint64_t n, RawGet(key));
        bytes += n;
        continue;
      } else if (op == Op::kGet) {
        const char* argv[] = {"GET", key.data()};
        const size_t lens[] = {3, key.size()};
        reply = static_cast<redisReply*>(redisCommandArgv(c_, 2, argv, lens));
      } else {
        const char* argv[] = {"EXISTS", key.data()};
        const size_t lens[] = {6, key.size()};
        reply = static_cast<redisReply*>(redisCommandArgv(c_, 2, argv, lens));
      }
      if (reply == nullptr) return absl::UnavailableError(absl::StrCat("redis: ", c_->errstr));
      absl::Status st;
      if (reply->type == REDIS_REPLY_ERROR) {
        st = absl::InternalError(absl::StrCat("redis: ", reply->str));
      } else if (op == Op::kGet) {
        if (reply->type != REDIS_REPLY_STRING || reply->len != w_->payload.size()) {
          st = absl::NotFoundError("redis get: a bench key is missing");
        } else {
          bytes += reply->len;
        }
      } else if (op == Op::kPut) {
        bytes += w_->payload.size();
      }
      freeReplyObject(reply);
      RETURN_IF_ERROR(st);
    }
    return bytes;
  }

 private:
  RedisBackend(redisContext* c, const Workload* w, bool raw_get)
      : c_(c), w_(w), raw_get_(raw_get), dest_(w->payload.size() + 64, 1) {}

  absl::Status WriteAll(const char* p, size_t n) {
    while (n > 0) {
      const ssize_t w = write(c_->fd, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return absl::UnavailableError(absl::StrCat("redis: write: ", std::strerror(errno)));
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return absl::OkStatus();
  }

  absl::Status ReadExactly(char* p, size_t n) {
    while (n > 0) {
      const ssize_t r = recv(c_->fd, p, n, MSG_WAITALL);
      if (r <= 0) {
        if (r < 0 && errno == EINTR) continue;
        return absl::UnavailableError("redis: connection closed");
      }
      p += r;
      n -= static_cast<size_t>(r);
    }
    return absl::OkStatus();
  }

  // GET with the bulk payload received straight into dest_ (one kernel copy).
  absl::StatusOr<uint64_t> RawGet(const std::string& key) {
    const std::string cmd = absl::StrCat("*2\r\n$3\r\nGET\r\n$", key.size(), "\r\n", key, "\r\n");
    RETURN_IF_ERROR(WriteAll(cmd.data(), cmd.size()));
    std::string header;
    char ch;
    while (header.size() < 32) {
      RETURN_IF_ERROR(ReadExactly(&ch, 1));
      header.push_back(ch);
      if (header.size() >= 2 && header.compare(header.size() - 2, 2, "\r\n") == 0) break;
    }
    uint64_t len;
    if (header.size() < 4 || header[0] != '$' ||
        !absl::SimpleAtoi(absl::string_view(header).substr(1, header.size() - 3), &len) ||
        len + 2 > dest_.size()) {
      return absl::NotFoundError(absl::StrCat("redis get: unexpected reply '", header, "'"));
    }
    RETURN_IF_ERROR(ReadExactly(dest_.data(), len + 2));  // payload + CRLF
    return len;
  }

  absl::Status WriteSet(const std::string& key) {
    const std::string head = absl::StrCat("*3\r\n$3\r\nSET\r\n$", key.size(), "\r\n", key,
                                          "\r\n$", w_->payload.size(), "\r\n");
    static const char kCrlf[] = "\r\n";
    iovec iov[3] = {{const_cast<char*>(head.data()), head.size()},
                    {const_cast<char*>(w_->payload.data()), w_->payload.size()},
                    {const_cast<char*>(kCrlf), 2}};
    int first = 0;
    while (first < 3) {
      const ssize_t n = writev(c_->fd, iov + first, 3 - first);
      if (n < 0) {
        if (errno == EINTR) continue;
        return absl::UnavailableError(absl::StrCat("redis: write: ", std::strerror(errno)));
      }
      size_t left = static_cast<size_t>(n);
      while (first < 3 && left >= iov[first].iov_len) {
        left -= iov[first].iov_len;
        ++first;
      }
      if (first < 3) {
        iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
        iov[first].iov_len -= left;
      }
    }
    return absl::OkStatus();
  }
  redisContext* c_;
  const Workload* w_;
  const bool raw_get_;
  std::string dest_;
};

struct PhaseResult {
  std::string name;
  uint64_t ops = 0;
  uint64_t bytes = 0;
  double seconds = 0;
  double client_cpu_s = 0;
  double server_cpu_s = -1;  // -1: not measured
  std::vector<double> latencies_us;
};

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t i = std::min(sorted.size() - 1, static_cast<size_t>(p * sorted.size()));
  return sorted[i];
}

// Runs one phase: every thread loops until the deadline choosing ops by `weights`.
absl::StatusOr<PhaseResult> RunPhase(const std::string& name,
                                     std::vector<std::unique_ptr<Backend>>& backends,
                                     const Workload& w, const std::array<int, 3>& weights,
                                     double seconds, int batch, bool progress,
                                     int64_t server_pid) {
  const size_t threads = backends.size();
  std::vector<PhaseResult> per(threads);
  std::vector<absl::Status> errors(threads);
  std::atomic<uint64_t> live_ops{0}, live_bytes{0};
  std::atomic<bool> done{false};
  const int total_weight = weights[0] + weights[1] + weights[2];
  const double cpu0 = common::SelfCpuSeconds();
  const double server_cpu0 = common::ProcessCpuSeconds(server_pid);
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(seconds));
  std::vector<std::thread> workers;
  for (size_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng(static_cast<uint32_t>(1234 + t));
      std::vector<size_t> mine;
      for (size_t i = t; i < w.keys.size(); i += threads) mine.push_back(i);
      if (mine.empty()) mine.push_back(t % w.keys.size());
      size_t cursor = 0;
      std::vector<size_t> idx;
      per[t].latencies_us.reserve(1 << 16);
      while (Clock::now() < deadline) {
        int pick = static_cast<int>(rng() % total_weight);
        Op op = pick < weights[0] ? Op::kPut
                : pick < weights[0] + weights[1] ? Op::kGet : Op::kLookup;
        idx.clear();
        const int n = op == Op::kLookup ? w.lookup_keys : batch;
        for (int k = 0; k < n; ++k) idx.push_back(mine[(cursor + k) % mine.size()]);
        cursor += batch;
        const auto t0 = Clock::now();
        auto bytes = backends[t]->Do(op, idx);
        const auto t1 = Clock::now();
        if (!bytes.ok()) {
          errors[t] = bytes.status();
          break;
        }
        if (absl::Status after = backends[t]->AfterOp(); !after.ok()) {
          errors[t] = after;
          break;
        }
        per[t].latencies_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        per[t].ops += 1;
        per[t].bytes += *bytes;
        live_ops.fetch_add(1, std::memory_order_relaxed);
        live_bytes.fetch_add(*bytes, std::memory_order_relaxed);
      }
    });
  }
  std::thread monitor;
  if (progress) {
    monitor = std::thread([&] {
      while (!done.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
        const double el = std::chrono::duration<double>(Clock::now() - start).count();
        std::fprintf(stderr, "\r%-8s %5.1fs  %8llu ops  %7.2f GB/s ", name.c_str(), el,
                     static_cast<unsigned long long>(live_ops.load()),
                     live_bytes.load() / std::max(el, 1e-9) / 1e9);
      }
      std::fprintf(stderr, "\r%60s\r", "");
    });
  }
  for (auto& th : workers) th.join();
  const auto end = Clock::now();
  const double cpu1 = common::SelfCpuSeconds();
  const double server_cpu1 = common::ProcessCpuSeconds(server_pid);
  done.store(true);
  if (monitor.joinable()) monitor.join();
  for (const auto& e : errors) RETURN_IF_ERROR(e);
  PhaseResult r;
  r.name = name;
  r.seconds = std::chrono::duration<double>(end - start).count();
  r.client_cpu_s = cpu1 - cpu0;
  if (server_cpu0 >= 0 && server_cpu1 >= 0) r.server_cpu_s = server_cpu1 - server_cpu0;
  for (auto& p : per) {
    r.ops += p.ops;
    r.bytes += p.bytes;
    r.latencies_us.insert(r.latencies_us.end(), p.latencies_us.begin(), p.latencies_us.end());
  }
  std::sort(r.latencies_us.begin(), r.latencies_us.end());
  return r;
}

void PrintResult(const PhaseResult& r, const std::string& target, const std::string& system,
                 uint64_t block_bytes, size_t threads, bool json) {
  const double ops_s = r.ops / r.seconds;
  const double gb_s = r.bytes / r.seconds / 1e9;
  const double p50 = Percentile(r.latencies_us, 0.50), p99 = Percentile(r.latencies_us, 0.99),
               p999 = Percentile(r.latencies_us, 0.999);
  // CPU cost per GB moved: robust to other load on a shared machine, unlike GB/s.
  const double gb = r.bytes / 1e9;
  const double client_cpu_per_gb = gb > 0 ? r.client_cpu_s / gb : 0;
  const double server_cpu_per_gb = gb > 0 && r.server_cpu_s >= 0 ? r.server_cpu_s / gb : -1;
  if (json) {
    std::printf(
        "{\"system\":\"%s\",\"target\":\"%s\",\"phase\":\"%s\",\"threads\":%zu,"
        "\"block_bytes\":%llu,\"ops\":%llu,\"seconds\":%.3f,\"ops_per_s\":%.1f,\"gb_per_s\":%.3f,"
        "\"p50_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,\"client_cpu_s_per_gb\":%.4f,"
        "\"server_cpu_s_per_gb\":%.4f}\n",
        system.c_str(), target.c_str(), r.name.c_str(), threads,
        static_cast<unsigned long long>(block_bytes), static_cast<unsigned long long>(r.ops),
        r.seconds, ops_s, gb_s, p50, p99, p999, client_cpu_per_gb, server_cpu_per_gb);
  } else {
    std::printf("%-6s %-7s %-22s %9.1f ops/s %7.3f GB/s  p50 %8.1f us  p99 %8.1f us  "
                "p999 %8.1f us  cpu/GB client %.3fs",
                system.c_str(), r.name.c_str(), target.c_str(), ops_s, gb_s, p50, p99, p999,
                client_cpu_per_gb);
    if (server_cpu_per_gb >= 0) std::printf(" server %.3fs", server_cpu_per_gb);
    std::printf("\n");
  }
  std::fflush(stdout);
}

// The raw read speed of `path` as `dd if=path of=/dev/null bs=1M iflag=direct` measures
// it: sequential 1 MiB reads with O_DIRECT (no page cache), GB/s.
absl::StatusOr<double> RawDirectReadGbps(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECT);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("--drop-cache: cannot open ", path, " O_DIRECT"));
  }
  constexpr size_t kBytes = 1 << 20;
  void* buf = nullptr;
  if (posix_memalign(&buf, 4096, kBytes) != 0) {
    close(fd);
    return absl::ResourceExhaustedError("raw read: no memory");
  }
  uint64_t total = 0;
  const auto t0 = Clock::now();
  while (true) {
    const ssize_t n = read(fd, buf, kBytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    total += static_cast<uint64_t>(n);
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  free(buf);
  close(fd);
  if (total == 0 || secs <= 0) return absl::InternalError("raw read: nothing read");
  return static_cast<double>(total) / 1e9 / secs;
}

// --cold-prefix: Lookup then Get of an n-block cold chain, prefetch off and on in
// alternating rounds, and the Lookup of the chain cold against hot (client wall time).
absl::Status ColdPrefixBench(client::Client* client, const Workload& w, const kv::Layout& layout,
                             int64_t n, int64_t rounds, int64_t delay_ms,
                             const std::string& drop_cache, int64_t drop_settle_ms,
                             bool shared_buffers, bool json) {
  const std::string raw = SyntheticRawBlock(layout, 7, 0);
  ASSIGN_OR_RETURN(std::string later, kv::Encode(kv::CodecId::kFp16, layout, 1, kv::AsBytes(raw)));
  std::vector<std::string> keys;
  for (int64_t i = 0; i < n; ++i) keys.push_back(absl::StrFormat("kvtier-cold-%07d", i));
  auto us = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
  };
  // --drop-cache --drop-settle-ms: the idle time before each timed Lookup, cold and hot
  // alike (a Lookup after 200 ms of idling takes ~100 us longer than one right after
  // other calls, whatever the tier).
  const auto settle = [&] {
    if (!drop_cache.empty() && drop_settle_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(drop_settle_ms));
    }
  };
  // This client's first call after Connect: against a kvtierd just restarted over the
  // chain of an earlier run, the first Lookup after a restart.
  client::LookupOptions first_lo;
  first_lo.keep_compact = true;
  first_lo.prefetch = v1::PREFETCH_OFF;
  // Split in two: a 1-key Lookup (of a key never stored) pays what any first call on the
  // connection pays; the 2,048-key Lookup after it what is left of the restart's cost.
  const std::vector<std::string> probe = {"kvtier-cold-probe-never-stored"};
  const auto probe_t0 = Clock::now();
  ASSIGN_OR_RETURN(v1::LookupResponse probed, client->Lookup(w.ns, probe, first_lo));
  const double probe_us = us(probe_t0, Clock::now());
  (void)probed;
  const auto f0 = Clock::now();
  ASSIGN_OR_RETURN(v1::LookupResponse first, client->Lookup(w.ns, keys, first_lo));
  const double first_us = us(f0, Clock::now());
  const bool first_found = first.prefix_blocks() == static_cast<uint32_t>(n);
  for (int64_t i = 0; i < n; i += 64) {
    std::vector<client::PutBlock> blocks;
    for (int64_t j = i; j < std::min(n, i + 64); ++j) {
      client::PutBlock& b = blocks.emplace_back();
      b.key = keys[j];
      b.parent_key = j == 0 ? "" : keys[j - 1];
      b.block_index = static_cast<uint32_t>(j);
      b.payload = kv::AsBytes(j == 0 ? w.payload : later);
    }
    ASSIGN_OR_RETURN(auto r, client->PutBlocks(w.ns, blocks));
    if (r.blocks_stored != blocks.size()) return absl::InternalError("cold-prefix: put failed");
  }
  // The Get's destinations: private memory (the client copies each block out of its
  // region, or takes it from the stream), or with --shared-buffers one buffer in the
  // client's shared region (the server writes each block there, as an engine's staging
  // buffer: client/python/kvtier/engines/vllm_connector.py).
  const size_t slot = w.payload.size() + 4096;
  std::vector<std::string> bufs;
  client::SharedBuffer shared;
  std::vector<std::span<uint8_t>> spans;
  if (shared_buffers) {
    auto sb = client->AllocateSharedBuffer(static_cast<size_t>(n) * slot);
    if (!sb.ok()) {
      return absl::Status(sb.status().code(),
                          absl::StrCat("--cold-prefix --shared-buffers: ", sb.status().message()));
    }
    shared = *std::move(sb);
    std::memset(shared.data(), 1, shared.size());  // touched up front
    for (int64_t i = 0; i < n; ++i) spans.push_back(shared.span().subspan(i * slot, slot));
  } else {
    bufs.assign(n, std::string(slot, '\1'));
    for (std::string& b : bufs) spans.emplace_back(reinterpret_cast<uint8_t*>(b.data()), b.size());
  }
  // [0]: prefetch off, [1]: on.
  std::vector<double> get_us[2], lookup_cold_us[2], lookup_hot_us[2], lookup_cold_again_us;
  uint64_t hot_after_get[2] = {0, 0};
  std::vector<double> raw_gbps, get_gbps;  // --drop-cache: off rounds, alternating
  ASSIGN_OR_RETURN(v1::StatsResponse before, client->Stats(w.ns));
  for (int64_t r = 0; r < 2 * rounds; ++r) {
    const int arm = static_cast<int>(r % 2);
    ASSIGN_OR_RETURN(uint64_t moved, client->Evict(w.ns, keys, /*drop=*/false));
    (void)moved;  // blocks already cold are not moved
    if (!drop_cache.empty()) {
      const int fd = open(drop_cache.c_str(), O_RDONLY);
      if (fd < 0) return absl::NotFoundError(absl::StrCat("--drop-cache: cannot open ", drop_cache));
      fdatasync(fd);
      const int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      close(fd);
      if (rc != 0) return absl::InternalError("--drop-cache: posix_fadvise failed");
      settle();
    }
    client::LookupOptions lo;
    lo.keep_compact = true;
    lo.prefetch = arm == 1 ? v1::PREFETCH_ON : v1::PREFETCH_OFF;
    const auto t0 = Clock::now();
    ASSIGN_OR_RETURN(v1::LookupResponse cold, client->Lookup(w.ns, keys, lo));
    const auto t1 = Clock::now();
    if (cold.prefix_blocks() != static_cast<uint32_t>(n)) {
      return absl::InternalError(absl::StrCat("cold-prefix: lookup found ", cold.prefix_blocks(),
                                              " of ", n, " blocks"));
    }
    for (int64_t i = 0; i < n; ++i) {
      if (protocol::LookupTier(cold, static_cast<size_t>(i)) != v1::TIER_COLD) {
        return absl::InternalError("cold-prefix: a block is not cold after Evict");
      }
    }
    if (arm == 0) {
      // The same cold Lookup again at once: what the first one paid beyond the answer.
      const auto a = Clock::now();
      ASSIGN_OR_RETURN(v1::LookupResponse again, client->Lookup(w.ns, keys, lo));
      lookup_cold_again_us.push_back(us(a, Clock::now()));
    }
    std::this_thread::sleep_until(t1 + std::chrono::milliseconds(delay_ms));
    const auto t2 = Clock::now();
    ASSIGN_OR_RETURN(auto infos, client->GetBlocksInto(w.ns, keys, spans));
    const auto t3 = Clock::now();
    for (const auto& info : infos) {
      if (!info.found()) return absl::NotFoundError("cold-prefix: a block is missing");
      if (info.tier() == v1::TIER_HOT) hot_after_get[arm]++;
    }
    lo.prefetch = v1::PREFETCH_OFF;
    settle();  // as before the cold Lookup
    const auto t4 = Clock::now();
    ASSIGN_OR_RETURN(v1::LookupResponse hot, client->Lookup(w.ns, keys, lo));
    const auto t5 = Clock::now();
    (void)hot;
    if (arm == 0 && !drop_cache.empty()) {
      ASSIGN_OR_RETURN(const double raw, RawDirectReadGbps(drop_cache));
      raw_gbps.push_back(raw);
      get_gbps.push_back(static_cast<double>(n) * static_cast<double>(w.payload.size()) / 1e3 /
                         us(t2, t3));
    }
    std::fprintf(stderr,
                 "round %lld prefetch %s: cold lookup %.1f us, get %.1f us, hot lookup %.1f us\n",
                 static_cast<long long>(r), arm == 1 ? "on" : "off", us(t0, t1), us(t2, t3),
                 us(t4, t5));
    lookup_cold_us[arm].push_back(us(t0, t1));
    get_us[arm].push_back(us(t2, t3));
    lookup_hot_us[arm].push_back(us(t4, t5));
  }
  ASSIGN_OR_RETURN(v1::StatsResponse after, client->Stats(w.ns));
  const v1::PrefetchStats& p0 = before.prefetch();
  const v1::PrefetchStats& p1 = after.prefetch();
  std::vector<double> all_cold, all_hot;
  for (int a = 0; a < 2; ++a) {
    std::sort(get_us[a].begin(), get_us[a].end());
    all_cold.insert(all_cold.end(), lookup_cold_us[a].begin(), lookup_cold_us[a].end());
    all_hot.insert(all_hot.end(), lookup_hot_us[a].begin(), lookup_hot_us[a].end());
  }
  std::sort(all_cold.begin(), all_cold.end());
  std::sort(all_hot.begin(), all_hot.end());
  const double gb = static_cast<double>(n) * static_cast<double>(w.payload.size()) / 1e9;
  const char* arm_name[2] = {"off", "on"};
  for (int a = 0; a < 2; ++a) {
    const double p50 = Percentile(get_us[a], 0.5), p99 = Percentile(get_us[a], 0.99);
    const double served_hot = static_cast<double>(hot_after_get[a]) /
                              static_cast<double>(n * rounds);
    if (json) {
      std::printf("{\"phase\":\"cold_prefix_get\",\"prefetch\":\"%s\",\"blocks\":%lld,"
                  "\"block_bytes\":%zu,\"delay_ms\":%lld,\"rounds\":%lld,\"p50_us\":%.1f,"
                  "\"p99_us\":%.1f,\"gb_per_s_p50\":%.3f,\"served_hot\":%.4f}\n",
                  arm_name[a], static_cast<long long>(n), w.payload.size(),
                  static_cast<long long>(delay_ms), static_cast<long long>(rounds), p50, p99,
                  gb / (p50 / 1e6), served_hot);
    } else {
      std::printf("cold-prefix get  prefetch %-3s  %lld blocks x %zu B, %lld ms after the "
                  "Lookup: p50 %9.1f us  p99 %9.1f us  (%.2f GB/s at p50)  served hot %.4f\n",
                  arm_name[a], static_cast<long long>(n), w.payload.size(),
                  static_cast<long long>(delay_ms), p50, p99, gb / (p50 / 1e6), served_hot);
    }
  }
  if (!raw_gbps.empty()) {
    std::vector<double> ratio;
    for (size_t i = 0; i < raw_gbps.size(); ++i) ratio.push_back(get_gbps[i] / raw_gbps[i]);
    std::sort(raw_gbps.begin(), raw_gbps.end());
    std::sort(get_gbps.begin(), get_gbps.end());
    std::sort(ratio.begin(), ratio.end());
    if (json) {
      std::printf("{\"phase\":\"cold_get_vs_raw\",\"rounds\":%zu,\"get_gbps_p50\":%.3f,"
                  "\"raw_direct_gbps_p50\":%.3f,\"ratio_p50\":%.3f,\"ratio_min\":%.3f}\n",
                  ratio.size(), Percentile(get_gbps, 0.5), Percentile(raw_gbps, 0.5),
                  Percentile(ratio, 0.5), ratio.front());
    } else {
      std::printf("cold get from disk (prefetch off rounds) %.3f GB/s p50 vs raw O_DIRECT read of "
                  "%s (1 MiB reads) %.3f GB/s p50, alternating: ratio p50 %.3f, min %.3f, max "
                  "%.3f (%zu pairs)\n",
                  Percentile(get_gbps, 0.5), drop_cache.c_str(), Percentile(raw_gbps, 0.5),
                  Percentile(ratio, 0.5), ratio.front(), ratio.back(), ratio.size());
    }
  }
  const double c50 = Percentile(all_cold, 0.5), c99 = Percentile(all_cold, 0.99);
  const double h50 = Percentile(all_hot, 0.5), h99 = Percentile(all_hot, 0.99);
  if (json) {
    std::printf("{\"phase\":\"cold_prefix_lookup\",\"blocks\":%lld,\"cold_p50_us\":%.1f,"
                "\"cold_p99_us\":%.1f,\"hot_p50_us\":%.1f,\"hot_p99_us\":%.1f,"
                "\"cold_over_hot_p50\":%.3f,\"first_probe_us\":%.1f,\"first_lookup_us\":%.1f,"
                "\"first_found\":%s}\n",
                static_cast<long long>(n), c50, c99, h50, h99, c50 / h50, probe_us, first_us,
                first_found ? "true" : "false");
  } else {
    std::printf("cold-prefix lookup (compact, %lld keys): cold p50 %.1f us p99 %.1f us, hot p50 "
                "%.1f us p99 %.1f us, cold/hot p50 %.3f\n",
                static_cast<long long>(n), c50, c99, h50, h99, c50 / h50);
    for (int a = 0; a < 2; ++a) {
      std::sort(lookup_cold_us[a].begin(), lookup_cold_us[a].end());
      std::sort(lookup_hot_us[a].begin(), lookup_hot_us[a].end());
      std::printf("  rounds with prefetch %-3s: cold p50 %.1f us, hot p50 %.1f us\n", arm_name[a],
                  Percentile(lookup_cold_us[a], 0.5), Percentile(lookup_hot_us[a], 0.5));
    }
    std::sort(lookup_cold_again_us.begin(), lookup_cold_again_us.end());
    std::printf("  the same cold Lookup again at once (prefetch off rounds): p50 %.1f us\n",
                Percentile(lookup_cold_again_us, 0.5));
    if (first_found) {
      std::printf("first lookup of this client (after a restart: the first after it): a 1-key "
                  "Lookup %.1f us, then the %lld-key one (all found) %.1f us = %.3f x the warm "
                  "cold p50\n",
                  probe_us, static_cast<long long>(n), first_us, first_us / c50);
    }
    std::printf("server prefetch counters this run: prefetched %llu, hits %llu, wasted %llu "
                "evicted + %llu expired, cancelled %llu, skipped %llu, Gets waited %llu "
                "(%.1f ms in all)\n",
                static_cast<unsigned long long>(p1.prefetched_blocks() - p0.prefetched_blocks()),
                static_cast<unsigned long long>(p1.hits() - p0.hits()),
                static_cast<unsigned long long>(p1.wasted_evicted() - p0.wasted_evicted()),
                static_cast<unsigned long long>(p1.wasted_expired() - p0.wasted_expired()),
                static_cast<unsigned long long>(p1.cancelled() - p0.cancelled()),
                static_cast<unsigned long long>(p1.skipped_blocks() - p0.skipped_blocks()),
                static_cast<unsigned long long>(p1.get_waits() - p0.get_waits()),
                static_cast<double>(p1.get_wait_us() - p0.get_wait_us()) / 1e3);
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::Status Bench(const tools::Flags& flags) {
  const bool redis = flags.Has("redis");
  if (redis == flags.Has("server")) {
    return absl::InvalidArgumentError("give exactly one of --server or --redis");
  }
  const std::string target = flags.GetString(redis ? "redis" : "server", "");
  ASSIGN_OR_RETURN(int64_t threads, flags.GetInt("threads", 4));
  ASSIGN_OR_RETURN(uint64_t block_size, flags.GetBytes("block-size", 2ull << 20));
  ASSIGN_OR_RETURN(int64_t num_keys, flags.GetInt("keys", 64));
  ASSIGN_OR_RETURN(double seconds, flags.GetDouble("seconds", 5));
  ASSIGN_OR_RETURN(int64_t batch, flags.GetInt("batch", 1));
  ASSIGN_OR_RETURN(int64_t channels, flags.GetInt("channels", threads));
  ASSIGN_OR_RETURN(uint64_t chunk, flags.GetBytes("chunk", 1ull << 20));
  ASSIGN_OR_RETURN(int64_t lookup_keys, flags.GetInt("lookup-keys", 8));
  ASSIGN_OR_RETURN(int64_t lease_ms, flags.GetInt("lease-ms", 0));
  if (lease_ms < 0) return absl::InvalidArgumentError("--lease-ms must be >= 0");
  if (redis && lease_ms > 0) return absl::InvalidArgumentError("--lease-ms is kvtier-only");
  ASSIGN_OR_RETURN(int64_t server_pid, flags.GetInt("server-pid", 0));
  const bool json = flags.Has("json");
  if (threads < 1 || threads > 256) return absl::InvalidArgumentError("--threads must be 1..256");
  if (num_keys < 1) return absl::InvalidArgumentError("--keys must be >= 1");
  if (batch < 1 || batch > num_keys) return absl::InvalidArgumentError("--batch must be 1..keys");
  if (block_size == 0 || block_size % 65536 != 0) {
    return absl::InvalidArgumentError("--block-size must be a positive multiple of 64KiB");
  }
  if (redis && batch != 1) return absl::InvalidArgumentError("--batch is kvtier-only");

  // A Llama-3-8B-like layout with as many layers as the block size asks for
  // (64 KiB per layer at 8 KV heads x 128 channels x 16 tokens fp16).
  kv::Layout layout;
  layout.num_layers = static_cast<uint32_t>(block_size / 65536);
  Workload w;
  // One namespace per block size: a namespace has one layout.
  w.ns = flags.GetString("namespace", absl::StrCat("bench-", block_size / 1024, "k"));
  w.lookup_keys = static_cast<int>(lookup_keys);
  w.lease_ms = static_cast<uint64_t>(lease_ms);
  w.lookup_full = flags.Has("lookup-full");
  w.block_bytes = block_size;
  for (int64_t i = 0; i < num_keys; ++i) {
    w.keys.push_back(absl::StrFormat("kvtier-bench-%03d", static_cast<int>(i % 1000)) +
                     std::string(i >= 1000 ? absl::StrCat("-", i / 1000) : ""));
  }
  const std::string raw = SyntheticRawBlock(layout, 7, 0);
  // The kvtier payload is an encoded fp16 blob (header + raw); Redis stores the same bytes.
  ASSIGN_OR_RETURN(w.payload, kv::Encode(kv::CodecId::kFp16, layout, 0, kv::AsBytes(raw)));

  // Phases.
  std::vector<std::pair<std::string, std::array<int, 3>>> phases;
  if (flags.Has("mix")) {
    std::array<int, 3> weights{0, 0, 0};
    for (absl::string_view part : absl::StrSplit(flags.GetString("mix", ""), ',', absl::SkipEmpty())) {
      std::pair<std::string, std::string> kv = absl::StrSplit(part, '=');
      int wgt;
      if (!absl::SimpleAtoi(kv.second, &wgt) || wgt < 0) {
        return absl::InvalidArgumentError(absl::StrCat("--mix: bad weight in '", part, "'"));
      }
      if (kv.first == "put") weights[0] = wgt;
      else if (kv.first == "get") weights[1] = wgt;
      else if (kv.first == "lookup") weights[2] = wgt;
      else return absl::InvalidArgumentError(absl::StrCat("--mix: unknown op '", kv.first, "'"));
    }
    if (weights[0] + weights[1] + weights[2] == 0) {
      return absl::InvalidArgumentError("--mix: all weights are 0");
    }
    phases.push_back({"mixed", weights});
  } else {
    for (absl::string_view op : absl::StrSplit(flags.GetString("ops", "put,get"), ',', absl::SkipEmpty())) {
      if (op == "put") phases.push_back({"put", {1, 0, 0}});
      else if (op == "get") phases.push_back({"get", {0, 1, 0}});
      else if (op == "lookup") phases.push_back({"lookup", {0, 0, 1}});
      else return absl::InvalidArgumentError(absl::StrCat("--ops: unknown op '", op, "'"));
    }
  }

  std::unique_ptr<client::Client> client;
  std::vector<std::unique_ptr<Backend>> backends;
  if (redis) {
    for (int64_t t = 0; t < threads; ++t) {
      ASSIGN_OR_RETURN(auto b, RedisBackend::Connect(target, &w, flags.Has("redis-raw-get")));
      backends.push_back(std::move(b));
    }
  } else {
    client::ClientOptions options;
    options.server = target;
    options.auth_token = tools::AuthTokenFromFlags(flags);
    tools::ApplyTlsFlags(flags, &options);
    options.num_channels = static_cast<int>(std::max<int64_t>(1, channels));
    options.chunk_bytes = chunk;
    options.max_streams_per_call = 1;
    options.shared_memory = !flags.Has("no-shm");
    options.shared_memory_socket_calls = !flags.Has("no-shm-socket");
    options.ucx = flags.Has("ucx");
    options.ucx_over_shared_memory = flags.Has("ucx");
    options.ucx_calls = !flags.Has("no-ucx-calls");
    // Room for every thread's put staging, get staging and SharedBuffers at once.
    options.shared_memory_bytes =
        static_cast<uint64_t>(threads) * (2 * batch + 1) * (block_size + 2 * 4096) * 2;
    if (flags.Has("cold-prefix")) {
      // The client's own default region (a Get larger than it goes in pieces staged in
      // it), or with --shared-buffers room for the whole chain's destinations.
      ASSIGN_OR_RETURN(int64_t chain, flags.GetInt("cold-prefix", 2048));
      options.shared_memory_bytes = client::ClientOptions().shared_memory_bytes;
      if (flags.Has("shared-buffers")) {
        options.shared_memory_bytes += static_cast<uint64_t>(std::max<int64_t>(chain, 0)) *
                                       (block_size + 4096);
      }
    }
    ASSIGN_OR_RETURN(options.shared_memory_bytes,
                     flags.GetBytes("shm-bytes", options.shared_memory_bytes));
    ASSIGN_OR_RETURN(int64_t window, flags.GetBytes("grpc-window", options.http2_stream_window_bytes));
    ASSIGN_OR_RETURN(int64_t frame, flags.GetBytes("grpc-frame", 0));
    ASSIGN_OR_RETURN(int64_t read_chunk, flags.GetBytes("grpc-read-chunk", 0));
    options.http2_stream_window_bytes = static_cast<int>(window);
    options.http2_max_frame_bytes = static_cast<int>(frame);
    options.tcp_min_read_chunk_bytes = static_cast<int>(read_chunk);
    ASSIGN_OR_RETURN(options.coalesce_max_delay_us,
                     flags.GetInt("coalesce-us", options.coalesce_max_delay_us));
    ASSIGN_OR_RETURN(uint64_t coalesce_bytes,
                     flags.GetBytes("coalesce-bytes", options.coalesce_max_bytes));
    options.coalesce_max_bytes = coalesce_bytes;
    ASSIGN_OR_RETURN(options.ucx_coalesce_max_bytes,
                     flags.GetBytes("ucx-coalesce-bytes", options.ucx_coalesce_max_bytes));
    ASSIGN_OR_RETURN(options.get_piece_bytes,
                     flags.GetBytes("get-piece-bytes", options.get_piece_bytes));
    v1::NamespaceSpec spec;
    spec.set_name(w.ns);
    spec.set_model_id("kvtier-bench");
    *spec.mutable_layout() = client::ToProto(layout);
    spec.set_codec(v1::CODEC_FP16);
    options.namespace_spec = spec;
    ASSIGN_OR_RETURN(client, client::Client::Connect(options));
    if (options.ucx && !client->uses_ucx()) {
      const std::string& why = client->connect_info().ucx_error;
      return absl::UnavailableError(
          absl::StrCat("--ucx: the UCX path is not available: ",
                       why.empty() ? "the server offers none (start it with --ucx)" : why));
    }
    if (options.shared_memory && !client->uses_shared_memory() &&
        !client->connect_info().shared_memory_error.empty()) {
      std::fprintf(stderr, "kvtier bench: shared memory not used: %s\n",
                   client->connect_info().shared_memory_error.c_str());
    }
    for (int64_t t = 0; t < threads; ++t) {
      ASSIGN_OR_RETURN(auto b, KvtierBackend::Create(client.get(), &w, static_cast<int>(batch),
                                                     flags.Has("shared-buffers")));
      backends.push_back(std::move(b));
    }
  }

  if (flags.Has("cold-prefix")) {
    if (redis) return absl::InvalidArgumentError("--cold-prefix is kvtier-only");
    ASSIGN_OR_RETURN(int64_t n, flags.GetInt("cold-prefix", 2048));
    ASSIGN_OR_RETURN(int64_t rounds, flags.GetInt("rounds", 10));
    ASSIGN_OR_RETURN(int64_t delay_ms, flags.GetInt("delay-ms", 5));
    if (n < 1 || rounds < 1 || delay_ms < 0) {
      return absl::InvalidArgumentError("--cold-prefix and --rounds must be >= 1, --delay-ms >= 0");
    }
    ASSIGN_OR_RETURN(int64_t drop_settle_ms, flags.GetInt("drop-settle-ms", 0));
    if (drop_settle_ms < 0) return absl::InvalidArgumentError("--drop-settle-ms must be >= 0");
    return ColdPrefixBench(client.get(), w, layout, n, rounds, delay_ms,
                           flags.GetString("drop-cache", ""), drop_settle_ms,
                           flags.Has("shared-buffers"), json);
  }

  // Untimed: store every key once (each thread its own keys).
  {
    std::vector<std::thread> ws;
    std::vector<absl::Status> errs(threads);
    for (int64_t t = 0; t < threads; ++t) {
      ws.emplace_back([&, t] {
        for (size_t i = t; i < w.keys.size(); i += threads) {
          auto r = backends[t]->Do(Op::kPut, {i});
          if (!r.ok()) {
            errs[t] = r.status();
            return;
          }
        }
      });
    }
    for (auto& th : ws) th.join();
    for (auto& e : errs) {
      if (!e.ok()) return absl::Status(e.code(), absl::StrCat("populating keys: ", e.message()));
    }
  }

  const bool progress = isatty(STDERR_FILENO);
  // kvtier = payloads over TCP; kvtier-shm = staged through the shared region;
  // kvtier-shm-zc = put from / got into SharedBuffers; kvtier-ucx = over UCX (--ucx).
  std::string system = redis ? (flags.Has("redis-raw-get") ? "redis-raw" : "redis") : "kvtier";
  if (redis && target.rfind("unix:", 0) == 0) system += "-unix";
  if (!redis && client->uses_shared_memory()) {
    system = flags.Has("shared-buffers") ? "kvtier-shm-zc" : "kvtier-shm";
  }
  if (!redis && client->uses_ucx()) system = "kvtier-ucx";
  if (!json) {
    std::printf("# %s %s: %lld threads, %s blocks (%llu B), %lld keys, %.1fs per phase%s\n",
                system.c_str(), target.c_str(), static_cast<long long>(threads),
                absl::StrFormat("%.0fKiB", block_size / 1024.0).c_str(),
                static_cast<unsigned long long>(w.payload.size()),
                static_cast<long long>(num_keys), seconds,
                redis ? "" : absl::StrCat(", ", channels, " channels, batch ", batch).c_str());
  }
  for (const auto& [name, weights] : phases) {
    ASSIGN_OR_RETURN(PhaseResult r, RunPhase(name, backends, w, weights, seconds,
                                             static_cast<int>(batch), progress, server_pid));
    PrintResult(r, target, system, w.payload.size(), backends.size(), json);
  }
  if (!redis && client->uses_shared_memory()) {
    std::fprintf(stderr, "kvtier bench: %llu calls over the shm socket\n",
                 static_cast<unsigned long long>(client->shared_memory_socket_calls()));
  }
  if (!redis && client->uses_ucx()) {
    std::fprintf(stderr, "kvtier bench: %llu Puts as call frames over UCX\n",
                 static_cast<unsigned long long>(client->ucx_calls()));
  }
  return absl::OkStatus();
}

}  // namespace

int RunBench(int argc, char** argv) {
  tools::Flags flags = tools::Flags::Parse(
      argc, argv, 1,
      {"json", "redis-raw-get", "no-shm", "no-shm-socket", "ucx", "no-ucx-calls", "shared-buffers",
       "tls", "help"});
  if (flags.Has("help")) {
    std::fputs(kBenchUsage, stdout);
    return 0;
  }
  absl::Status known = flags.CheckKnown({"server", "redis", "threads", "block-size", "keys",
                                         "seconds", "ops", "mix", "batch", "channels", "chunk",
                                         "lookup-keys", "lookup-full", "lease-ms", "namespace", "server-pid", "redis-raw-get",
                                         "grpc-window", "grpc-frame", "grpc-read-chunk", "no-shm",
                                         "no-shm-socket", "ucx", "no-ucx-calls",
                                         "coalesce-us", "coalesce-bytes", "ucx-coalesce-bytes",
                                         "get-piece-bytes", "shm-bytes", "auth-token", "tls", "tls-ca", "tls-cert", "tls-key",
                                         "tls-server-name", "shared-buffers", "cold-prefix",
                                         "rounds", "delay-ms", "drop-cache", "drop-settle-ms", "json", "help"});
  if (!known.ok() || !flags.positional().empty()) {
    std::fprintf(stderr, "kvtier bench: %s\n\n%s",
                 known.ok() ? "unexpected positional argument"
                            : std::string(known.message()).c_str(),
                 kBenchUsage);
    return 2;
  }
  absl::Status status = Bench(flags);
  if (!status.ok()) {
    std::fprintf(stderr, "kvtier bench: %s\n", status.ToString().c_str());
    return absl::IsInvalidArgument(status) ? 2 : 1;
  }
  return 0;
}

}  // namespace kvtier::tools
