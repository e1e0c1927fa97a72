// kvtier::client::Client: the C++ client of kvtierd for inference workers and tools.
//
//   ClientOptions options;
//   options.server = "127.0.0.1:50051";
//   options.namespace_spec = spec;              // registered (or checked) at Connect
//   ASSIGN_OR_RETURN(auto client, Client::Connect(options));
//   ASSIGN_OR_RETURN(auto keys, PrefixKeysForTokens(scheme_params, tokens));
//   ASSIGN_OR_RETURN(auto lookup, client->Lookup("llama3", keys));
//   ... client->PutBlocks("llama3", blocks); client->GetBlocksInto("llama3", keys, bufs);
//
// Transport: the client opens `num_channels` separate HTTP/2 connections and spreads calls
// over them round-robin. When the server is on the same host and offers its shared-memory
// socket (dataplane/shm_server.h), Connect also opens a shared region and Put / GetBlocksInto
// payloads then travel through it: the gRPC stream carries only the header, the server
// copies once between the region and its hot tier, and payloads that already live in a
// SharedBuffer (AllocateSharedBuffer) are not copied on the client at all; other payloads
// are staged through the region with one memcpy. Otherwise (another host, option off,
// region full) payloads travel over UCX when the server offers its UCX data path
// (dataplane/ucx_server.h: rendezvous active messages, RDMA where the fabric has it, TCP
// otherwise; the gRPC stream carries only the headers), else over TCP as below. Put and
// Get payloads never pass through protobuf `bytes` fields:
// Put chunk messages are gRPC slices pointing at the caller's memory, and Get chunk
// messages are parsed straight out of the received slices into the destination buffers
// (protocol/wire.h). A batch larger than one block is split over up to
// `max_streams_per_call` concurrent streams.
//
// Deadlines: every call has one (CallOptions::deadline_ms, else the client default) that
// covers all its attempts. Retries: idempotent calls (RegisterNamespace, Put, Get, Lookup,
// Stats, ListNamespaces, Pin, Unpin, Flush, Delete, Evict) are retried on UNAVAILABLE with
// exponential backoff while the deadline allows (a Put stores blocks under keys bound to
// their content, so storing them again leaves the same state; a stream broken by a
// connection the server closed is redone on a new one); ReportScores is never retried.
//
// Errors are the server's gRPC codes mapped one-to-one onto absl::StatusCode (the
// message prefixed with the RPC name); DEADLINE_EXCEEDED / UNAVAILABLE when the server
// cannot be reached in time. A server's structured detail (kvtier.v1.ErrorDetail) stays
// attached: read it with protocol::GetErrorDetail (protocol/error_detail.h); the client
// itself acts on SHM_SESSION_UNKNOWN (falls back to TCP), never on message text.
//
// Performance notes (2 MiB blocks on loopback; see tests/bench/redis_vs_kvtier.sh): on the
// server's host the shared-memory path is 2-3x faster than TCP; put from and get into
// SharedBuffers to skip the staging copy. Use one Client per process with num_channels
// about the number of threads issuing calls; give GetBlocksInto buffers that are reused
// (and so already page-faulted); and in processes
// that move many multi-MiB payloads set glibc's mallopt(M_MMAP_THRESHOLD, 64 MiB) and
// mallopt(M_TRIM_THRESHOLD, 512 MiB) at startup (the `kvtier` tool does), otherwise gRPC's
// receive buffers are fresh pages every time (about 40% of a Get's client CPU here).
//
// Small calls: concurrent PutBlocks / GetBlocksInto calls of several threads are coalesced
// into shared streams (ClientOptions::coalesce_max_delay_us, client/coalescer.h states
// what is shared), with results and errors still per call; same-host calls over the shared
// region's socket (ClientOptions::shared_memory_socket_calls) are cheap enough alone. Lookup asks the server for the
// compact answer (protocol/lookup_form.h) and, by default, expands it into `blocks`.
//
// Thread-safe: one Client may be used from many threads at once.
#ifndef KVTIER_CLIENT_CLIENT_H_
#define KVTIER_CLIENT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv/codec.h"
#include "kv/layout.h"
#include "kvtier/v1/kvtier.pb.h"
#include "protocol/convert.h"

