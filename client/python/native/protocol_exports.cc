// The protocol constants and formulas of kvtier._native: the C++ definitions, exported so
// the Python package takes them from one place (kvtier.codec, kvtier.keys,
// kvtier.rendezvous, kvtier.lookup_form, kvtier.wire, kvtier.shm and the client defaults
// use these when the module is built; their pure-Python fallbacks are pinned to the same
// golden vectors, tests/data/golden/*.json).
//
//   CONSTANTS: dict   wire and scheme constants (frame tags, header sizes, shm magic, ...)
//   codecs() -> dict name -> codec id (kv::AllCodecs, kv::CodecName)
//   client_defaults() -> dict of client::ClientOptions' defaults (field name -> value)
//   encoded_size(codec, num_layers, num_kv_heads, head_dim, num_tokens, raw_tokens=0)
//       -> int   kv::EncodedSize (lossless: its upper bound); ValueError for an invalid
//       layout or codec id
//   parse_header(blob, encoded_size=-1) -> (format_version, codec, dtype, num_layers,
//       num_kv_heads, head_dim, num_tokens, raw_tokens, encoded_bytes, raw_bytes)
//       kv::ParseHeaderPrefix of the first 40 bytes of `blob` for a blob of encoded_size
//       bytes (-1: len(blob), and then ParseHeader); RpcError(code, message) otherwise
//   xxh3_64(data, seed=0) -> int   XXH3_64bits_withSeed (libxxhash)
//   prefix_seed(namespace, tenant) -> bytes (32)   kv::MakePrefixSeed
//   prefix_keys(tokens, namespace, tenant, tokens_per_block, extra) -> list of bytes
//       kv::ComputePrefixKeys; tokens: a buffer of little-endian uint32 token ids
//   rendezvous_key_hash(namespace, key), rendezvous_node_hash(node_id),
//       rendezvous_score(key_hash, node_hash) -> int   protocol/rendezvous.h
//   expand_lookup(response) -> bytes   protocol::ExpandLookup of a serialized
//       LookupResponse; RpcError(DATA_LOSS) when its compact fields do not match
// Thread-safe (pure functions).
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/python/native/py_util.h"
#include "kv/codec.h"
#include "kv/prefix_key.h"
#include "protocol/frame.h"
#include "protocol/lookup_form.h"
#include "protocol/rendezvous.h"
#include "protocol/shm_wire.h"

