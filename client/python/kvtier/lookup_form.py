"""The compact form of a kvtier.v1.LookupResponse (LookupRequest.compact): tiers as one
byte per key, holders by index into a small owners table: protocol/lookup_form.h's
ExpandLookup through kvtier._native when built, else the pure-Python mirror below.

  is_compact(resp)  True when resp carries the compact fields rather than `blocks`.
  expand(resp)      rewrites a compact resp into one BlockLocation per key (in place).
"""

from kvtier import errors
from kvtier._proto import pb
from kvtier._protocol import _native

__all__ = ["is_compact", "expand"]


def is_compact(resp):
    return len(resp.tiers) > 0 or len(resp.owners) > 0


def expand(resp):
    """Rewrites compact `resp` into the verbose form (blocks[i].tier/owner/lease_id) and
    returns it; a verbose resp is returned as is. Raises errors.DataLossError when
    owner_index or owner_lease_ids do not match the key and owner counts. The rules are
    kvtier.proto's LookupResponse: with owner_index empty every resident key is held by
    holder 0 and absent keys have no owner; otherwise key i is holder owner_index[i]'s."""
    if not is_compact(resp):
        return resp
    if _native is not None:  # protocol::ExpandLookup
        try:
            expanded = _native.expand_lookup(resp.SerializeToString())
        except _native.RpcError as e:
            raise _data_loss(e.args[1]) from None
        resp.Clear()
        resp.MergeFromString(expanded)
        return resp
    return _expand_pure(resp)


def _expand_pure(resp):
    tiers = resp.tiers
    owners = list(resp.owners)
    index = list(resp.owner_index)
    leases = list(resp.owner_lease_ids)
    if leases and len(leases) != len(owners):
        raise _data_loss("owner_lease_ids has %d entries for %d owners"
                         % (len(leases), len(owners)))
    if index and len(index) != len(tiers):
        raise _data_loss("owner_index has %d entries for %d keys" % (len(index), len(tiers)))
    blocks = []
    for i, tier in enumerate(tiers):
        h = index[i] if index else (0 if tier != pb.TIER_NONE else None)
        if h is None:
            blocks.append(pb.BlockLocation(tier=tier))
            continue
        if h >= len(owners):
            raise _data_loss("owner_index[%d] is %d but owners has %d entries"
                             % (i, h, len(owners)))
        blocks.append(pb.BlockLocation(tier=tier, owner=owners[h],
                                       lease_id=leases[h] if leases else 0))
    resp.ClearField("tiers")
    resp.ClearField("owners")
    resp.ClearField("owner_index")
    resp.ClearField("owner_lease_ids")
    resp.blocks.extend(blocks)
    return resp


def _data_loss(message):
    return errors.DataLossError(message, "Lookup")
