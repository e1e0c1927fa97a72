#include "service/cluster.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/logging.h"

namespace kvtier::service {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string StripDot(std::string s) {
  while (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

// Canonical numeric text of an address, or "" if `ip` is not numeric.
std::string NormalizeIp(const std::string& ip) {
  char buf[INET6_ADDRSTRLEN];
  in_addr v4;
  if (inet_pton(AF_INET, ip.c_str(), &v4) == 1) {
    return inet_ntop(AF_INET, &v4, buf, sizeof(buf)) != nullptr ? buf : "";
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, ip.c_str(), &v6) == 1) {
    return inet_ntop(AF_INET6, &v6, buf, sizeof(buf)) != nullptr ? buf : "";
  }
  return "";
}

std::string HostPortString(const std::string& host, uint32_t port) {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

class SystemResolver final : public Resolver {
 public:
  absl::StatusOr<std::vector<std::string>> Resolve(const std::string& host) override {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
    if (rc != 0) {
      const std::string msg = absl::StrCat("resolving ", host, ": ", gai_strerror(rc));
      if (rc == EAI_NONAME || rc == EAI_NODATA) return absl::NotFoundError(msg);
      return absl::UnavailableError(msg);
    }
    std::set<std::string> ips;
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
      char buf[INET6_ADDRSTRLEN];
      const void* src =
          a->ai_family == AF_INET
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
      if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
          inet_ntop(a->ai_family, src, buf, sizeof(buf)) != nullptr) {
        ips.insert(buf);
      }
    }
    freeaddrinfo(res);
    if (ips.empty()) return absl::NotFoundError(absl::StrCat(host, " has no address"));
    return std::vector<std::string>(ips.begin(), ips.end());
  }

  absl::StatusOr<std::string> ReverseLookup(const std::string& ip) override {
    sockaddr_storage ss{};
    socklen_t len = 0;
    auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
    if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
      v4->sin_family = AF_INET;
      len = sizeof(sockaddr_in);
    } else if (inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
      v6->sin6_family = AF_INET6;
      len = sizeof(sockaddr_in6);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("not a numeric address: ", ip));
    }
    char host[NI_MAXHOST];
    const int rc = getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host), nullptr,
                               0, NI_NAMEREQD);
    if (rc != 0) return absl::NotFoundError(absl::StrCat("no name for ", ip));
    return Lower(StripDot(host));
  }

  bool IsLocalAddress(const std::string& ip) override {
    const std::string want = NormalizeIp(ip);
    if (want.empty()) return false;
    ifaddrs* ifs = nullptr;
    if (getifaddrs(&ifs) != 0) return false;
    bool found = false;
    for (ifaddrs* i = ifs; i != nullptr && !found; i = i->ifa_next) {
      if (i->ifa_addr == nullptr) continue;
      char buf[INET6_ADDRSTRLEN];
      const int family = i->ifa_addr->sa_family;
      const void* src = nullptr;
      if (family == AF_INET) {
        src = &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr;
      } else if (family == AF_INET6) {
        src = &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr;
      } else {
        continue;
      }
      found = inet_ntop(family, src, buf, sizeof(buf)) != nullptr && want == buf;
    }
    freeifaddrs(ifs);
    return found;
  }
};

bool IsPeerDown(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::UNKNOWN:
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return true;
    default:
      return false;  // the peer answered (e.g. NOT_FOUND for an unknown namespace)
  }
}

// Tier preference when two owners answer: hot beats cold beats none.
int TierRank(v1::Tier t) { return t == v1::TIER_HOT ? 2 : t == v1::TIER_COLD ? 1 : 0; }

}  // namespace

std::unique_ptr<Resolver> NewSystemResolver() { return std::make_unique<SystemResolver>(); }