namespace kvtier::client {

class SharedRegion;  // client/shared_region.h

struct ClientOptions {
  // "host:port" of a kvtierd.
  std::string server = "127.0.0.1:50051";
  // Separate TCP connections to the server. Default: 4.
  int num_channels = 4;
  // Deadline of calls whose CallOptions do not set one. Default: 10 s.
  int64_t default_deadline_ms = 10000;
  // Connect waits at most this long for the server to answer. Default: 5 s.
  int64_t connect_deadline_ms = 5000;
  // Attempts of an idempotent call on UNAVAILABLE (1 = no retry). Default: 3.
  int max_attempts = 3;
  // First retry backoff; doubles per attempt. Default: 20 ms.
  int64_t retry_backoff_ms = 20;
  // Payload bytes per Put chunk message. Default: 1 MiB (the protocol's "about 1 MiB").
  uint64_t chunk_bytes = 1ull << 20;
  // Concurrent streams one PutBlocks / GetBlocks call may use. Default: 4.
  int max_streams_per_call = 4;
  // A GetBlocksInto whose buffers add up to more than this (and no UCX channel in use)
  // is sent as consecutive Get calls of about this many bytes each (whole keys), at most
  // two in flight: over the gRPC stream the next is sent once the server has begun
  // answering the one before (its header arrived), so the server reads the next piece
  // (from its cold tier) while the previous one is on the wire; with a shared region the
  // pieces are at most a third of it, go as one stream (not max_streams_per_call) and are
  // each staged in the region, the next sent once the one before is (the server writes
  // it while the one before is copied out). docs/prefetch.md "Pieces". Results are as
  // for one call; a lease_id is released once, after the last piece. 0: never split.
  // Default: 16 MiB.
  uint64_t get_piece_bytes = 16ull << 20;
  // Largest message accepted from the server. Default: 64 MiB.
  int max_receive_message_bytes = 64 << 20;
  // HTTP/2 transport tuning for large payloads (0 = gRPC's default):
  // receive window per stream (GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES). Default: 8 MiB.
  int http2_stream_window_bytes = 8 << 20;
  // Largest HTTP/2 frame the server may send us (GRPC_ARG_HTTP2_MAX_FRAME_SIZE).
  // Default: 0 (16 KiB).
  int http2_max_frame_bytes = 0;
  // Smallest socket read buffer (GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE). Default: 0.
  int tcp_min_read_chunk_bytes = 0;
  // If set, Connect registers this namespace (or checks it against the stored one).
  std::optional<kvtier::v1::NamespaceSpec> namespace_spec;
  // The client's prefix-key hash scheme; Connect fails if the server's differs.
  // Default: the canonical scheme of client/prefix_keys.h.
  std::string hash_scheme;
  // Use the server's same-node shared-memory data path when it offers one and it is
  // reachable from here. Default: true.
  bool shared_memory = true;
  // Size of this client's shared region: staging for payloads in private memory (a call
  // whose payloads or GetBlocksInto buffers do not fit goes over TCP) plus SharedBuffers.
  // Allocated and faulted in at Connect, in this process's memory. Default: 64 MiB.
  uint64_t shared_memory_bytes = 64ull << 20;
  // The server's socket as seen from this host, when it differs from the path the server
  // reports (e.g. a hostPath volume mounted elsewhere). Default: the reported path.
  std::string shared_memory_socket;
  // Bearer token sent with every call (`authorization: Bearer <token>`), for servers
  // with tenants configured. Default: none.
  std::string auth_token;
  // TLS (protocol/tls.h), on when `tls` is true or any tls_* field is set: the server's
  // certificate must chain to tls_ca_file (empty: the system roots) and name the host of
  // `server` (or tls_server_name); tls_cert_file + tls_key_file are presented as the
  // client certificate (mutual TLS; with tls.identities on the server it names the
  // tenant). The files are re-read as they change. Default: plaintext.
  bool tls = false;
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_server_name;
  // When a CUDA runtime and device are present, page-lock the shared region with
  // cudaHostRegister, so SharedBuffers copy to and from the GPU at pinned-memory speed
  // (about 7x pageable memory for 2 MiB blocks on an H200). Default: true.
  bool shared_memory_cuda_register = true;
  // Use the server's cross-node UCX data path (UcxOffer, dataplane/ucx_server.h) for
  // Put / Get payloads when it offers one and the shared-memory path is not in use.
  // Default: true.
  bool ucx = true;
  // Prefer UCX over the shared-memory path even on the server's host (benchmarks,
  // tests). Default: false.
  bool ucx_over_shared_memory = false;
  // Put / GetBlocksInto calls through the shared region go as frames on its Unix socket
  // (docs/design.md §7 control path: no HTTP/2, served inline), falling back to gRPC
  // streams naming the region when the socket fails or the server refuses the frame.
  // false: always the gRPC streams.
  bool shared_memory_socket_calls = true;
  // A Put whose payloads move over UCX sends its call frame over UCX too, when the server
  // offers it and the frame fits one UCX message (docs/dataplane.md, "Put calls over
  // UCX"): no gRPC call. false: the header always goes as a gRPC call.
  bool ucx_calls = true;
  // UCX_TLS for this client's UCX context (e.g. "tcp"); empty: the environment's
  // UCX_TLS, else UCX's choice. Default: empty.
  std::string ucx_transports;
  // The host to reach the server's UCX port at, when the offer names none and it differs
  // from the host of `server`. Default: the host of `server`.
  std::string ucx_host;
  // Client-side coalescing (client/coalescer.h): concurrent PutBlocks / GetBlocksInto
  // calls from several threads to the same namespace, each carrying at most
  // coalesce_max_bytes / 2 of payload, are sent as one stream when a call of theirs is
  // already on the wire; a batch waits at most coalesce_max_delay_us for it to return
  // and carries at most coalesce_max_bytes. Results and errors stay per call (a failed
  // batch is re-sent call by call). GetBlocksInto calls with a lease_id are not
  // coalesced. 0 in either disables it. Defaults: 200 us, 2 MiB. Calls that go over the
  // shared region's socket (shared_memory_socket_calls) are never coalesced: there a batch
  // cost more than it saved.
  int64_t coalesce_max_delay_us = 200;
  uint64_t coalesce_max_bytes = 2ull << 20;
  // coalesce_max_bytes for calls whose payloads move over UCX (while uses_ucx()): there
  // a batch costs one gRPC call and one round of rendezvous messages instead of one per
  // call, which is most of a 2 MiB call's fixed CPU (docs/performance.md, UCX). A Put
  // sent as a UCX call frame (ucx_calls) is never coalesced: it makes no gRPC call.
  // 0: UCX calls use coalesce_max_bytes. Default: 16 MiB.
  uint64_t ucx_coalesce_max_bytes = 16ull << 20;
};

// Per-call options.
struct CallOptions {
  int64_t deadline_ms = 0;  // 0 = ClientOptions::default_deadline_ms
};

// One block to put. The payload memory is the caller's and must stay valid until
// PutBlocks returns (it is sent without being copied).
struct PutBlock {
  std::string key;          // 1..32 bytes
  std::string parent_key;   // empty for block 0
  uint32_t block_index = 0;
  std::span<const uint8_t> payload;
  // Optional, for KV-aware routers: sent with the block, carried into the server's
  // BlockStored events (ServerConfig.events), never stored. Empty: not sent.
  std::vector<uint32_t> token_ids = {};  // the block's tokens (at most tokens_per_block)
  std::string lora_name = {};            // its LoRA adapter
  std::vector<std::string> extra_keys = {};  // its extra hash inputs (multimodal ids, cache_salt)
};

struct PutOptions {
  kvtier::v1::PayloadFormat format = kvtier::v1::PAYLOAD_FORMAT_ENCODED;
  int64_t deadline_ms = 0;
};

struct PutResult {
  uint32_t blocks_stored = 0;
  uint64_t bytes_stored = 0;  // encoded bytes stored by the server
  // ClusterClient only: block copies not stored because their owner was unreachable
  // (each such block is stored on at least one other owner).
  uint32_t replicas_skipped = 0;
  // Encoded bytes stored per block, in the order of the call's blocks (empty when the
  // server does not report it; Client only).
  std::vector<uint64_t> block_bytes_stored = {};
};

struct GetOptions {
  kvtier::v1::PayloadFormat format = kvtier::v1::PAYLOAD_FORMAT_ENCODED;
  int64_t deadline_ms = 0;
  // A lease of this server (LookupResponse.blocks[i].lease_id) that the Get ends once it
  // has read the blocks. 0 = none.
  uint64_t lease_id = 0;
};

struct LookupOptions {
  bool local_only = false;  // do not fan out to cluster peers
  // > 0: lease the reported resident prefix for this long (LookupRequest.lease_ms).
  uint64_t lease_ms = 0;
  // Return the response in the compact form when the server sent it (tiers, owners,
  // owner_lease_ids, owner_index; see kvtier.proto LookupResponse) instead of expanding
  // it into `blocks`: saves one BlockLocation per key. Read either form with
  // protocol::LookupTier / LookupOwner / LookupLeaseId (protocol/lookup_form.h); an old
  // server answers with `blocks` regardless.
  bool keep_compact = false;
  // LookupRequest.prefetch: ask the server to start promoting the cold blocks of the
  // reported prefix to hot (docs/prefetch.md); PREFETCH_DEFAULT follows the server.
  kvtier::v1::Prefetch prefetch = kvtier::v1::PREFETCH_DEFAULT;
};

// One block returned by GetBlocks.
struct FetchedBlock {
  kvtier::v1::GetBlockInfo info;  // found, size, tier, block_index, codec, positions
  std::string data;               // the payload (empty when not found)
};

// What Connect learned from the server.
struct ConnectInfo {
  std::string node_id;
  std::string server_hash_scheme;
  bool namespace_created = false;
  kvtier::v1::NamespaceSpec stored_spec;  // as stored on the server (if one was registered)
  // Why the shared-memory path is not used (empty when it is, or when the server offers
  // none), e.g. "cannot connect to /var/run/kvtier/kvtierd.sock: No such file...".
  std::string shared_memory_error;
  // The shared region is page-locked for CUDA (see shared_memory_cuda_register).
  bool shared_memory_cuda_registered = false;
  // Why the UCX path is not used (empty when it is, or when the server offers none).
  std::string ucx_error;
};

// Memory inside the client's shared region (Client::AllocateSharedBuffer). Payloads put
// from a SharedBuffer and GetBlocksInto buffers that are SharedBuffers skip the client-side
// copy. Freed on destruction; keeps the region mapped while it lives, so it may outlive
// the Client (it is then plain memory). Move-only; not thread-safe.
class SharedBuffer {
 public:
  SharedBuffer() = default;
  ~SharedBuffer();
  SharedBuffer(SharedBuffer&& other) noexcept;
  SharedBuffer& operator=(SharedBuffer&& other) noexcept;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<uint8_t> span() const { return {data_, size_}; }

