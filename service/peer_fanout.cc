#include "service/peer_fanout.h"

#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "common/mutex.h"
#include "protocol/lookup_form.h"
#include "protocol/lookup_merge.h"
#include "protocol/peer_liveness.h"

namespace kvtier::service {
namespace {

bool IsNumericAddress(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

constexpr char kHealthCheckMethod[] = "/grpc.health.v1.Health/Check";
constexpr char kLookupMethod[] = "/kvtier.v1.KvCache/Lookup";

// HealthCheckResponse{status: SERVING} on the wire (field 1, varint 1). The only other
// answers are NOT_SERVING (the peer's store is not open yet, or it is draining) and
// SERVICE_UNKNOWN.
bool IsServing(const grpc::ByteBuffer& response) {
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return false;
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return bytes == std::string("\x08\x01", 2);
}

}  // namespace

FanoutOptions FanoutOptionsFromConfig(const v1::ServerConfig& config) {
  FanoutOptions o;
  o.replication_factor = std::max<uint32_t>(1, config.cluster().replication_factor());
  o.peer_deadline_ms =
      config.cluster().peer_deadline_ms() != 0 ? config.cluster().peer_deadline_ms() : 200;
  // Peers run the same config, so their per-request key limit is ours.
  if (config.max_keys_per_request() != 0) {
    o.max_keys_per_call = std::min<uint32_t>(o.max_keys_per_call, config.max_keys_per_request());
  }
  return o;
}

// ---------------------------------------------------------------------------------------
// Channels, health probes and the in-flight count

PeerFanout::PeerFanout(Membership* membership, FanoutOptions options, common::Clock* clock)
    : membership_(membership),
      options_(std::move(options)),
      health_(clock, options_.failures_to_unhealthy, options_.unhealthy_retry_ms) {}

PeerFanout::~PeerFanout() { AwaitIdle(); }

void PeerFanout::AwaitIdle() {
  common::MutexLock lock(&mu_);
  mu_.Await(common::Condition(
      +[](int* n) { return *n == 0; }, &in_flight_));
}

std::string PeerFanout::TlsNameFor(const std::string& address) const {
  for (const Peer& p : membership_->peers()) {
    if (p.address != address || p.id == address) continue;
    std::string host;
    uint32_t port = 0;
    if (!SplitHostPort(p.id, "id", &host, &port).ok() || IsNumericAddress(host)) return "";
    return host;
  }
  return "";
}

std::shared_ptr<PeerStubs> PeerFanout::StubsFor(const std::string& address) {
  {
    common::MutexLock lock(&mu_);
    if (auto it = channels_.find(address); it != channels_.end() && it->second != nullptr) {
      return it->second;
    }
  }
  // A new channel. Asked without mu_ held: Membership has a lock of its own.
  const std::string tls_name = options_.credentials != nullptr ? TlsNameFor(address) : "";
  common::MutexLock lock(&mu_);
  std::shared_ptr<PeerStubs>& c = channels_[address];
  if (c == nullptr) {
    auto stubs = std::make_shared<PeerStubs>();
    grpc::ChannelArguments args;
    // Fail fast and reconnect quickly: a restarted peer should be usable again within
    // about a second, and a dead one must not stall calls behind connection attempts.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    // Our own subchannels: a peer restarted on the same address must not inherit the
    // backoff state of a subchannel another channel left in TRANSIENT_FAILURE.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    // TLS: the peer's certificate must name the peer. gRPC checks its SANs against the
    // dialed host (an IP SAN for a numeric address); when the membership knows the peer
    // by a DNS name (peer_dns: reverse DNS), that name is checked instead.
    if (!tls_name.empty()) args.SetSslTargetNameOverride(tls_name);
    auto creds =
        options_.credentials != nullptr ? options_.credentials : grpc::InsecureChannelCredentials();
    stubs->channel = grpc::CreateCustomChannel(address, creds, args);
    stubs->kv = v1::KvCache::NewStub(stubs->channel);
    stubs->admin = v1::KvCacheAdmin::NewStub(stubs->channel);
    stubs->generic = std::make_unique<grpc::GenericStub>(stubs->channel);
    c = std::move(stubs);
  }
  return c;
}

void PeerFanout::SyncMembership(const std::vector<Peer>& peers) {
  const uint64_t version = membership_->version();
  {
    common::MutexLock lock(&mu_);
    // Drop retired stubs no call holds any more (only this list references them).
    retired_.erase(
        std::remove_if(retired_.begin(), retired_.end(),
                       [](const std::shared_ptr<PeerStubs>& s) { return s.use_count() == 1; }),
        retired_.end());
    if (version == membership_version_) return;
    membership_version_ = version;
    std::set<std::string> addresses;
    for (const Peer& p : peers) addresses.insert(p.address);
    for (auto it = channels_.begin(); it != channels_.end();) {
      if (addresses.count(it->first) != 0) {
        ++it;
        continue;
      }
      if (it->second.use_count() > 1) retired_.push_back(std::move(it->second));
      it = channels_.erase(it);
    }
  }
  health_.Retain(peers);
}

void PeerFanout::PrepareContext(grpc::ClientContext* ctx) const {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(options_.peer_deadline_ms));
  if (options_.prepare_context) options_.prepare_context(ctx);
}

void PeerFanout::CallsStarted(int n) {
  common::MutexLock lock(&mu_);
  in_flight_ += n;
}

void PeerFanout::CallFinished() {
  common::MutexLock lock(&mu_);
  --in_flight_;
}

namespace {

struct ProbeCall {
  std::string peer_id;
  std::shared_ptr<PeerStubs> stubs;
  grpc::ClientContext ctx;
  grpc::ByteBuffer request;  // HealthCheckRequest{service: ""}: no bytes
  grpc::ByteBuffer response;
};

}  // namespace

void PeerFanout::Probe(const Peer& peer) {
  auto* call = new ProbeCall;  // owned by its completion callback
  call->peer_id = peer.id;
  call->stubs = StubsFor(peer.address);
  grpc::Slice empty;
  call->request = grpc::ByteBuffer(&empty, 1);
  PrepareContext(&call->ctx);
  CallsStarted(1);
  call->stubs->generic->UnaryCall(
      &call->ctx, kHealthCheckMethod, grpc::StubOptions(), &call->request, &call->response,
      [this, call](grpc::Status status) {
        std::unique_ptr<ProbeCall> owned(call);
        // A peer without the health service (UNIMPLEMENTED) still answered.
        const bool answered = status.ok() ? IsServing(call->response)
                                          : !protocol::IsPeerUnreachable(status.error_code());
        health_.FinishProbe(call->peer_id, answered);
        owned.reset();  // before CallFinished: ~PeerFanout may run right after it
        CallFinished();
      });
}

// ---------------------------------------------------------------------------------------
// Lookup

// One LookupAsync in progress. On the caller's thread: Run() plans the Lookup (a
// protocol::LookupMerge: this node's copies stand, the other keys go to their live
// owners), makes the batches and sends them. Then on gRPC threads, OnAnswer() for each
// batch adds its copies to the merge, and the last one builds the response and calls
// `done`. Shared by its batches' callbacks.
class PeerFanout::LookupCall : public std::enable_shared_from_this<LookupCall> {
 public:
  LookupCall(PeerFanout* fanout, bool compact, std::function<void(v1::LookupResponse)> done)
      : fanout_(fanout), compact_(compact), done_(std::move(done)) {}