std::string DefaultNodeId(uint32_t port) {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) return HostPortString("localhost", port);
  std::string name = host;
  addrinfo hints{};
  hints.ai_flags = AI_CANONNAME;
  hints.ai_family = AF_UNSPEC;
  addrinfo* res = nullptr;
  if (getaddrinfo(host, nullptr, &hints, &res) == 0) {
    if (res != nullptr && res->ai_canonname != nullptr && res->ai_canonname[0] != '\0') {
      name = res->ai_canonname;
    }
    freeaddrinfo(res);
  }
  return HostPortString(Lower(StripDot(name)), port);
}

absl::Status SplitHostPort(const std::string& address, const std::string& field, std::string* host,
                           uint32_t* port) {
  auto bad = [&](const char* why) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " \"", address, "\" is not host:port (", why, ")"));
  };
  size_t colon;
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return bad("unterminated [ipv6]");
    }
    *host = address.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = address.rfind(':');
    if (colon == std::string::npos) return bad("missing :port");
    *host = address.substr(0, colon);
    if (host->find(':') != std::string::npos) return bad("ipv6 needs [brackets]");
  }
  if (host->empty()) return bad("empty host");
  uint32_t p = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &p) || p == 0 || p > 65535) {
    return bad("port must be 1..65535");
  }
  *port = p;
  return absl::OkStatus();
}

absl::Status ValidateClusterConfig(const v1::ClusterConfig& config) {
  if (!config.static_peers().empty() && !config.peer_dns().empty()) {
    return absl::InvalidArgumentError(
        "cluster.static_peers and cluster.peer_dns are mutually exclusive");
  }
  std::set<std::string> seen;
  for (int i = 0; i < config.static_peers_size(); ++i) {
    const std::string field = absl::StrCat("cluster.static_peers[", i, "]");
    std::string host;
    uint32_t port = 0;
    absl::Status s = SplitHostPort(config.static_peers(i), field, &host, &port);
    if (!s.ok()) return s;
    if (!seen.insert(config.static_peers(i)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " \"", config.static_peers(i), "\" is listed twice"));
    }
  }
  if (config.peer_port() > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster.peer_port ", config.peer_port(), " is out of range"));
  }
  if (config.peer_dns().find_first_of(" :/") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("cluster.peer_dns \"", config.peer_dns(),
                                                   "\" must be a DNS name without port"));
  }
  if (!config.static_peers().empty() &&
      config.replication_factor() > static_cast<uint32_t>(config.static_peers_size())) {
    return absl::InvalidArgumentError(absl::StrCat("cluster.replication_factor ",
                                                   config.replication_factor(), " exceeds the ",
                                                   config.static_peers_size(), " static peers"));
  }
  return absl::OkStatus();
}

MembershipOptions MembershipOptionsFromConfig(const v1::ClusterConfig& config, std::string self_id,
                                              uint32_t port) {
  MembershipOptions o;
  o.self_id = std::move(self_id);
  o.self_port = port;
  o.static_peers.assign(config.static_peers().begin(), config.static_peers().end());
  o.peer_dns = config.peer_dns();
  o.peer_port = config.peer_port();
  o.dns_refresh_ms = config.dns_refresh_ms() != 0 ? config.dns_refresh_ms() : 5000;
  return o;
}

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
// Membership

