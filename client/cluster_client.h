// kvtier::client::ClusterClient: a client of a whole kvtierd cluster that sends puts and
// gets straight to the nodes that own the blocks (rendezvous placement, protocol/rendezvous.h),
// in parallel per owner.
//
//   ClusterClientOptions options;
//   options.node.server = "10.0.0.5:50051";     // any member (the seed)
//   options.node.namespace_spec = spec;         // registered on every member
//   ASSIGN_OR_RETURN(auto cluster, ClusterClient::Connect(options));
//   ASSIGN_OR_RETURN(auto put, cluster->PutBlocks("llama3", blocks));
//   ASSIGN_OR_RETURN(auto got, cluster->GetBlocks("llama3", keys));
//
// Membership: Connect (and Refresh) ask a member for ClusterStatus; every listed peer
// becomes a ring member under its node_id (the ring identity every node and client must
// share) and is dialed at its address (node_id when the address is empty). The
// replication factor R is the cluster's (ClusterStatus.replication_factor, 0 read as 1).
// One Client (client/client.h) is kept per member, built from options.node with `server`
// replaced; members that cannot be reached stay in the ring (they still own their keys)
// without a connection until a later Refresh reaches them. Puts, gets and Lookups all
// place keys on this view: after the cluster's membership changes, Refresh.
//
// Routing:
//   PutBlocks  each block goes to every one of its top-R owners; one Client::PutBlocks per
//              owner, all owners at once (one thread each). An unreachable owner is
//              skipped as long as every block reaches at least one of its owners.
//   GetBlocks  each key is asked of its primary owner first, one call per owner in
//              parallel; keys that miss, or whose owner is unreachable, are asked of their
//              next owner, up to R owners, all within the call's one deadline. Owners that
//              failed recently (UNAVAILABLE / DEADLINE_EXCEEDED, the liveness rule of
//              protocol/peer_liveness.h, in the last `down_retry_ms`) are tried last.
//   Lookup     one hop: each key is asked of its top-R owners, one local-only Lookup per
//              owner with its share of the keys, all owners at once; the answers merge as
//              kvtierd's own fan-out merges them (protocol/lookup_merge.h). An owner whose
//              call found it unreachable is down: Lookups skip it (its keys are misses;
//              no connect attempt, no deadline wait), and a background thread probes it
//              (ListNamespaces, at most one probe per `down_retry_ms`) until it answers
//              and is up again. When no owner answers, or one refuses the request, the
//              whole request goes to one member instead, which answers for the cluster
//              (server-side fan-out), within what is left of the call's deadline: its
//              answer or error stands.
//
// Errors name the node ("node 127.0.0.1:4000: ..."), keeping the node's status code.
//
// Thread-safe: one ClusterClient may be used from many threads at once, and Refresh may
// run concurrently with calls (calls in flight keep using the membership they started with).
#ifndef KVTIER_CLIENT_CLUSTER_CLIENT_H_
#define KVTIER_CLIENT_CLUSTER_CLIENT_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/client.h"
#include "protocol/rendezvous.h"
#include "kvtier/v1/kvtier.pb.h"

namespace kvtier::client {

struct ClusterClientOptions {
  // Template of the per-member clients. `node.server` is the seed member asked for
  // ClusterStatus at Connect; `node.namespace_spec`, when set, is registered on (or
  // checked against) every member; deadlines, channels, retries, the auth token and the
  // TLS options (tls_*) apply per member. Under TLS each member's certificate must name
  // its node id's host when that is a DNS name (a peer_dns cluster), else its address,
  // unless tls_server_name is set.
  ClientOptions node;
  // Deadline of one owner's share of a GetBlocks before its keys move on to the next
  // replica (capped by what is left of the call's deadline). 0 = the call's deadline.
  // Set it below the call deadline so a hung (not refusing) owner leaves time for the
  // replicas. Default: 0.
  int64_t per_owner_get_deadline_ms = 0;
  // A member whose call failed with UNAVAILABLE / DEADLINE_EXCEEDED is tried after the
  // other owners of a key for this long, and is skipped by Lookups until it answers a
  // probe (sent at most once per this interval, with this as its deadline). 0 = never
  // skip. Default: 1000 ms.
  int64_t down_retry_ms = 1000;
};

// One member as the client sees it.
struct ClusterMember {
  std::string node_id;   // ring identity
  std::string address;   // dialed host:port
  bool connected = false;             // a Client to it exists
  bool healthy_at_refresh = false;    // ClusterStatus' healthy flag at the last refresh
  bool down = false;  // unreachable at its last call, not answered since (Lookups skip it)
};

class ClusterClient {
 public:
  // Connects to the seed (options.node.server), reads ClusterStatus and connects to every
  // member in parallel. Errors: INVALID_ARGUMENT bad options; the seed's error
  // (UNAVAILABLE / DEADLINE_EXCEEDED when it cannot be reached, FAILED_PRECONDITION on a
  // hash-scheme or namespace-layout mismatch); FAILED_PRECONDITION naming the node when a
  // reachable member rejects the namespace spec or hash scheme; FAILED_PRECONDITION when
  // ClusterStatus lists no peers. Unreachable non-seed members are not an error (see
  // the file comment).
  static absl::StatusOr<std::unique_ptr<ClusterClient>> Connect(
      const ClusterClientOptions& options);