 private:
  friend class Client;
  std::shared_ptr<SharedRegion> region_;
  uint64_t offset_ = 0;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

class Client {
 public:
  // Opens the channels and performs the handshake: with options.namespace_spec set,
  // RegisterNamespace (creating it or checking it); without one, Stats (a reachability
  // and hash-scheme check). Errors:
  //   INVALID_ARGUMENT  bad options (empty server, num_channels < 1, ...);
  //   FAILED_PRECONDITION  the server's hash scheme differs from options.hash_scheme, or
  //                     the stored namespace's layout or codec differs from the spec
  //                     (the message names the field and both values);
  //   UNAVAILABLE / DEADLINE_EXCEEDED  the server did not answer within
  //                     connect_deadline_ms.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);

  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const ClientOptions& options() const;
  const ConnectInfo& connect_info() const;

  // True while Put / GetBlocksInto payloads use the same-node shared-memory path. It
  // turns false for good if the server forgets the session (it restarted); calls then
  // use TCP (a new Client gets shared memory again).
  bool uses_shared_memory() const;
  // Put / Get calls answered over the shared region's socket so far (the rest of the
  // shared-memory calls went as gRPC streams).
  uint64_t shared_memory_socket_calls() const;
  // Puts answered over UCX's call frames so far (ClientOptions::ucx_calls).
  uint64_t ucx_calls() const;