Membership::Membership(MembershipOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<Membership>> Membership::Create(MembershipOptions options) {
  if (options.self_id.empty()) return absl::InvalidArgumentError("cluster.node_id is empty");
  if (!options.static_peers.empty() && !options.peer_dns.empty()) {
    return absl::InvalidArgumentError(
        "cluster.static_peers and cluster.peer_dns are mutually exclusive");
  }
  if (options.peer_port == 0) options.peer_port = options.self_port;
  if (!options.peer_dns.empty() && options.peer_port == 0) {
    return absl::InvalidArgumentError("cluster.peer_port is 0 and the node port is unknown");
  }
  if (options.dns_refresh_ms <= 0) options.dns_refresh_ms = 5000;
  std::unique_ptr<Membership> m(new Membership(std::move(options)));
  if (m->options_.resolver == nullptr) {
    m->owned_resolver_ = NewSystemResolver();
    m->resolver_ = m->owned_resolver_.get();
  } else {
    m->resolver_ = m->options_.resolver;
  }
  const MembershipOptions& o = m->options_;
  std::vector<Peer> peers;
  if (!o.static_peers.empty()) {
    // The entry naming this node is either our id or one of our addresses with our
    // port; its text is our ring id from then on, since that is what the other nodes
    // (configured with the same list) call us.
    std::string self_entry;
    for (size_t i = 0; i < o.static_peers.size(); ++i) {
      const std::string& entry = o.static_peers[i];
      std::string host;
      uint32_t port = 0;
      absl::Status s =
          SplitHostPort(entry, absl::StrCat("cluster.static_peers[", i, "]"), &host, &port);
      if (!s.ok()) return s;
      const bool self =
          entry == o.self_id || (port == o.self_port && m->resolver_->IsLocalAddress(host));
      if (self && self_entry.empty()) self_entry = entry;
      peers.push_back(Peer{entry, entry, false});
    }
    if (!self_entry.empty()) m->options_.self_id = self_entry;
  }
  if (!o.peer_dns.empty()) {
    absl::Status s = m->Refresh();
    if (!s.ok()) {
      KVTIER_LOG(WARNING) << "cluster.peer_dns " << o.peer_dns << ": " << s.ToString()
                          << " (starting as a single node; retrying every " << o.dns_refresh_ms
                          << " ms)";
      m->Install({});
    }
  } else {
    m->Install(std::move(peers));
  }
  return m;
}

Membership::~Membership() {
  stop_.Notify();
  if (refresher_.joinable()) refresher_.join();
}

void Membership::Start() {
  if (options_.peer_dns.empty() || refresher_.joinable()) return;
  refresher_ = std::thread([this] { RefreshLoop(); });
}

void Membership::RefreshLoop() {
  while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(options_.dns_refresh_ms))) {
    absl::Status s = Refresh();
    if (!s.ok()) {
      KVTIER_LOG(WARNING) << "cluster.peer_dns refresh: " << s.ToString()
                          << " (keeping the previous peer list)";
    }
  }
}

