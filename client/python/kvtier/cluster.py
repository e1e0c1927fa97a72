"""kvtier.ClusterClient: a client of a whole kvtierd cluster that sends puts and gets
straight to the nodes owning the blocks, with the C++ ClusterClient's routing
(client/cluster_client.h) and the same rendezvous placement (kvtier.rendezvous).

Membership: the constructor (and refresh()) asks a member for ClusterStatus; every listed
peer becomes a ring member under its node_id and is dialed at its address (node_id when
empty). R is ClusterStatus.replication_factor (0 read as 1). One kvtier.Client per member
(built from `client_options`); unreachable members stay in the ring without a connection.

Routing:
  put_blocks  each block to every one of its top-R owners, one Client.put_blocks per owner,
              all owners at once. An unreachable owner is skipped (replicas_skipped) as
              long as every block reaches at least one owner.
  get_blocks  each key asked of its primary owner first, one call per owner in parallel;
              misses and keys of unreachable owners go to the next owner, up to R, within
              the call's one deadline. Owners that failed in the last `down_retry` seconds
              are tried last.
  lookup      one reachable member (the server fans out).
Errors name the node ("node 127.0.0.1:4000: ...") and keep its code. Thread-safe.
"""

import concurrent.futures
import dataclasses
import threading
import time

import grpc

from kvtier._proto import pb

from kvtier import errors, lookup_form
from kvtier.client import Client, FetchedBlock, PutResult
from kvtier.rendezvous import RendezvousRing

# The liveness rule of protocol/peer_liveness.h: a call that ended with one of these codes
# got no answer from the node (it counts down, the key moves on to its next owner); any
# other status is a live node's answer. Pinned to the C++ rule by tests/data/peer_liveness.txt
# (tests/python/test_golden.py).
UNREACHABLE_CODES = frozenset((grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE))


@dataclasses.dataclass
class ClusterMember:
    node_id: str
    address: str
    connected: bool
    healthy_at_refresh: bool


class _Node:
    def __init__(self, node_id, address, healthy):
        self.id, self.address, self.healthy = node_id, address, healthy
        self.client = None
        self.down_until = [0.0]  # shared across refreshes


def _node_error(err, node_id):
    return errors.error_for(err.code, "node %s: %s" % (node_id, err), err.rpc, err.reason,
                            err.field)


def _run_parallel(work, fn):
    if len(work) == 1:
        return {work[0]: fn(work[0])}
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(work)) as pool:
        futures = {i: pool.submit(fn, i) for i in work}
        return {i: f.result() for i, f in futures.items()}


def _tls_name(node_id, address):
    """As the C++ ClusterClient: under TLS a member's certificate must name the host of its
    node id when that is a DNS name (peer_dns clusters report pod IPs as addresses), else
    its address. "" = check the address."""
    if node_id == address:
        return ""
    host = node_id.rsplit(":", 1)[0]
    if not host or host.startswith("[") or all(p.isdigit() for p in host.split(".")):
        return ""
    return host


