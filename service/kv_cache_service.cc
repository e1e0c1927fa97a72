#include "service/kv_cache_service.h"

#include <memory>
#include <string>
#include <utility>
#include "common/mutex.h"

namespace kvtier::service {

std::shared_ptr<const storage::NamespaceOptions> NamespaceCache::Find(
    const std::string& name) const {
  common::MutexLock lock(&mu_);
  auto it = map_.find(name);
  return it == map_.end() ? nullptr : it->second;
}

void NamespaceCache::Insert(const storage::NamespaceOptions& ns) {
  auto entry = std::make_shared<const storage::NamespaceOptions>(ns);
  common::MutexLock lock(&mu_);
  map_.insert_or_assign(ns.name, std::move(entry));  // a dropped name may come back
}

void NamespaceCache::Erase(const std::string& name) {
  common::MutexLock lock(&mu_);
  map_.erase(name);
}

bool ConnectionPuts::Acquire(const std::string& peer, uint32_t max) {
  common::MutexLock lock(&mu_);
  uint32_t& n = open_[peer];
  if (n >= max) {
    if (n == 0) open_.erase(peer);
    return false;
  }
  ++n;
  return true;
}

void ConnectionPuts::Release(const std::string& peer) {
  common::MutexLock lock(&mu_);
  auto it = open_.find(peer);
  if (it == open_.end()) return;
  if (--it->second == 0) open_.erase(it);
}

void FillShmOffer(const ServiceContext& ctx, v1::SharedMemoryOffer* offer) {
  if (ctx.shm == nullptr) return;
  offer->set_socket_path(ctx.shm->socket_path());
  offer->set_instance_id(ctx.shm->instance_id());
  offer->set_max_region_bytes(ctx.shm->max_region_bytes());
  offer->set_socket_lookup(true);
}

void RemoveOtherTenants(const Caller& caller, v1::StatsResponse* stats) {
  if (caller.is_operator) return;
  auto* namespaces = stats->mutable_namespaces();
  for (int i = namespaces->size() - 1; i >= 0; --i) {
    if (!caller.MayUse(namespaces->Get(i).tenant())) namespaces->DeleteSubrange(i, 1);
  }
  auto* tenants = stats->mutable_tenants();
  for (int i = tenants->size() - 1; i >= 0; --i) {
    if (!caller.MayUse(tenants->Get(i).tenant())) tenants->DeleteSubrange(i, 1);
  }
}

}  // namespace kvtier::service