absl::Status Membership::Refresh() {
  if (options_.peer_dns.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<std::string>> ips = resolver_->Resolve(options_.peer_dns);
  if (!ips.ok()) return ips.status();
  std::vector<Peer> peers;
  for (const std::string& ip : *ips) {
    const std::string address = HostPortString(ip, options_.peer_port);
    if (options_.peer_port == options_.self_port && resolver_->IsLocalAddress(ip)) {
      peers.push_back(Peer{options_.self_id, address, true});
      continue;
    }
    absl::StatusOr<std::string> name = resolver_->ReverseLookup(ip);
    peers.push_back(
        Peer{name.ok() ? HostPortString(*name, options_.peer_port) : address, address, false});
  }
  Install(std::move(peers));
  return absl::OkStatus();
}

void Membership::Install(std::vector<Peer> peers) {
  bool have_self = false;
  for (Peer& p : peers) {
    if (p.id == options_.self_id) p.self = true;
    have_self |= p.self;
  }
  if (!have_self) peers.push_back(Peer{options_.self_id, options_.self_id, true});
  std::sort(peers.begin(), peers.end(), [](const Peer& a, const Peer& b) {
    return a.id != b.id ? a.id < b.id : a.self > b.self;  // self first among equal ids
  });
  peers.erase(std::unique(peers.begin(), peers.end(),
                          [](const Peer& a, const Peer& b) { return a.id == b.id; }),
              peers.end());
  absl::MutexLock lock(&mu_);
  if (ring_ != nullptr && peers == peers_) return;
  std::vector<std::string> ids;
  for (const Peer& p : peers) ids.push_back(p.id);
  ring_ = std::make_shared<const protocol::RendezvousRing>(std::move(ids));
  peers_ = std::move(peers);
  ++version_;
}

std::vector<Peer> Membership::peers() const {
  absl::MutexLock lock(&mu_);
  return peers_;
}

std::shared_ptr<const protocol::RendezvousRing> Membership::ring() const {
  absl::MutexLock lock(&mu_);
  return ring_;
}

uint64_t Membership::version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

// ---------------------------------------------------------------------------------------
// PeerHealth

PeerHealth::PeerHealth(common::Clock* clock, int failures_to_unhealthy, int64_t retry_ms)
    : clock_(clock),
      failures_to_unhealthy_(std::max(1, failures_to_unhealthy)),
      retry_ms_(retry_ms) {}

void PeerHealth::RecordSuccess(const std::string& id) {
  absl::MutexLock lock(&mu_);
  State& s = peers_[id];
  s.consecutive_failures = 0;
  s.last_success_ms = clock_->NowMillis();
}

void PeerHealth::RecordFailure(const std::string& id) {
  absl::MutexLock lock(&mu_);
  State& s = peers_[id];
  ++s.consecutive_failures;
  if (s.consecutive_failures >= failures_to_unhealthy_) {
    s.next_probe_ms = clock_->NowMillis() + retry_ms_;
  }
}

bool PeerHealth::IsHealthy(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(id);
  return it == peers_.end() || it->second.consecutive_failures < failures_to_unhealthy_;
}

bool PeerHealth::ShouldCall(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(id);
  if (it == peers_.end() || it->second.consecutive_failures < failures_to_unhealthy_) {
    return true;
  }
  const int64_t now = clock_->NowMillis();
  if (now < it->second.next_probe_ms) return false;
  it->second.next_probe_ms = now + retry_ms_;  // this caller is the probe
  return true;
}

int64_t PeerHealth::LastSeenMsAgo(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(id);
  if (it == peers_.end() || it->second.last_success_ms < 0) return -1;
  return clock_->NowMillis() - it->second.last_success_ms;
}

void PeerHealth::Retain(const std::vector<Peer>& members) {
  std::set<std::string> ids;
  for (const Peer& p : members) ids.insert(p.id);
  absl::MutexLock lock(&mu_);
  for (auto it = peers_.begin(); it != peers_.end();) {
    it = ids.count(it->first) != 0 ? std::next(it) : peers_.erase(it);
  }
}

// ---------------------------------------------------------------------------------------
// PeerFanout

PeerFanout::PeerFanout(Membership* membership, FanoutOptions options, common::Clock* clock)
    : membership_(membership),
      options_(std::move(options)),
      clock_(clock),
      health_(clock, options_.failures_to_unhealthy, options_.unhealthy_retry_ms) {}

PeerFanout::~PeerFanout() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* n) { return *n == 0; }, &in_flight_));
}

PeerFanout::Channel* PeerFanout::ChannelFor(const std::string& address) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Channel>& c = channels_[address];
  if (c == nullptr) {
    c = std::make_unique<Channel>();
    grpc::ChannelArguments args;
    // Fail fast and reconnect quickly: a restarted peer should be usable again within
    // about a second, and a dead one must not stall calls behind connection attempts.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    // Our own subchannels: a peer restarted on the same address must not inherit the
    // backoff state of a subchannel another channel left in TRANSIENT_FAILURE.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto creds =
        options_.credentials != nullptr ? options_.credentials : grpc::InsecureChannelCredentials();
    c->channel = grpc::CreateCustomChannel(address, creds, args);
    c->stub = v1::KvCache::NewStub(c->channel);
    c->admin = v1::KvCacheAdmin::NewStub(c->channel);
  }
  return c.get();
}

v1::KvCache::Stub* PeerFanout::StubFor(const std::string& address) {
  return ChannelFor(address)->stub.get();
}

v1::KvCacheAdmin::Stub* PeerFanout::AdminStubFor(const std::string& address) {
  return ChannelFor(address)->admin.get();
}