namespace kvtier::python {
namespace {

namespace v1 = ::kvtier::v1;

std::span<const uint8_t> Bytes(const Buffer& b) { return {b.data(), b.size()}; }

PyObject* Codecs(PyObject*, PyObject*) {
  PyObject* out = PyDict_New();
  for (kv::CodecId id : kv::AllCodecs()) {
    PyObject* v = PyLong_FromLong(static_cast<long>(id));
    if (v == nullptr || PyDict_SetItemString(out, kv::CodecName(id), v) != 0) {
      Py_XDECREF(v);
      Py_DECREF(out);
      return nullptr;
    }
    Py_DECREF(v);
  }
  return out;
}

PyObject* ClientDefaults(PyObject*, PyObject*) {
  const client::ClientOptions o;
  return Py_BuildValue(
      "{s:i,s:L,s:L,s:i,s:L,s:K,s:i,s:i,s:i,s:O,s:K,s:O,s:L,s:K,s:K}", "num_channels",
      o.num_channels, "default_deadline_ms", static_cast<long long>(o.default_deadline_ms),
      "connect_deadline_ms", static_cast<long long>(o.connect_deadline_ms), "max_attempts",
      o.max_attempts, "retry_backoff_ms", static_cast<long long>(o.retry_backoff_ms),
      "chunk_bytes", static_cast<unsigned long long>(o.chunk_bytes), "max_streams_per_call",
      o.max_streams_per_call, "max_receive_message_bytes", o.max_receive_message_bytes,
      "http2_stream_window_bytes", o.http2_stream_window_bytes, "shared_memory",
      o.shared_memory ? Py_True : Py_False, "shared_memory_bytes",
      static_cast<unsigned long long>(o.shared_memory_bytes), "shared_memory_socket_calls",
      o.shared_memory_socket_calls ? Py_True : Py_False, "coalesce_max_delay_us",
      static_cast<long long>(o.coalesce_max_delay_us), "coalesce_max_bytes",
      static_cast<unsigned long long>(o.coalesce_max_bytes), "ucx_coalesce_max_bytes",
      static_cast<unsigned long long>(o.ucx_coalesce_max_bytes));
}

bool KnownCodec(unsigned id) {
  for (kv::CodecId c : kv::AllCodecs()) {
    if (static_cast<unsigned>(c) == id) return true;
  }
  return false;
}

PyObject* EncodedSize(PyObject*, PyObject* args) {
  unsigned codec, tokens, raw_tokens = 0;
  kv::Layout layout;
  if (!PyArg_ParseTuple(args, "IIIII|I", &codec, &layout.num_layers, &layout.num_kv_heads,
                        &layout.head_dim, &tokens, &raw_tokens)) {
    return nullptr;
  }
  layout.tokens_per_block = std::max(tokens, 1u);
  layout.sink_tokens = 0;
  if (!KnownCodec(codec)) return PyErr_Format(PyExc_ValueError, "unknown codec id %u", codec);
  if (tokens == 0) return PyErr_Format(PyExc_ValueError, "num_tokens is 0");
  const absl::Status valid = layout.Validate();
  if (!valid.ok()) {
    return PyErr_Format(PyExc_ValueError, "%s", std::string(valid.message()).c_str());
  }
  return PyLong_FromUnsignedLongLong(
      kv::EncodedSize(static_cast<kv::CodecId>(codec), layout, tokens, raw_tokens));
}

PyObject* ParseHeader(PyObject*, PyObject* args) {
  PyObject* blob_obj;
  long long size = -1;
  if (!PyArg_ParseTuple(args, "O|L", &blob_obj, &size)) return nullptr;
  Buffer blob;
  if (!blob.Get(blob_obj, PyBUF_SIMPLE)) return nullptr;
  absl::StatusOr<kv::EncodedInfo> info;
  if (size < 0) {
    info = kv::ParseHeader(Bytes(blob));
  } else if (blob.size() < kv::kEncodedHeaderBytes) {
    info = absl::DataLossError(absl::StrCat("encoded block is ", blob.size(),
                                            " bytes, shorter than its ",
                                            kv::kEncodedHeaderBytes, "-byte header"));
  } else {
    info = kv::ParseHeaderPrefix(Bytes(blob).first(kv::kEncodedHeaderBytes),
                                 static_cast<uint64_t>(size));
  }
  if (!info.ok()) return RaiseStatus(info.status(), "");
  return Py_BuildValue("(IIIIIIIIKK)", info->format_version, static_cast<unsigned>(info->codec),
                       static_cast<unsigned>(info->layout.dtype), info->layout.num_layers,
                       info->layout.num_kv_heads, info->layout.head_dim, info->num_tokens,
                       info->raw_tokens, static_cast<unsigned long long>(info->encoded_bytes),
                       static_cast<unsigned long long>(info->raw_bytes));
}

PyObject* Xxh3(PyObject*, PyObject* args) {
  PyObject* data_obj;
  unsigned long long seed = 0;
  if (!PyArg_ParseTuple(args, "O|K", &data_obj, &seed)) return nullptr;
  Buffer data;
  if (!data.Get(data_obj, PyBUF_SIMPLE)) return nullptr;
  return PyLong_FromUnsignedLongLong(XXH3_64bits_withSeed(data.data(), data.size(), seed));
}

PyObject* PrefixSeed(PyObject*, PyObject* args) {
  const char* ns;
  Py_ssize_t ns_len;
  const char* tenant;
  Py_ssize_t tenant_len;
  if (!PyArg_ParseTuple(args, "s#s#", &ns, &ns_len, &tenant, &tenant_len)) return nullptr;
  const kv::PrefixSeed seed =
      kv::MakePrefixSeed(std::string_view(ns, static_cast<size_t>(ns_len)),
                         std::string_view(tenant, static_cast<size_t>(tenant_len)));
  return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(seed.data()),
                                   static_cast<Py_ssize_t>(seed.size()));
}

PyObject* PrefixKeys(PyObject*, PyObject* args) {
  PyObject* tokens_obj;
  const char* ns;
  Py_ssize_t ns_len;
  const char* tenant;
  Py_ssize_t tenant_len;
  unsigned tokens_per_block;
  PyObject* extra_obj;
  if (!PyArg_ParseTuple(args, "Os#s#IO", &tokens_obj, &ns, &ns_len, &tenant, &tenant_len,
                        &tokens_per_block, &extra_obj)) {
    return nullptr;
  }
  Buffer tokens, extra;
  if (!tokens.Get(tokens_obj, PyBUF_SIMPLE) || !extra.Get(extra_obj, PyBUF_SIMPLE)) {
    return nullptr;
  }
  if (tokens.size() % 4 != 0) {
    return PyErr_Format(PyExc_ValueError, "tokens: %zu bytes is not a whole number of uint32",
                        tokens.size());
  }
  std::vector<uint32_t> ids(tokens.size() / 4);
  std::memcpy(ids.data(), tokens.data(), tokens.size());  // little-endian host
  const kv::PrefixSeed seed =
      kv::MakePrefixSeed(std::string_view(ns, static_cast<size_t>(ns_len)),
                         std::string_view(tenant, static_cast<size_t>(tenant_len)));
  absl::StatusOr<std::vector<kv::PrefixKey>> keys =
      kv::ComputePrefixKeys(seed, ids, tokens_per_block, Bytes(extra));
  if (!keys.ok()) {
    return PyErr_Format(PyExc_ValueError, "%s", std::string(keys.status().message()).c_str());
  }
  PyObject* out = PyList_New(static_cast<Py_ssize_t>(keys->size()));
  for (size_t i = 0; out != nullptr && i < keys->size(); ++i) {
    PyObject* k = PyBytes_FromStringAndSize(reinterpret_cast<const char*>((*keys)[i].data()),
                                            static_cast<Py_ssize_t>(kv::kPrefixKeyBytes));
    if (k == nullptr) {
      Py_CLEAR(out);
      break;
    }
    PyList_SET_ITEM(out, static_cast<Py_ssize_t>(i), k);
  }
  return out;
}

PyObject* RendezvousKeyHash(PyObject*, PyObject* args) {
  const char* ns;
  Py_ssize_t ns_len;
  const char* key;
  Py_ssize_t key_len;
  if (!PyArg_ParseTuple(args, "s#y#", &ns, &ns_len, &key, &key_len)) return nullptr;
  return PyLong_FromUnsignedLongLong(
      protocol::RendezvousKeyHash(std::string_view(ns, static_cast<size_t>(ns_len)),
                                  std::string_view(key, static_cast<size_t>(key_len))));
}

PyObject* RendezvousNodeHash(PyObject*, PyObject* args) {
  const char* id;
  Py_ssize_t id_len;
  if (!PyArg_ParseTuple(args, "s#", &id, &id_len)) return nullptr;
  return PyLong_FromUnsignedLongLong(
      protocol::RendezvousNodeHash(std::string_view(id, static_cast<size_t>(id_len))));
}

PyObject* RendezvousScore(PyObject*, PyObject* args) {
  unsigned long long key_hash, node_hash;
  if (!PyArg_ParseTuple(args, "KK", &key_hash, &node_hash)) return nullptr;
  return PyLong_FromUnsignedLongLong(protocol::RendezvousScore(key_hash, node_hash));
}

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

PyObject* ExpandLookup(PyObject*, PyObject* args) {
  PyObject* obj;
  if (!PyArg_ParseTuple(args, "O", &obj)) return nullptr;
  Buffer bytes;
  if (!bytes.Get(obj, PyBUF_SIMPLE)) return nullptr;
  v1::LookupResponse resp;
  if (!resp.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return RaiseRpcError(static_cast<int>(absl::StatusCode::kDataLoss),
                         "the LookupResponse does not parse", "");
  }
  std::string out;
  const absl::Status s = SerializeExpandedLookup(std::move(resp), &out);
  if (!s.ok()) return RaiseStatus(s, "");
  return PyBytes_FromStringAndSize(out.data(), static_cast<Py_ssize_t>(out.size()));
}

PyMethodDef kMethods[] = {
    {"codecs", Codecs, METH_NOARGS, "codecs() -> {name: codec id}"},
    {"client_defaults", ClientDefaults, METH_NOARGS, "client_defaults() -> dict"},
    {"encoded_size", EncodedSize, METH_VARARGS,
     "encoded_size(codec, num_layers, num_kv_heads, head_dim, num_tokens, raw_tokens=0)"},
    {"parse_header", ParseHeader, METH_VARARGS, "parse_header(blob, encoded_size=-1) -> tuple"},
    {"xxh3_64", Xxh3, METH_VARARGS, "xxh3_64(data, seed=0) -> int"},
    {"prefix_seed", PrefixSeed, METH_VARARGS, "prefix_seed(namespace, tenant) -> bytes"},
    {"prefix_keys", PrefixKeys, METH_VARARGS,
     "prefix_keys(tokens_u32le, namespace, tenant, tokens_per_block, extra) -> [bytes]"},
    {"rendezvous_key_hash", RendezvousKeyHash, METH_VARARGS,
     "rendezvous_key_hash(namespace, key) -> int"},
    {"rendezvous_node_hash", RendezvousNodeHash, METH_VARARGS,
     "rendezvous_node_hash(node_id) -> int"},
    {"rendezvous_score", RendezvousScore, METH_VARARGS,
     "rendezvous_score(key_hash, node_hash) -> int"},
    {"expand_lookup", ExpandLookup, METH_VARARGS, "expand_lookup(response) -> bytes"},
    {nullptr, nullptr, 0, nullptr}};

PyObject* Constants() {
  namespace shm = protocol::shm;
  return Py_BuildValue(
      "{s:i,s:i,s:n,s:K,s:s,s:n,s:y#,s:n,s:n,s:y#,s:n,s:s#}", "header_tag",
      protocol::kHeaderTag, "chunk_tag", protocol::kChunkTag, "max_varint_bytes",
      static_cast<Py_ssize_t>(protocol::kMaxVarintBytes), "encoded_header_bytes",
      static_cast<unsigned long long>(kv::kEncodedHeaderBytes), "hash_scheme",
      kv::kHashSchemeVersion, "prefix_key_bytes", static_cast<Py_ssize_t>(kv::kPrefixKeyBytes),
      "shm_magic", shm::kMagic, static_cast<Py_ssize_t>(sizeof(shm::kMagic)),
      "shm_session_bytes", static_cast<Py_ssize_t>(shm::kSessionBytes), "shm_instance_bytes",
      static_cast<Py_ssize_t>(shm::kInstanceBytes), "shm_frame_magic", shm::kFrameMagic,
      static_cast<Py_ssize_t>(sizeof(shm::kFrameMagic)), "shm_max_frame_bytes",
      static_cast<Py_ssize_t>(shm::kMaxFrameBytes), "rendezvous_scheme",
      protocol::kRendezvousScheme.data(),
      static_cast<Py_ssize_t>(protocol::kRendezvousScheme.size()));
}

}  // namespace