  // Waits for a probe of a down member still in flight (at most about down_retry_ms).
  ~ClusterClient();
  ClusterClient(const ClusterClient&) = delete;
  ClusterClient& operator=(const ClusterClient&) = delete;

  const ClusterClientOptions& options() const;

  // Re-reads ClusterStatus (from the first member that answers, seed first) and installs
  // the new member list and replication factor: existing connections are kept, new and
  // previously unreachable members are (re)connected. On error the previous membership
  // is kept. Errors: UNAVAILABLE when no member answers; like Connect otherwise.
  absl::Status Refresh();

  // The current members (sorted by node id), ring and replication factor.
  std::vector<ClusterMember> members() const;
  std::shared_ptr<const protocol::RendezvousRing> ring() const;
  uint32_t replication_factor() const;

  // Stores each block on all of its min(R, members) owners, one Client::PutBlocks per
  // owner, in parallel. The payloads must stay valid until the call returns.
  // Returns the sums over owners: a block stored on R nodes counts R times in
  // blocks_stored; copies meant for unreachable owners (UNAVAILABLE / DEADLINE_EXCEEDED,
  // or no connection) count in replicas_skipped, and the call still succeeds when every
  // block reached at least one owner. Errors, naming the node: an owner's error of any
  // other kind (e.g. INVALID_ARGUMENT), first in member order; UNAVAILABLE when all
  // owners of some block were unreachable. Other owners' puts still complete and are
  // stored. Not retried.
  absl::StatusOr<PutResult> PutBlocks(std::string_view ns, std::span<const PutBlock> blocks,
                                      const PutOptions& options = {});

  // Fetches `keys` from their owners (primary first, then the next replicas for misses
  // and unreachable owners). Returns one FetchedBlock per key in input order; a key no
  // reachable owner holds is found=false. The whole call, fallbacks included, ends by
  // its deadline (options.deadline_ms, else options().node.default_deadline_ms); keys
  // still unanswered then are misses. Errors: an owner's error other than UNAVAILABLE /
  // DEADLINE_EXCEEDED (e.g. NOT_FOUND unknown namespace), naming the node;
  // UNAVAILABLE / DEADLINE_EXCEEDED when no owner asked answered at all.
  absl::StatusOr<std::vector<FetchedBlock>> GetBlocks(std::string_view ns,
                                                      std::span<const std::string> keys,
                                                      const GetOptions& options = {});

  // Like GetBlocks but into caller buffers, as Client::GetBlocksInto: block i (when found)
  // is written to the start of buffers[i]. INVALID_ARGUMENT if the sizes differ;
  // OUT_OF_RANGE (naming node and key) if a found block does not fit. A buffer may have
  // been partly written by an owner that then failed; the returned info is authoritative.
  absl::StatusOr<std::vector<kvtier::v1::GetBlockInfo>> GetBlocksInto(
      std::string_view ns, std::span<const std::string> keys,
      std::span<const std::span<uint8_t>> buffers, const GetOptions& options = {});

  // How much of the prefix chain `keys` is resident in the cluster, and where (routing
  // above): the answer a kvtierd's Lookup gives, asked of the owners directly. Errors
  // come from one member answering for the whole request: the first that answers (up
  // members in ring order, then those down), naming it; UNAVAILABLE when no member is
  // connected.
  absl::StatusOr<kvtier::v1::LookupResponse> Lookup(std::string_view ns,
                                                    std::span<const std::string> keys,
                                                    const CallOptions& call = {});
  // As above with options. With options.lease_ms each owner leases its part of the
  // reported prefix (blocks[i].owner, blocks[i].lease_id); end them with ReleaseLeases.
  absl::StatusOr<kvtier::v1::LookupResponse> Lookup(std::string_view ns,
                                                    std::span<const std::string> keys,
                                                    const LookupOptions& options,
                                                    const CallOptions& call = {});
  // Ends every lease `lookup` (either form) holds: one ReleaseLease per (owner, lease_id),
  // sent to that owner. Returns the blocks they held. An owner that is not a member or does
  // not answer is skipped (its lease expires); the other owners' leases are still
  // released. INVALID_ARGUMENT when `lookup` is malformed.
  absl::StatusOr<uint64_t> ReleaseLeases(std::string_view ns,
                                         const kvtier::v1::LookupResponse& lookup,
                                         const CallOptions& call = {});

  // ClusterStatus of one reachable member (first that answers, seed first).
  absl::StatusOr<kvtier::v1::ClusterStatusResponse> ClusterStatus(const CallOptions& call = {});

 private:
  struct Impl;
  explicit ClusterClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::client

#endif  // KVTIER_CLIENT_CLUSTER_CLIENT_H_