void PeerFanout::SyncMembership(const std::vector<Peer>& peers) {
  const uint64_t version = membership_->version();
  {
    absl::MutexLock lock(&mu_);
    if (version == membership_version_) return;
    membership_version_ = version;
    // Channels are shared with calls in flight (stubs are raw pointers into them), so
    // only drop channels when nothing is in flight; otherwise try again next change.
    if (in_flight_ == 0) {
      std::set<std::string> addresses;
      for (const Peer& p : peers) addresses.insert(p.address);
      for (auto it = channels_.begin(); it != channels_.end();) {
        it = addresses.count(it->first) != 0 ? std::next(it) : channels_.erase(it);
      }
    }
  }
  health_.Retain(peers);
}

void PeerFanout::CallStarted() {
  absl::MutexLock lock(&mu_);
  ++in_flight_;
}

void PeerFanout::CallFinished() {
  absl::MutexLock lock(&mu_);
  --in_flight_;
}

namespace {

// State of one cluster-wide lookup, shared by its peer calls.
struct FanoutState {
  absl::Mutex mu;
  std::vector<v1::Tier> tier ABSL_GUARDED_BY(mu);
  std::vector<std::string> owner ABSL_GUARDED_BY(mu);
  std::vector<size_t> owner_rank ABSL_GUARDED_BY(mu);  // ring rank of `owner`
  int remaining ABSL_GUARDED_BY(mu) = 0;
  std::function<void(v1::LookupResponse)> done;
  std::vector<std::string> primary;  // primary owner per key (reported on a miss)
  std::string self_id;
};

// One batched peer call: keys[j] of the peer's batch is key index[j] at ring rank[j].
struct PeerCall {
  grpc::ClientContext ctx;
  v1::LookupRequest request;
  v1::LookupResponse response;
  std::string peer_id;
  std::vector<size_t> index;
  std::vector<size_t> rank;
};

v1::LookupResponse Finish(FanoutState& st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(st.mu) {
  v1::LookupResponse out;
  uint32_t prefix = 0;
  bool contiguous = true;
  for (size_t i = 0; i < st.tier.size(); ++i) {
    v1::BlockLocation* loc = out.add_blocks();
    loc->set_tier(st.tier[i]);
    const bool found = st.tier[i] != v1::TIER_NONE;
    loc->set_owner(found ? st.owner[i] : st.primary[i]);
    if (found && contiguous) {
      ++prefix;
    } else {
      contiguous = false;
    }
  }
  out.set_prefix_blocks(prefix);
  return out;
}

}  // namespace

void PeerFanout::LookupAsync(const std::string& ns, const std::vector<std::string>& keys,
                             const std::vector<v1::Tier>& local_tiers,
                             std::function<void(v1::LookupResponse)> done) {
  auto st = std::make_shared<FanoutState>();
  st->done = std::move(done);
  st->self_id = membership_->self_id();
  const std::shared_ptr<const protocol::RendezvousRing> ring = membership_->ring();
  const std::vector<Peer> members = membership_->peers();
  SyncMembership(members);
  std::map<std::string, std::string> address_of;
  for (const Peer& p : members) address_of[p.id] = p.address;

  // Batches per peer id.
  std::map<std::string, std::vector<std::pair<size_t, size_t>>> batches;  // (key, rank)
  {
    absl::MutexLock lock(&st->mu);
    st->tier.assign(keys.size(), v1::TIER_NONE);
    st->owner.assign(keys.size(), "");
    st->owner_rank.assign(keys.size(), SIZE_MAX);
    st->primary.assign(keys.size(), "");
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::vector<size_t> owners = ring->Owners(ns, keys[i], options_.replication_factor);
      if (!owners.empty()) st->primary[i] = ring->nodes()[owners[0]];
      const v1::Tier local = i < local_tiers.size() ? local_tiers[i] : v1::TIER_NONE;
      if (local != v1::TIER_NONE) {
        st->tier[i] = local;
        st->owner[i] = st->self_id;
        st->owner_rank[i] = 0;
        continue;
      }
      for (size_t r = 0; r < owners.size(); ++r) {
        const std::string& id = ring->nodes()[owners[r]];
        if (id != st->self_id) batches[id].emplace_back(i, r);
      }
    }
  }