  // `bytes` of memory in the shared region, for payloads a caller writes (e.g. a
  // device-to-host copy of KV) or reads in place. FAILED_PRECONDITION without the
  // shared-memory path; RESOURCE_EXHAUSTED when the region has no room.
  absl::StatusOr<SharedBuffer> AllocateSharedBuffer(uint64_t bytes);

  // True while Put / Get payloads that do not take the shared-memory path use the UCX
  // path (ClientOptions::ucx). It turns false for good once the UCX endpoint fails or
  // the server forgets the session; calls then use the gRPC streams. A call whose UCX
  // transfer fails before anything was stored is redone over the stream.
  bool uses_ucx() const;

  // Registers `spec` (or checks it against the stored one). FAILED_PRECONDITION on a
  // hash-scheme, layout or codec mismatch, like Connect. Later PutBlocks calls to this
  // namespace send the layout in their header, so the server re-checks it per stream.
  absl::StatusOr<kvtier::v1::RegisterNamespaceResponse> RegisterNamespace(
      const kvtier::v1::NamespaceSpec& spec, const CallOptions& call = {});

  // Stores `blocks` in namespace `ns`. Payloads are streamed in chunks of
  // options().chunk_bytes straight from the caller's memory; a batch is split into
  // contiguous runs over up to max_streams_per_call concurrent streams (so a block may
  // reach the server before its parent). Never retried. Errors: the server's
  // (NOT_FOUND unknown namespace, INVALID_ARGUMENT bad key or payload, FAILED_PRECONDITION
  // layout mismatch, RESOURCE_EXHAUSTED), DEADLINE_EXCEEDED, UNAVAILABLE. On error some
  // runs may have been stored.
  absl::StatusOr<PutResult> PutBlocks(std::string_view ns, std::span<const PutBlock> blocks,
                                      const PutOptions& options = {});