class ClusterClient:
    """See the module docstring. `seed`: any member's host:port; `namespace`: registered on
    (or checked against) every member; `client_options`: keyword arguments of each
    member's kvtier.Client; `per_owner_get_timeout`: seconds one owner's share of a get may
    take before its keys move on (0 = the call's deadline)."""

    def __init__(self, seed, namespace=None, *, per_owner_get_timeout=0.0, down_retry=1.0,
                 **client_options):
        self.seed = seed
        self.namespace = namespace
        self.per_owner_get_timeout = per_owner_get_timeout
        self.down_retry = down_retry
        self.client_options = client_options
        self.timeout = client_options.get("timeout", 10.0)
        self._lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        seed_client = Client(seed, namespace, **client_options)
        try:
            status = seed_client.cluster_status()
        except errors.KvtierError as e:
            seed_client.close()
            raise _node_error(e, seed) from None
        self._view = self._build_view(status, None, seed_client, seed)

    def close(self):
        for n in self._view[0]:
            if n.client is not None:
                n.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- membership -------------------------------------------------------------------

    def _is_down(self, n):
        return n.down_until[0] > time.monotonic()

    def _mark_down(self, n):
        n.down_until[0] = time.monotonic() + self.down_retry

    @staticmethod
    def _mark_up(n):
        n.down_until[0] = 0.0

    def _rank(self, n):
        return 2 if n.client is None else (1 if self._is_down(n) else 0)

    def _build_view(self, status, previous, seed_client, seed_address):
        if not status.peers:
            raise errors.FailedPreconditionError(
                "cluster status of node %s lists no peers" % status.node_id)
        old = {n.id: n for n in previous[0]} if previous else {}
        nodes, seen = [], set()
        for p in status.peers:
            if not p.node_id or p.node_id in seen:
                continue
            seen.add(p.node_id)
            n = _Node(p.node_id, p.address or p.node_id, p.healthy)
            o = old.get(n.id)
            if o is not None and o.address == n.address:
                n.client, n.down_until = o.client, o.down_until
            if n.client is None and seed_client is not None and n.address == seed_address:
                n.client = seed_client
            nodes.append(n)
        nodes.sort(key=lambda n: n.id)
        ring = RendezvousRing([n.id for n in nodes])
        replication = max(1, status.replication_factor)
        todo = [i for i, n in enumerate(nodes) if n.client is None and n.healthy]

        def connect(i):
            try:
                opts = dict(self.client_options)
                tls = any(opts.get(k) for k in ("tls", "tls_ca_file", "tls_cert_file"))
                if tls and not opts.get("tls_server_name"):
                    opts["tls_server_name"] = _tls_name(nodes[i].id, nodes[i].address)
                nodes[i].client = Client(nodes[i].address, self.namespace, **opts)
                return None
            except errors.KvtierError as e:
                return e
        results = _run_parallel(todo, connect) if todo else {}
        for i, err in sorted(results.items()):
            if err is None:
                continue
            if err.code not in UNREACHABLE_CODES:
                raise _node_error(err, nodes[i].id)
            self._mark_down(nodes[i])
        return nodes, ring, replication

    def refresh(self):
        """Re-reads ClusterStatus (first member that answers, seed first) and installs the
        new membership, keeping existing connections. On error the old one is kept."""
        with self._refresh_lock:
            old = self._view
            status = self._status_from_any(old, None)
            view = self._build_view(status, old, None, "")
            with self._lock:
                self._view = view

    def members(self):
        return [ClusterMember(n.id, n.address, n.client is not None, n.healthy)
                for n in self._view[0]]

    @property
    def ring(self):
        return self._view[1]

    @property
    def replication_factor(self):
        return self._view[2]

    def _preference(self, nodes):
        return sorted(range(len(nodes)), key=lambda i: self._rank(nodes[i]))

    def _on_first_reachable(self, nodes, order, call):
        """call(client) on the first connected member in `order` that answers; the next one
        on unreachable errors (any other error is raised at once)."""
        last = errors.UnavailableError("no cluster member is connected")
        for i in order:
            n = nodes[i]
            if n.client is None:
                continue
            try:
                r = call(n.client)
                self._mark_up(n)
                return r
            except errors.KvtierError as e:
                last = _node_error(e, n.id)
                if e.code not in UNREACHABLE_CODES:
                    raise last from None
                self._mark_down(n)
        raise last

    def _status_from_any(self, view, timeout):
        nodes = view[0]
        order = self._preference(nodes)
        order.sort(key=lambda i: nodes[i].address != self.seed)
        return self._on_first_reachable(nodes, order, lambda c: c.cluster_status(timeout))

    def cluster_status(self, timeout=None):
        return self._status_from_any(self._view, timeout)

    # -- data plane -------------------------------------------------------------------

    def put_blocks(self, ns, blocks, format=0, timeout=None):
        """Stores each block on all of its min(R, members) owners (see the module
        docstring). Returns summed PutResult (a block stored on R nodes counts R times).
        Errors naming the node: an owner's error other than unreachable;
        UnavailableError when every owner of some block was unreachable. Not retried."""
        total = PutResult()
        if not blocks:
            return total
        nodes, ring, r = self._view
        groups = ring.group_by_owner(ns, [b.key for b in blocks], r)
        work = [n for n, g in enumerate(groups) if g]

        def put(n):
            node = nodes[n]
            if node.client is None:
                return errors.UnavailableError("not connected")
            try:
                return node.client.put_blocks(ns, [blocks[i] for i in groups[n]], format, timeout)
            except errors.KvtierError as e:
                return e
        results = _run_parallel(work, put)
        copies = [0] * len(blocks)
        unreachable = None
        for n in work:
            node, res = nodes[n], results[n]
            if isinstance(res, errors.KvtierError):
                if res.code not in UNREACHABLE_CODES:
                    raise _node_error(res, node.id)
                if node.client is not None:
                    self._mark_down(node)
                unreachable = unreachable or _node_error(res, node.id)
                total.replicas_skipped += len(groups[n])
                continue
            self._mark_up(node)
            for i in groups[n]:
                copies[i] += 1
            total.blocks_stored += res.blocks_stored
            total.bytes_stored += res.bytes_stored
        for i, c in enumerate(copies):
            if c == 0:
                raise errors.UnavailableError("no owner of block %d is reachable (%s)"
                                              % (i, unreachable.message if unreachable else ""))
        return total

    def _route_gets(self, ns, keys, timeout, owner_get):
        infos = [None] * len(keys)
        if not keys:
            return infos
        nodes, ring, r = self._view
        total = timeout if timeout else self.timeout
        end = time.monotonic() + total
        rank = [self._rank(n) for n in nodes]
        owners = [sorted(o, key=lambda i: rank[i]) for o in ring.owners_many(ns, keys, r)]
        pending = list(range(len(keys)))
        answered = False
        last = errors.DeadlineExceededError(
            "get deadline of %d ms passed before any owner answered" % (total * 1000))
        for rnd in range(r):
            if not pending:
                break
            remaining = end - time.monotonic()
            if remaining <= 0:
                break
            groups = {}
            for k in pending:
                if rnd < len(owners[k]):
                    groups.setdefault(owners[k][rnd], []).append(k)
            if not groups:
                break
            deadline = (min(self.per_owner_get_timeout, remaining)
                        if self.per_owner_get_timeout > 0 else remaining)

            def get(n):
                node = nodes[n]
                if node.client is None:
                    return errors.UnavailableError("not connected")
                try:
                    return owner_get(node.client, groups[n], deadline)
                except errors.KvtierError as e:
                    return e
            results = _run_parallel(sorted(groups), get)
            nxt = []
            for n in sorted(groups):
                node, res = nodes[n], results[n]
                if isinstance(res, errors.KvtierError):
                    err = _node_error(res, node.id)
                    if res.code not in UNREACHABLE_CODES:
                        raise err
                    if node.client is not None:
                        self._mark_down(node)
                    last = err
                    nxt.extend(groups[n])
                    continue
                self._mark_up(node)
                answered = True
                for j, k in enumerate(groups[n]):
                    if j < len(res):
                        infos[k] = res[j]
                    if j >= len(res) or not res[j].found:
                        nxt.append(k)
            pending = sorted(nxt)
        if not answered:
            raise last
        return infos

    def get_blocks(self, ns, keys, format=0, timeout=None, numpy=False):
        """One FetchedBlock per key from its owners (primary first, then replicas for
        misses and unreachable owners); keys no reachable owner holds are misses."""
        keys = [bytes(k) for k in keys]
        out = [FetchedBlock(None, None) for _ in keys]

        def owner_get(client, idx, deadline):
            got = client.get_blocks(ns, [keys[k] for k in idx], format, deadline, numpy)
            for j, k in enumerate(idx):
                if got[j].info.found:
                    out[k].data = got[j].data
            return [g.info for g in got]
        infos = self._route_gets(ns, keys, timeout, owner_get)
        for fb, info in zip(out, infos):
            fb.info = info if info is not None else pb.GetBlockInfo()
            if not fb.info.found:
                fb.data = None
        return out

    def get_blocks_into(self, ns, keys, buffers, format=0, timeout=None):
        """Like get_blocks but into caller buffers (as Client.get_blocks_into)."""
        keys = [bytes(k) for k in keys]
        if len(buffers) != len(keys):
            raise errors.InvalidArgumentError("buffers has %d entries but keys has %d"
                                              % (len(buffers), len(keys)))

        def owner_get(client, idx, deadline):
            return client.get_blocks_into(ns, [keys[k] for k in idx],
                                          [buffers[k] for k in idx], format, deadline)
        return [i if i is not None else pb.GetBlockInfo()
                for i in self._route_gets(ns, keys, timeout, owner_get)]

    def release_leases(self, ns, lookup, timeout=None):
        """Ends every lease a lookup(lease_ms=...) answer holds (either form): one
        release_lease per (owner, lease_id), sent to that owner. Returns the blocks they
        held; an owner that is not connected or fails is skipped (its lease expires).
        errors.DataLossError when a compact answer is malformed."""
        if lookup_form.is_compact(lookup):
            expanded = pb.LookupResponse()
            expanded.CopyFrom(lookup)
            lookup = lookup_form.expand(expanded)
        nodes = {n.id: n for n in self._view[0]}
        total = 0
        for owner, lease_id in sorted({(b.owner, b.lease_id) for b in lookup.blocks
                                       if b.lease_id}):
            n = nodes.get(owner)
            if n is None or n.client is None:
                continue
            try:
                total += n.client.release_lease(ns, lease_id, timeout)
            except errors.KvtierError:
                pass
        return total

    def lookup(self, ns, keys, timeout=None, lease_ms=0):
        """Client.lookup on one reachable member; the next one on unreachable errors. With
        lease_ms each owner leases its part (release_leases ends them)."""
        nodes = self._view[0]
        return self._on_first_reachable(
            nodes, self._preference(nodes),
            lambda c: c.lookup(ns, keys, False, timeout, lease_ms=lease_ms))