  std::vector<std::unique_ptr<PeerCall>> calls;
  for (auto& [id, entries] : batches) {
    auto addr = address_of.find(id);
    if (addr == address_of.end() || !health_.ShouldCall(id)) continue;  // counted as misses
    const size_t per_call = std::max<uint32_t>(1, options_.max_keys_per_call);
    for (size_t start = 0; start < entries.size(); start += per_call) {
      auto call = std::make_unique<PeerCall>();
      call->peer_id = id;
      call->request.set_namespace_(ns);
      call->request.set_local_only(true);
      for (size_t j = start; j < std::min(entries.size(), start + per_call); ++j) {
        call->request.add_keys(keys[entries[j].first]);
        call->index.push_back(entries[j].first);
        call->rank.push_back(entries[j].second);
      }
      call->ctx.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::milliseconds(options_.peer_deadline_ms));
      if (options_.prepare_context) options_.prepare_context(&call->ctx);
      calls.push_back(std::move(call));
    }
  }

  if (calls.empty()) {
    v1::LookupResponse out;
    {
      absl::MutexLock lock(&st->mu);
      out = Finish(*st);
    }
    st->done(std::move(out));
    return;
  }
  {
    absl::MutexLock lock(&st->mu);
    st->remaining = static_cast<int>(calls.size());
  }
  // Count the calls in flight before taking stubs, so SyncMembership cannot drop a
  // channel between StubFor() and the call.
  for (size_t k = 0; k < calls.size(); ++k) CallStarted();
  std::vector<v1::KvCache::Stub*> stubs;
  for (auto& c : calls) stubs.push_back(StubFor(address_of[c->peer_id]));
  for (size_t k = 0; k < calls.size(); ++k) {
    PeerCall* call = calls[k].release();  // owned by its completion callback
    v1::KvCache::Stub* stub = stubs[k];
    stub->async()->Lookup(
        &call->ctx, &call->request, &call->response, [this, st, call](grpc::Status status) {
          std::unique_ptr<PeerCall> owned(call);
          if (status.ok()) {
            health_.RecordSuccess(call->peer_id);
          } else if (IsPeerDown(status.error_code())) {
            health_.RecordFailure(call->peer_id);
          } else {
            health_.RecordSuccess(call->peer_id);  // it answered; its keys are misses
          }
          std::function<void(v1::LookupResponse)> done;
          v1::LookupResponse out;
          {
            absl::MutexLock lock(&st->mu);
            if (status.ok()) {
              const auto& blocks = call->response.blocks();
              for (size_t j = 0; j < call->index.size() && j < static_cast<size_t>(blocks.size());
                   ++j) {
                const v1::Tier t = blocks[static_cast<int>(j)].tier();
                if (t == v1::TIER_NONE) continue;
                const size_t i = call->index[j];
                // Lowest ring rank wins (the primary's copy), then the faster tier.
                if (st->tier[i] == v1::TIER_NONE || call->rank[j] < st->owner_rank[i] ||
                    (call->rank[j] == st->owner_rank[i] && TierRank(t) > TierRank(st->tier[i]))) {
                  st->tier[i] = t;
                  st->owner[i] = call->peer_id;
                  st->owner_rank[i] = call->rank[j];
                }
              }
            }
            if (--st->remaining == 0) {
              out = Finish(*st);
              done = std::move(st->done);
            }
          }
          // Destroy the call (its ClientContext) before releasing the in-flight count, so
          // ~PeerFanout never runs while this call still references a channel.
          owned.reset();
          if (done) done(std::move(out));
          CallFinished();
        });
  }
}