  void Run(std::string_view ns, std::span<const std::string_view> keys, const LocalAnswer& local,
           uint64_t lease_ms) {
    Membership& membership = *fanout_->membership_;
    const std::vector<Peer> members = membership.peers();
    fanout_->SyncMembership(members);
    ring_ = membership.ring();
    self_id_ = membership.self_id();
    const protocol::LookupMerge::Local own{self_id_, local.tiers, local.lease_ids,
                                           local.lease_limit};
    std::vector<std::unique_ptr<Batch>> batches;
    v1::LookupResponse out;
    {
      common::MutexLock lock(&mu_);
      merge_.emplace(*ring_, fanout_->options_.replication_factor, ns, keys, &own);
      batches = MakeBatches(ns, keys, members, lease_ms);
      remaining_ = static_cast<int>(batches.size());
      if (batches.empty()) out = merge_->Result(compact_);
    }
    if (batches.empty()) {
      done_(std::move(out));
      return;
    }
    Send(std::move(batches));
  }

 private:
  // One peer call: about the keys of ring node `node`'s share from index `first` on.
  struct Batch {
    size_t node = 0;
    size_t first = 0;
    std::shared_ptr<PeerStubs> stubs;
    grpc::ClientContext ctx;
    grpc::ByteBuffer request;
    grpc::ByteBuffer response;
  };