absl::Status SerializeExpandedLookup(v1::LookupResponse response, std::string* out) {
  if (!protocol::IsCompactLookup(response)) {
    response.SerializeToString(out);
    return absl::OkStatus();
  }
  if (absl::Status s = protocol::CheckLookup(response); !s.ok()) {
    return absl::DataLossError(s.message());
  }
  const v1::LookupResponse compact = response;
  response.clear_tiers();
  response.clear_owners();
  response.clear_owner_lease_ids();
  response.clear_owner_index();
  response.SerializeToString(out);
  const size_t n = compact.tiers().size();
  out->reserve(out->size() + n * 24);
  std::string block;
  for (size_t i = 0; i < n; ++i) {
    block.clear();
    if (const v1::Tier tier = protocol::LookupTier(compact, i); tier != 0) {
      block.push_back(0x08);  // BlockLocation.tier
      PutVarint(static_cast<uint64_t>(tier), &block);
    }
    if (const std::string_view owner = protocol::LookupOwner(compact, i); !owner.empty()) {
      block.push_back(0x12);  // BlockLocation.owner
      PutVarint(owner.size(), &block);
      block.append(owner);
    }
    if (const uint64_t lease = protocol::LookupLeaseId(compact, i); lease != 0) {
      block.push_back(0x18);  // BlockLocation.lease_id
      PutVarint(lease, &block);
    }
    out->push_back(0x12);  // LookupResponse.blocks
    PutVarint(block.size(), out);
    out->append(block);
  }
  return absl::OkStatus();
}

bool AddProtocolExports(PyObject* module) {
  if (PyModule_AddFunctions(module, kMethods) != 0) return false;
  PyObject* constants = Constants();
  if (constants == nullptr) return false;
  const bool ok = PyModule_AddObjectRef(module, "CONSTANTS", constants) == 0;
  Py_DECREF(constants);
  return ok;
}

}  // namespace kvtier::python