v1::LookupResponse PeerFanout::Lookup(const std::string& ns, const std::vector<std::string>& keys,
                                      const std::vector<v1::Tier>& local_tiers) {
  absl::Mutex mu;
  bool finished = false;
  v1::LookupResponse result;
  LookupAsync(ns, keys, local_tiers, [&](v1::LookupResponse r) {
    absl::MutexLock lock(&mu);
    result = std::move(r);
    finished = true;
  });
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(&finished));
  return result;
}

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

namespace {

struct StatusState {
  absl::Mutex mu;
  v1::ClusterStatusResponse response ABSL_GUARDED_BY(mu);
  int remaining ABSL_GUARDED_BY(mu) = 0;
  std::function<void(v1::ClusterStatusResponse)> done;
};

struct StatsCall {
  grpc::ClientContext ctx;
  v1::StatsRequest request;
  v1::StatsResponse response;
  std::string peer_id;
  int index = 0;  // into response.peers
};

}  // namespace

void PeerFanout::ClusterStatusAsync(v1::StatsResponse self_stats,
                                    std::function<void(v1::ClusterStatusResponse)> done) {
  auto st = std::make_shared<StatusState>();
  st->done = std::move(done);
  std::vector<std::unique_ptr<StatsCall>> calls;
  {
    absl::MutexLock lock(&st->mu);
    FillClusterStatus(&st->response);
    for (int i = 0; i < st->response.peers_size(); ++i) {
      v1::PeerStatus* p = st->response.mutable_peers(i);
      if (p->node_id() == membership_->self_id()) {
        *p->mutable_stats() = self_stats;
        continue;
      }
      auto call = std::make_unique<StatsCall>();
      call->peer_id = p->node_id();
      call->index = i;
      call->ctx.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::milliseconds(options_.peer_deadline_ms));
      if (options_.prepare_context) options_.prepare_context(&call->ctx);
      calls.push_back(std::move(call));
    }
    st->remaining = static_cast<int>(calls.size());
  }
  if (calls.empty()) {
    v1::ClusterStatusResponse out;
    {
      absl::MutexLock lock(&st->mu);
      out = std::move(st->response);
    }
    st->done(std::move(out));
    return;
  }
  for (size_t k = 0; k < calls.size(); ++k) CallStarted();  // before taking stubs
  std::vector<v1::KvCacheAdmin::Stub*> stubs;
  {
    absl::MutexLock lock(&st->mu);
    for (auto& c : calls) stubs.push_back(AdminStubFor(st->response.peers(c->index).address()));
  }
  for (size_t k = 0; k < calls.size(); ++k) {
    StatsCall* call = calls[k].release();  // owned by its completion callback
    stubs[k]->async()->Stats(&call->ctx, &call->request, &call->response,
                             [this, st, call](grpc::Status status) {
                               std::unique_ptr<StatsCall> owned(call);
                               if (status.ok() || !IsPeerDown(status.error_code())) {
                                 health_.RecordSuccess(call->peer_id);
                               } else {
                                 health_.RecordFailure(call->peer_id);
                               }
                               std::function<void(v1::ClusterStatusResponse)> done;
                               v1::ClusterStatusResponse out;
                               {
                                 absl::MutexLock lock(&st->mu);
                                 v1::PeerStatus* p = st->response.mutable_peers(call->index);
                                 if (status.ok()) {
                                   *p->mutable_stats() = std::move(call->response);
                                   p->set_healthy(true);
                                   p->set_last_seen_ms_ago(0);
                                 } else {
                                   p->set_healthy(health_.IsHealthy(call->peer_id));
                                 }
                                 if (--st->remaining == 0) {
                                   out = std::move(st->response);
                                   done = std::move(st->done);
                                 }
                               }
                               // Destroy the call (its ClientContext) before releasing the
                               // in-flight count, so ~PeerFanout never runs while this call still
                               // references a channel.
                               owned.reset();
                               if (done) done(std::move(out));
                               CallFinished();
                             });
  }
}

}  // namespace kvtier::service