  // Splits each live peer's share into batches of max_keys_per_call. A down peer gets no
  // batch (its keys stay misses) but perhaps a background probe.
  std::vector<std::unique_ptr<Batch>> MakeBatches(std::string_view ns,
                                                  std::span<const std::string_view> keys,
                                                  const std::vector<Peer>& members,
                                                  uint64_t lease_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    PeerHealth& health = fanout_->health_;
    const std::vector<std::string>& nodes = ring_->nodes();
    const size_t per_call = std::max<uint32_t>(1, fanout_->options_.max_keys_per_call);
    std::vector<std::unique_ptr<Batch>> batches;
    for (const Peer& peer : members) {
      auto it = std::lower_bound(nodes.begin(), nodes.end(), peer.id);
      if (it == nodes.end() || *it != peer.id) continue;
      const size_t node = it - nodes.begin();
      const std::span<const size_t> share = merge_->shares()[node].index;
      if (share.empty()) continue;
      if (!health.ShouldCall(peer.id)) {
        if (health.TakeProbe(peer.id)) fanout_->Probe(peer);
        continue;
      }
      const std::shared_ptr<PeerStubs> stubs = fanout_->StubsFor(peer.address);
      for (size_t start = 0; start < share.size(); start += per_call) {
        auto batch = std::make_unique<Batch>();
        batch->node = node;
        batch->first = start;
        batch->stubs = stubs;
        // Compact: an older peer answers with blocks instead.
        grpc::Slice body(protocol::EncodeLookupRequest(
            ns, keys, share.subspan(start, std::min(per_call, share.size() - start)),
            /*local_only=*/true, lease_ms, /*compact=*/true));
        batch->request = grpc::ByteBuffer(&body, 1);
        fanout_->PrepareContext(&batch->ctx);
        batches.push_back(std::move(batch));
      }
    }
    return batches;
  }

  void Send(std::vector<std::unique_ptr<Batch>> batches) {
    fanout_->CallsStarted(static_cast<int>(batches.size()));
    for (std::unique_ptr<Batch>& owned : batches) {
      Batch* batch = owned.release();  // owned by its completion callback
      batch->stubs->generic->UnaryCall(&batch->ctx, kLookupMethod, grpc::StubOptions(),
                                       &batch->request, &batch->response,
                                       [self = shared_from_this(), batch](grpc::Status status) {
                                         self->OnAnswer(std::unique_ptr<Batch>(batch), status);
                                       });
    }
  }

  void OnAnswer(std::unique_ptr<Batch> batch, const grpc::Status& status) {
    PeerFanout* const fanout = fanout_;
    const std::string& peer_id = ring_->nodes()[batch->node];
    if (!status.ok() && protocol::IsPeerUnreachable(status.error_code())) {
      fanout->health_.RecordFailure(peer_id);
    } else {
      fanout->health_.RecordSuccess(peer_id);  // an error answer: its keys are misses
    }
    // Parsed outside mu_: other batches' answers merge meanwhile.
    v1::LookupResponse answer;
    const bool parsed =
        status.ok() &&
        grpc::SerializationTraits<v1::LookupResponse>::Deserialize(&batch->response, &answer).ok();
    std::function<void(v1::LookupResponse)> done;
    v1::LookupResponse out;
    {
      common::MutexLock lock(&mu_);
      if (parsed) merge_->Add(batch->node, answer, batch->first);
      if (--remaining_ == 0) {
        out = merge_->Result(compact_);
        done = std::move(done_);
      }
    }
    // Destroy the batch (its ClientContext) before releasing the in-flight count, so
    // ~PeerFanout never runs while this call still references a channel.
    batch.reset();
    if (done) done(std::move(out));
    fanout->CallFinished();
  }

  PeerFanout* const fanout_;
  const bool compact_;                            // answer in the compact form
  std::function<void(v1::LookupResponse)> done_;  // moved out by the last answer
  // Set by Run() before any batch is sent, then read only.
  std::shared_ptr<const protocol::RendezvousRing> ring_;
  std::string self_id_;
  common::Mutex mu_;
  std::optional<protocol::LookupMerge> merge_ ABSL_GUARDED_BY(mu_);
  int remaining_ ABSL_GUARDED_BY(mu_) = 0;
};

void PeerFanout::LookupAsync(const std::string& ns, const std::vector<std::string>& keys,
                             const std::vector<v1::Tier>& local_tiers,
                             std::function<void(v1::LookupResponse)> done) {
  LocalAnswer local;
  local.tiers = local_tiers;
  const std::vector<std::string_view> views(keys.begin(), keys.end());
  LookupAsync(ns, views, local, 0, /*compact=*/false, std::move(done));
}

void PeerFanout::LookupAsync(std::string_view ns, std::span<const std::string_view> keys,
                             const LocalAnswer& local, uint64_t lease_ms, bool compact,
                             std::function<void(v1::LookupResponse)> done) {
  std::make_shared<LookupCall>(this, compact, std::move(done))->Run(ns, keys, local, lease_ms);
}

v1::LookupResponse PeerFanout::Lookup(const std::string& ns, const std::vector<std::string>& keys,
                                      const std::vector<v1::Tier>& local_tiers) {
  common::Mutex mu;
  bool finished = false;
  v1::LookupResponse result;
  LookupAsync(ns, keys, local_tiers, [&](v1::LookupResponse r) {
    common::MutexLock lock(&mu);
    result = std::move(r);
    finished = true;
  });
  common::MutexLock lock(&mu);
  mu.Await(common::Condition(&finished));
  return result;
}

// ---------------------------------------------------------------------------------------
// ClusterStatus

void PeerFanout::FillClusterStatus(v1::ClusterStatusResponse* response) const {
  response->set_node_id(membership_->self_id());
  response->set_replication_factor(std::max<uint32_t>(1, options_.replication_factor));
  const std::shared_ptr<const protocol::RendezvousRing> ring = membership_->ring();
  const std::vector<double> shares = ring->OwnershipShares(options_.replication_factor, 16384);
  std::map<std::string, double> share_of;
  for (size_t i = 0; i < ring->size(); ++i) share_of[ring->nodes()[i]] = shares[i];
  for (const Peer& p : membership_->peers()) {
    v1::PeerStatus* s = response->add_peers();
    s->set_node_id(p.id);
    s->set_address(p.address);
    s->set_healthy(p.self || health_.IsHealthy(p.id));
    s->set_ownership_share(share_of[p.id]);
    s->set_last_seen_ms_ago(p.self ? 0 : health_.LastSeenMsAgo(p.id));
  }
}

// One ClusterStatusAsync in progress: a Stats call per other member, each answer stored
// into its row of the response; the last one calls `done`.
class PeerFanout::StatusCall : public std::enable_shared_from_this<StatusCall> {
 public:
  StatusCall(PeerFanout* fanout, std::function<void(v1::ClusterStatusResponse)> done)
      : fanout_(fanout), done_(std::move(done)) {}