  // Fetches `keys` into caller-provided buffers: block i (when found) is written to the
  // start of buffers[i]. Returns one GetBlockInfo per key (found=false for a miss;
  // size = bytes written). INVALID_ARGUMENT if buffers.size() != keys.size();
  // OUT_OF_RANGE naming the key if a found block does not fit its buffer; the server's
  // errors otherwise. Retried on UNAVAILABLE (buffers may have been partly written).
  absl::StatusOr<std::vector<kvtier::v1::GetBlockInfo>> GetBlocksInto(
      std::string_view ns, std::span<const std::string> keys,
      std::span<const std::span<uint8_t>> buffers, const GetOptions& options = {});

  // Like GetBlocksInto but allocates the payloads.
  absl::StatusOr<std::vector<FetchedBlock>> GetBlocks(std::string_view ns,
                                                      std::span<const std::string> keys,
                                                      const GetOptions& options = {});

  // How much of the prefix chain `keys` (block 0 first) is resident, and where. While the
  // shared-memory path is in use (and the server offers it), the call goes as a frame on
  // the region's socket, with the same answer and errors; else over gRPC.
  absl::StatusOr<kvtier::v1::LookupResponse> Lookup(std::string_view ns,
                                                    std::span<const std::string> keys,
                                                    bool local_only = false,
                                                    const CallOptions& call = {});
  // As above with options; with options.lease_ms the answer's leading leased_blocks are
  // kept loadable by their owners (blocks[i].lease_id) until the lease ends, ReleaseLease,
  // or a Get naming the lease (GetOptions.lease_id). INVALID_ARGUMENT when lease_ms
  // exceeds the server's max_lease_ms.
  absl::StatusOr<kvtier::v1::LookupResponse> Lookup(std::string_view ns,
                                                    std::span<const std::string> keys,
                                                    const LookupOptions& options,
                                                    const CallOptions& call = {});
  // As above with the keys as views (e.g. into a caller's own buffers, as the Python
  // binding passes them): not copied before they are encoded.
  absl::StatusOr<kvtier::v1::LookupResponse> Lookup(std::string_view ns,
                                                    std::span<const std::string_view> keys,
                                                    const LookupOptions& options,
                                                    const CallOptions& call = {});
  // Starts the Lookup of the keys keys[which[0]], keys[which[1]], ... in that order (one
  // owner's share of a chain, as the ClusterClient asks it) and returns at once; `done`
  // runs exactly once, on a gRPC thread, with the answer or the error, as Lookup's. One
  // attempt (no retry on UNAVAILABLE). The keys and `which` need live only until this
  // returns. REQUIRES: every which[j] < keys.size().
  void LookupAsync(std::string_view ns, std::span<const std::string_view> keys,
                   std::span<const size_t> which, const LookupOptions& options,
                   const CallOptions& call,
                   std::function<void(absl::StatusOr<kvtier::v1::LookupResponse>)> done);
  // Ends lease `lease_id` of this server; returns the blocks it held (0 = it had ended
  // already). NOT_FOUND unknown namespace.
  absl::StatusOr<uint64_t> ReleaseLease(std::string_view ns, uint64_t lease_id,
                                        const CallOptions& call = {});

  // Pins `keys` for ttl_ms (0 = until Unpin); returns the number of blocks pinned.
  absl::StatusOr<uint64_t> Pin(std::string_view ns, std::span<const std::string> keys,
                               uint64_t ttl_ms, const CallOptions& call = {});
  absl::StatusOr<uint64_t> Unpin(std::string_view ns, std::span<const std::string> keys,
                                 const CallOptions& call = {});

  // Reports accumulated attention mass per key. INVALID_ARGUMENT if the lengths differ.
  absl::Status ReportScores(std::string_view ns, std::span<const std::string> keys,
                            std::span<const float> scores, const CallOptions& call = {});

