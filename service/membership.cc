#include "service/membership.h"

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
#include "common/mutex.h"

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
  common::MutexLock lock(&mu_);
  if (ring_ != nullptr && peers == peers_) return;
  std::vector<std::string> ids;
  for (const Peer& p : peers) ids.push_back(p.id);
  ring_ = std::make_shared<const protocol::RendezvousRing>(std::move(ids));
  peers_ = std::move(peers);
  ++version_;
}

std::vector<Peer> Membership::peers() const {
  common::MutexLock lock(&mu_);
  return peers_;
}

std::shared_ptr<const protocol::RendezvousRing> Membership::ring() const {
  common::MutexLock lock(&mu_);
  return ring_;
}

uint64_t Membership::version() const {
  common::MutexLock lock(&mu_);
  return version_;
}

}  // namespace kvtier::service