  void Run(v1::StatsResponse self_stats) {
    std::vector<std::unique_ptr<Stats>> calls;
    {
      common::MutexLock lock(&mu_);
      fanout_->FillClusterStatus(&response_);
      for (int i = 0; i < response_.peers_size(); ++i) {
        v1::PeerStatus* p = response_.mutable_peers(i);
        if (p->node_id() == response_.node_id()) {
          *p->mutable_stats() = self_stats;
          continue;
        }
        auto call = std::make_unique<Stats>();
        call->peer_id = p->node_id();
        call->row = i;
        call->stubs = fanout_->StubsFor(p->address());
        fanout_->PrepareContext(&call->ctx);
        calls.push_back(std::move(call));
      }
      remaining_ = static_cast<int>(calls.size());
    }
    if (calls.empty()) {
      v1::ClusterStatusResponse out;
      {
        common::MutexLock lock(&mu_);
        out = std::move(response_);
      }
      done_(std::move(out));
      return;
    }
    fanout_->CallsStarted(static_cast<int>(calls.size()));
    for (std::unique_ptr<Stats>& owned : calls) {
      Stats* call = owned.release();  // owned by its completion callback
      call->stubs->admin->async()->Stats(&call->ctx, &call->request, &call->response,
                                         [self = shared_from_this(), call](grpc::Status status) {
                                           self->OnAnswer(std::unique_ptr<Stats>(call), status);
                                         });
    }
  }

 private:
  struct Stats {
    std::string peer_id;
    int row = 0;  // index into response_.peers
    std::shared_ptr<PeerStubs> stubs;
    grpc::ClientContext ctx;
    v1::StatsRequest request;
    v1::StatsResponse response;
  };

  void OnAnswer(std::unique_ptr<Stats> call, const grpc::Status& status) {
    PeerFanout* const fanout = fanout_;
    PeerHealth& health = fanout->health_;
    if (status.ok() || !protocol::IsPeerUnreachable(status.error_code())) {
      health.RecordSuccess(call->peer_id);
    } else {
      health.RecordFailure(call->peer_id);
    }
    std::function<void(v1::ClusterStatusResponse)> done;
    v1::ClusterStatusResponse out;
    {
      common::MutexLock lock(&mu_);
      v1::PeerStatus* p = response_.mutable_peers(call->row);
      if (status.ok()) {
        *p->mutable_stats() = std::move(call->response);
        p->set_healthy(true);
        p->set_last_seen_ms_ago(0);
      } else {
        p->set_healthy(health.IsHealthy(call->peer_id));
      }
      if (--remaining_ == 0) {
        out = std::move(response_);
        done = std::move(done_);
      }
    }
    call.reset();  // before CallFinished, as in LookupCall::OnAnswer
    if (done) done(std::move(out));
    fanout->CallFinished();
  }

  PeerFanout* const fanout_;
  std::function<void(v1::ClusterStatusResponse)> done_;
  common::Mutex mu_;
  v1::ClusterStatusResponse response_ ABSL_GUARDED_BY(mu_);
  int remaining_ ABSL_GUARDED_BY(mu_) = 0;
};

void PeerFanout::ClusterStatusAsync(v1::StatsResponse self_stats,
                                    std::function<void(v1::ClusterStatusResponse)> done) {
  std::make_shared<StatusCall>(this, std::move(done))->Run(std::move(self_stats));
}

}  // namespace kvtier::service