  // Compacts a stored sequence server-side (request.keys, block 0 first) with the policy
  // and parameters in `request` and stores the compacted entry next to the blocks; fetch
  // it with GetBlocks(response.entry_key). The same selection functions are in
  // kv/compaction.h for workers that compact before pushing. INVALID_ARGUMENT for
  // bad parameters, NOT_FOUND for unknown keys or namespace. Not retried (the server
  // stores an entry); repeating it is harmless, the entry key is deterministic.
  absl::StatusOr<kvtier::v1::CompactResponse> Compact(const kvtier::v1::CompactRequest& request,
                                                      const CallOptions& call = {});

  // Deletes `keys` from every tier; returns the number removed.
  absl::StatusOr<uint64_t> Delete(std::string_view ns, std::span<const std::string> keys,
                                  const CallOptions& call = {});

  // Admin.
  absl::StatusOr<kvtier::v1::StatsResponse> Stats(std::string_view ns = {},
                                                  const CallOptions& call = {});
  absl::StatusOr<kvtier::v1::ListNamespacesResponse> ListNamespaces(
      const CallOptions& call = {});
  // Evicts `keys` (empty = the whole namespace): demotes to cold, or drops from every
  // tier with `drop`. Returns the number of blocks affected.
  absl::StatusOr<uint64_t> Evict(std::string_view ns, std::span<const std::string> keys,
                                 bool drop, const CallOptions& call = {});
  // One Flush call: the server writes hot blocks of `ns` (all when empty) to cold until
  // near the call's deadline (or max_ms, when not 0) and answers how far it got.
  absl::StatusOr<kvtier::v1::FlushResponse> FlushStep(std::string_view ns, uint32_t max_ms = 0,
                                                      const CallOptions& call = {});
  // FlushStep until done, each call under its own deadline. DEADLINE_EXCEEDED when a call
  // ends with nothing written and not done (the deadline leaves no time to write).
  absl::Status Flush(std::string_view ns = {}, const CallOptions& call = {});
  // Drops namespace `ns` from the node called (every block, then the spec; see
  // DropNamespaceRequest). Returns the blocks removed. NOT_FOUND unknown namespace;
  // FAILED_PRECONDITION while leases of it are in force unless `force`. Not retried.
  absl::StatusOr<uint64_t> DropNamespace(std::string_view ns, bool force,
                                         const CallOptions& call = {});
  // Recovery on demand of the node called (RecoverRequest; docs/recovery.md "On
  // demand"): scans its cold slab; with `verify` reports what a rebuild would change and
  // changes nothing, else re-creates lost index and namespace records and frees damaged
  // extents. Operator token only (PERMISSION_DENIED). It reads the whole slab: give it a
  // long deadline (call.deadline_ms). Not retried.
  absl::StatusOr<kvtier::v1::RecoverResponse> Recover(bool verify, const CallOptions& call = {});
  // Peers, ownership shares and per-node stats as seen by the answering node.
  absl::StatusOr<kvtier::v1::ClusterStatusResponse> ClusterStatus(const CallOptions& call = {});

  // For language bindings (kvtier._native), whose messages are their own: one unary call
  // of the KvCache or KvCacheAdmin service by its full method name
  // ("/kvtier.v1.KvCacheAdmin/Stats"), `request` a serialized request message, on this
  // client's channels with its credentials, deadline and retry rule (UNAVAILABLE is
  // retried only when `idempotent`; `wait_for_ready` waits for the channel to connect
  // instead of failing at once). Returns the serialized response; the server's status
  // otherwise, its message prefixed by the method's short name. INVALID_ARGUMENT for a
  // method of another service. C++ callers use the typed calls above.
  absl::StatusOr<std::string> UnaryRaw(std::string_view method, std::string_view request,
                                       bool idempotent, bool wait_for_ready = false,
                                       const CallOptions& call = {});

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  // The Lookup of a serialized LookupRequest (compact asked), over the socket or gRPC.
  absl::StatusOr<kvtier::v1::LookupResponse> LookupEncoded(const std::string& request,
                                                           const LookupOptions& options,
                                                           const CallOptions& call);
  std::unique_ptr<Impl> impl_;
};

// Layout conversions for callers of this API; defined in protocol/convert.h.
using ::kvtier::protocol::FromProto;
using ::kvtier::protocol::ToProto;

}  // namespace kvtier::client

#endif  // KVTIER_CLIENT_CLIENT_H_
