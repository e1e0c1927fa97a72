// kvtier._native.Client: the C++ client (client/client.h) bound for Python. kvtier.Client
// delegates its payload calls to it (put_blocks, get_blocks_into, get_blocks, lookup,
// allocate_shared_buffer), so Python runs the same payload-path loop as C++
// (dataplane::RunPaths over the shared-memory socket, shared memory on a gRPC stream, UCX,
// the gRPC stream: docs/dataplane.md). Every call releases the GIL for the whole C++ call.
//
//   Client(server, *, num_channels, default_deadline_ms, connect_deadline_ms, max_attempts,
//          retry_backoff_ms, chunk_bytes, max_streams_per_call, max_receive_message_bytes,
//          http2_stream_window_bytes, namespace_spec (serialized NamespaceSpec or None),
//          hash_scheme, shared_memory, shared_memory_bytes, shared_memory_socket,
//          shared_memory_socket_calls, auth_token, tls, tls_ca_file, tls_cert_file,
//          tls_key_file, tls_server_name, ucx)
//     Client::Connect with these ClientOptions (defaults: ClientOptions', see
//     kvtier._native.client_defaults()).
//   put(ns, blocks, format, timeout_s) -> (blocks_stored, bytes_stored)
//     blocks: a sequence of objects with the attributes of kvtier.PutBlock (key,
//     payload: any C-contiguous buffer, not copied; parent_key, block_index, token_ids,
//     lora_name, extra_keys).
//   get_into(ns, keys, buffers, format, timeout_s, lease_id) -> bytes
//     Client::GetBlocksInto into the writable C-contiguous `buffers` (numpy arrays,
//     bytearrays, memoryviews: written in place, no copy in Python); returns a serialized
//     kvtier.v1.GetHeader whose blocks are the per-key GetBlockInfos.
//   get(ns, keys, format, timeout_s, lease_id) -> (bytes, [bytearray or None, ...])
//     Client::GetBlocks: the serialized GetHeader and each block's payload.
//   lookup(ns, keys, local_only, lease_ms, compact, timeout_s) -> bytes
//     Client::Lookup: a serialized LookupResponse, compact (as the server sent it) when
//     `compact`, else expanded into one BlockLocation per key.
//   unary(method, request, idempotent, wait_for_ready, timeout_s) -> bytes
//     Client::UnaryRaw: one unary call of KvCache / KvCacheAdmin by its full method name
//     ("/kvtier.v1.KvCacheAdmin/Stats"), `request` serialized, the response serialized;
//     kvtier.Client's calls other than the payload calls go through it, so a Python
//     client with the extension uses one set of connections.
//   allocate_shared_buffer(nbytes) -> SharedBuffer (a writable buffer in the region)
//   uses_shared_memory(), uses_ucx() -> bool; shared_memory_socket_calls() -> int;
//   connect_info() -> (node_id, server_hash_scheme, shared_memory_error, ucx_error)
//   close(): ends the client (a call in flight keeps it alive until it returns); later
//     calls raise RpcError(FAILED_PRECONDITION).
// Errors: RpcError(code, message, details) with the C++ status (message without the
// "<rpc>: " prefix); TypeError / ValueError for arguments of the wrong kind.
// Thread-safe: calls on one Client may run from many threads at once.
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/python/native/py_util.h"
#include "common/mutex.h"
#include "kvtier/v1/kvtier.pb.h"

namespace kvtier::python {
namespace {

namespace v1 = ::kvtier::v1;
using client::Client;

struct ClientObject {
  PyObject_HEAD
  // Owned; null before __init__ succeeded and after close(). A call copies the
  // shared_ptr, so close() during a call frees nothing under it.
  std::shared_ptr<Client>* client;
};

// -- SharedBuffer: memory in the client's shared region, exposed as a Python buffer ---

struct SharedBufferObject {
  PyObject_HEAD
  client::SharedBuffer* buffer;  // owned
  Py_ssize_t exports;
};

int SharedBufferGetBuffer(PyObject* self, Py_buffer* view, int flags) {
  auto* obj = reinterpret_cast<SharedBufferObject*>(self);
  if (obj->buffer == nullptr) {
    PyErr_SetString(PyExc_BufferError, "the shared buffer was released");
    return -1;
  }
  if (PyBuffer_FillInfo(view, self, obj->buffer->data(),
                        static_cast<Py_ssize_t>(obj->buffer->size()), 0, flags) != 0) {
    return -1;
  }
  ++obj->exports;
  return 0;
}

void SharedBufferReleaseBuffer(PyObject* self, Py_buffer*) {
  --reinterpret_cast<SharedBufferObject*>(self)->exports;
}

void SharedBufferDealloc(PyObject* self) {
  delete reinterpret_cast<SharedBufferObject*>(self)->buffer;
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);
}

PyObject* SharedBufferRelease(PyObject* self, PyObject*) {
  // Views (the numpy array over it) may remain: as kvtier.shm.SharedBuffer.release
  // says, they must not be used afterwards.
  auto* obj = reinterpret_cast<SharedBufferObject*>(self);
  delete obj->buffer;
  obj->buffer = nullptr;
  Py_RETURN_NONE;
}

PyMethodDef kSharedBufferMethods[] = {
    {"release", SharedBufferRelease, METH_NOARGS,
     "release(): returns the range to the region; views must not be used afterwards."},
    {nullptr, nullptr, 0, nullptr}};

PyType_Slot kSharedBufferSlots[] = {
    {Py_tp_doc, const_cast<char*>("Memory in a kvtier._native.Client's shared region.")},
    {Py_tp_dealloc, reinterpret_cast<void*>(SharedBufferDealloc)},
    {Py_tp_methods, kSharedBufferMethods},
    {Py_bf_getbuffer, reinterpret_cast<void*>(SharedBufferGetBuffer)},
    {Py_bf_releasebuffer, reinterpret_cast<void*>(SharedBufferReleaseBuffer)},
    {0, nullptr}};

PyType_Spec kSharedBufferSpec = {"kvtier._native.SharedBuffer", sizeof(SharedBufferObject), 0,
                                 Py_TPFLAGS_DEFAULT, kSharedBufferSlots};

PyTypeObject* g_shared_buffer_type = nullptr;

// -- Client ------------------------------------------------------------------------------

// Views `obj` (writable when `writable`) as C-contiguous bytes. Otherwise false with
// RpcError(INVALID_ARGUMENT) naming `what` (read-only or not C-contiguous, the messages of
// the pure-Python path), or TypeError when `obj` is no buffer at all.
bool GetContiguous(PyObject* obj, bool writable, const std::string& what, Buffer* out) {
  if (out->Get(obj, writable ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS : PyBUF_C_CONTIGUOUS)) {
    return true;
  }
  if (!PyObject_CheckBuffer(obj)) return false;  // the TypeError stays
  PyErr_Clear();
  Buffer probe;
  const bool contiguous = probe.Get(obj, PyBUF_C_CONTIGUOUS);
  PyErr_Clear();
  RaiseRpcError(static_cast<int>(absl::StatusCode::kInvalidArgument),
                what + (contiguous          ? " is read-only"
                        : writable          ? " is not C-contiguous"
                                            : ": buffer is not C-contiguous"),
                "");
  return false;
}

void ClientDealloc(PyObject* self) {
  auto* obj = reinterpret_cast<ClientObject*>(self);
  if (obj->client != nullptr) {
    NoGil no_gil;  // the client's destructor joins its threads
    delete obj->client;
  }
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);
}

int ClientInit(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"server",
                                 "num_channels",
                                 "default_deadline_ms",
                                 "connect_deadline_ms",
                                 "max_attempts",
                                 "retry_backoff_ms",
                                 "chunk_bytes",
                                 "max_streams_per_call",
                                 "max_receive_message_bytes",
                                 "http2_stream_window_bytes",
                                 "namespace_spec",
                                 "hash_scheme",
                                 "shared_memory",
                                 "shared_memory_bytes",
                                 "shared_memory_socket",
                                 "shared_memory_socket_calls",
                                 "auth_token",
                                 "tls",
                                 "tls_ca_file",
                                 "tls_cert_file",
                                 "tls_key_file",
                                 "tls_server_name",
                                 "ucx",
                                 nullptr};
  client::ClientOptions o;
  const char* server = nullptr;
  PyObject* spec = Py_None;
  const char* hash_scheme = "";
  const char* shm_socket = "";
  const char* auth_token = "";
  const char* ca = "";
  const char* cert = "";
  const char* key = "";
  const char* server_name = "";
  int shared_memory = o.shared_memory;
  int socket_calls = o.shared_memory_socket_calls;
  int tls = o.tls;
  int ucx = o.ucx;
  long long default_deadline_ms = o.default_deadline_ms;
  long long connect_deadline_ms = o.connect_deadline_ms;
  long long backoff_ms = o.retry_backoff_ms;
  unsigned long long chunk_bytes = o.chunk_bytes;
  unsigned long long shm_bytes = o.shared_memory_bytes;
  if (!PyArg_ParseTupleAndKeywords(
          args, kwargs, "s|$iLLiLKiiiOspKspspssssp", const_cast<char**>(kwlist), &server,
          &o.num_channels, &default_deadline_ms, &connect_deadline_ms, &o.max_attempts,
          &backoff_ms, &chunk_bytes, &o.max_streams_per_call, &o.max_receive_message_bytes,
          &o.http2_stream_window_bytes, &spec, &hash_scheme, &shared_memory, &shm_bytes,
          &shm_socket, &socket_calls, &auth_token, &tls, &ca, &cert, &key, &server_name, &ucx)) {
    return -1;
  }
  o.server = server;
  o.default_deadline_ms = default_deadline_ms;
  o.connect_deadline_ms = connect_deadline_ms;
  o.retry_backoff_ms = backoff_ms;
  o.chunk_bytes = chunk_bytes;
  o.shared_memory_bytes = shm_bytes;
  o.hash_scheme = hash_scheme;
  o.shared_memory = shared_memory != 0;
  o.shared_memory_socket = shm_socket;
  o.shared_memory_socket_calls = socket_calls != 0;
  o.auth_token = auth_token;
  o.tls = tls != 0;
  o.tls_ca_file = ca;
  o.tls_cert_file = cert;
  o.tls_key_file = key;
  o.tls_server_name = server_name;
  o.ucx = ucx != 0;
  if (spec != Py_None) {
    Buffer bytes;
    if (!bytes.Get(spec, PyBUF_SIMPLE)) return -1;
    v1::NamespaceSpec parsed;
    if (!parsed.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      PyErr_SetString(PyExc_ValueError, "namespace_spec is not a serialized NamespaceSpec");
      return -1;
    }
    o.namespace_spec = std::move(parsed);
  }
  absl::StatusOr<std::unique_ptr<Client>> connected;
  {
    NoGil no_gil;
    connected = Client::Connect(o);
  }
  if (!connected.ok()) {
    RaiseStatus(connected.status(), "Connect");
    return -1;
  }
  auto* obj = reinterpret_cast<ClientObject*>(self);
  std::shared_ptr<Client>* old = obj->client;
  obj->client = new std::shared_ptr<Client>(std::move(*connected));
  if (old != nullptr) {
    NoGil no_gil;
    delete old;
  }
  return 0;
}

// The client of `self` for one call, or null with RpcError(FAILED_PRECONDITION) set.
std::shared_ptr<Client> ClientOf(PyObject* self) {
  auto* obj = reinterpret_cast<ClientObject*>(self);
  if (obj->client == nullptr) {
    RaiseRpcError(static_cast<int>(absl::StatusCode::kFailedPrecondition),
                  "the client is closed", "");
    return nullptr;
  }
  return *obj->client;
}

int64_t DeadlineMs(double timeout_s) {
  // At least 1 ms: 0 would mean "the client's default".
  return std::max<int64_t>(1, static_cast<int64_t>(timeout_s * 1000.0 + 0.5));
}

PyObject* g_attr[7] = {};  // interned attribute names of kvtier.PutBlock
enum Attr { kKey, kPayload, kParentKey, kBlockIndex, kTokenIds, kLoraName, kExtraKeys };

// Reads one bytes-like attribute into `out`.
bool ReadBytesAttr(PyObject* block, Attr attr, std::string* out) {
  PyObject* v = PyObject_GetAttr(block, g_attr[attr]);
  if (v == nullptr) return false;
  Buffer b;
  const bool ok = b.Get(v, PyBUF_SIMPLE);
  Py_DECREF(v);
  if (ok) out->assign(reinterpret_cast<const char*>(b.data()), b.size());
  return ok;
}

// Reads the router fields (token_ids, lora_name, extra_keys) of one block.
bool ReadRouterFields(PyObject* block, client::PutBlock* out) {
  PyObject* tokens = PyObject_GetAttr(block, g_attr[kTokenIds]);
  if (tokens == nullptr) return false;
  const Py_ssize_t n = PyObject_Size(tokens);
  if (n > 0) {
    PyObject* seq = PySequence_Fast(tokens, "token_ids must be a sequence of ints");
    for (Py_ssize_t i = 0; seq != nullptr && i < n; ++i) {
      PyObject* t = PyNumber_Index(PySequence_Fast_GET_ITEM(seq, i));
      if (t == nullptr) {
        Py_CLEAR(seq);
        break;
      }
      out->token_ids.push_back(static_cast<uint32_t>(PyLong_AsUnsignedLongLongMask(t)));
      Py_DECREF(t);
    }
    Py_DECREF(tokens);
    if (seq == nullptr) return false;
    Py_DECREF(seq);
  } else {
    Py_DECREF(tokens);
    if (n < 0) return false;
  }
  PyObject* lora = PyObject_GetAttr(block, g_attr[kLoraName]);
  if (lora == nullptr) return false;
  if (PyUnicode_Check(lora) && PyUnicode_GET_LENGTH(lora) > 0) {
    Py_ssize_t len = 0;
    const char* s = PyUnicode_AsUTF8AndSize(lora, &len);
    if (s == nullptr) {
      Py_DECREF(lora);
      return false;
    }
    out->lora_name.assign(s, static_cast<size_t>(len));
  }
  Py_DECREF(lora);
  PyObject* extra = PyObject_GetAttr(block, g_attr[kExtraKeys]);
  if (extra == nullptr) return false;
  const int truthy = PyObject_IsTrue(extra);
  if (truthy > 0) {
    PyObject* seq = PySequence_Fast(extra, "extra_keys must be a sequence of str");
    for (Py_ssize_t i = 0; seq != nullptr && i < PySequence_Fast_GET_SIZE(seq); ++i) {
      Py_ssize_t len = 0;
      const char* s = PyUnicode_AsUTF8AndSize(PySequence_Fast_GET_ITEM(seq, i), &len);
      if (s == nullptr) {
        Py_CLEAR(seq);
        break;
      }
      out->extra_keys.emplace_back(s, static_cast<size_t>(len));
    }
    Py_DECREF(extra);
    if (seq == nullptr) return false;
    Py_DECREF(seq);
    return true;
  }
  Py_DECREF(extra);
  return truthy == 0;
}

PyObject* ClientPut(PyObject* self, PyObject* args) {
  const char* ns;
  Py_ssize_t ns_len;
  PyObject* blocks_obj;
  int format;
  double timeout_s;
  if (!PyArg_ParseTuple(args, "s#Oid", &ns, &ns_len, &blocks_obj, &format, &timeout_s)) {
    return nullptr;
  }
  std::shared_ptr<Client> c = ClientOf(self);
  if (c == nullptr) return nullptr;
  PyObject* seq = PySequence_Fast(blocks_obj, "blocks must be a sequence of PutBlock");
  if (seq == nullptr) return nullptr;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  std::vector<client::PutBlock> blocks(static_cast<size_t>(n));
  std::vector<Buffer> payloads(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* b = PySequence_Fast_GET_ITEM(seq, i);
    client::PutBlock& out = blocks[static_cast<size_t>(i)];
    PyObject* payload = PyObject_GetAttr(b, g_attr[kPayload]);
    PyObject* index = payload == nullptr ? nullptr : PyObject_GetAttr(b, g_attr[kBlockIndex]);
    bool ok = index != nullptr && ReadBytesAttr(b, kKey, &out.key) &&
              ReadBytesAttr(b, kParentKey, &out.parent_key) &&
              GetContiguous(payload, false, "payload", &payloads[static_cast<size_t>(i)]);
    if (ok) {
      out.block_index = static_cast<uint32_t>(PyLong_AsUnsignedLongMask(index));
      ok = !PyErr_Occurred() && ReadRouterFields(b, &out);
    }
    Py_XDECREF(payload);
    Py_XDECREF(index);
    if (!ok) {
      Py_DECREF(seq);
      return nullptr;
    }
    const Buffer& p = payloads[static_cast<size_t>(i)];
    out.payload = std::span<const uint8_t>(p.data(), p.size());
  }
  Py_DECREF(seq);
  client::PutOptions options;
  options.format = static_cast<v1::PayloadFormat>(format);
  options.deadline_ms = DeadlineMs(timeout_s);
  absl::StatusOr<client::PutResult> result;
  {
    NoGil no_gil;
    result = c->PutBlocks(std::string_view(ns, static_cast<size_t>(ns_len)), blocks, options);
  }
  if (!result.ok()) return RaiseStatus(result.status(), "Put");
  return Py_BuildValue("(IK)", result->blocks_stored,
                       static_cast<unsigned long long>(result->bytes_stored));
}

// The GetBlockInfos as one serialized GetHeader (one parse on the Python side).
PyObject* SerializedInfos(std::vector<v1::GetBlockInfo>& infos) {
  v1::GetHeader header;
  header.mutable_blocks()->Reserve(static_cast<int>(infos.size()));
  for (auto& info : infos) *header.add_blocks() = std::move(info);
  // Serialized straight into the bytes object: no intermediate std::string.
  const size_t n = header.ByteSizeLong();
  PyObject* out = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(n));
  if (out == nullptr) return nullptr;
  header.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(PyBytes_AS_STRING(out)));
  return out;
}

PyObject* ClientGetInto(PyObject* self, PyObject* args) {
  const char* ns;
  Py_ssize_t ns_len;
  PyObject* keys_obj;
  PyObject* buffers_obj;
  int format;
  double timeout_s;
  unsigned long long lease_id;
  if (!PyArg_ParseTuple(args, "s#OOidK", &ns, &ns_len, &keys_obj, &buffers_obj, &format,
                        &timeout_s, &lease_id)) {
    return nullptr;
  }
  std::shared_ptr<Client> c = ClientOf(self);
  if (c == nullptr) return nullptr;
  std::vector<std::string> keys;
  if (!ReadByteStrings(keys_obj, "keys", &keys)) return nullptr;
  PyObject* seq = PySequence_Fast(buffers_obj, "buffers must be a sequence of buffers");
  if (seq == nullptr) return nullptr;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  std::vector<Buffer> held(static_cast<size_t>(n));
  std::vector<std::span<uint8_t>> buffers;
  buffers.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    Buffer& b = held[static_cast<size_t>(i)];
    if (!GetContiguous(PySequence_Fast_GET_ITEM(seq, i), true,
                       "buffers[" + std::to_string(i) + "]", &b)) {
      Py_DECREF(seq);
      return nullptr;
    }
    buffers.emplace_back(b.data(), b.size());
  }
  Py_DECREF(seq);
  client::GetOptions options;
  options.format = static_cast<v1::PayloadFormat>(format);
  options.deadline_ms = DeadlineMs(timeout_s);
  options.lease_id = lease_id;
  absl::StatusOr<std::vector<v1::GetBlockInfo>> infos;
  {
    NoGil no_gil;
    infos = c->GetBlocksInto(std::string_view(ns, static_cast<size_t>(ns_len)), keys, buffers,
                             options);
  }
  if (!infos.ok()) return RaiseStatus(infos.status(), "Get");
  return SerializedInfos(*infos);
}

PyObject* ClientGet(PyObject* self, PyObject* args) {
  const char* ns;
  Py_ssize_t ns_len;
  PyObject* keys_obj;
  int format;
  double timeout_s;
  unsigned long long lease_id;
  if (!PyArg_ParseTuple(args, "s#OidK", &ns, &ns_len, &keys_obj, &format, &timeout_s,
                        &lease_id)) {
    return nullptr;
  }
  std::shared_ptr<Client> c = ClientOf(self);
  if (c == nullptr) return nullptr;
  std::vector<std::string> keys;
  if (!ReadByteStrings(keys_obj, "keys", &keys)) return nullptr;
  client::GetOptions options;
  options.format = static_cast<v1::PayloadFormat>(format);
  options.deadline_ms = DeadlineMs(timeout_s);
  options.lease_id = lease_id;
  absl::StatusOr<std::vector<client::FetchedBlock>> fetched;
  {
    NoGil no_gil;
    fetched = c->GetBlocks(std::string_view(ns, static_cast<size_t>(ns_len)), keys, options);
  }
  if (!fetched.ok()) return RaiseStatus(fetched.status(), "Get");
  std::vector<v1::GetBlockInfo> infos;
  PyObject* data = PyList_New(static_cast<Py_ssize_t>(fetched->size()));
  if (data == nullptr) return nullptr;
  for (size_t i = 0; i < fetched->size(); ++i) {
    client::FetchedBlock& f = (*fetched)[i];
    PyObject* item;
    if (f.info.found()) {
      item = PyByteArray_FromStringAndSize(f.data.data(), static_cast<Py_ssize_t>(f.data.size()));
      if (item == nullptr) {
        Py_DECREF(data);
        return nullptr;
      }
    } else {
      item = Py_NewRef(Py_None);
    }
    PyList_SET_ITEM(data, static_cast<Py_ssize_t>(i), item);
    infos.push_back(std::move(f.info));
  }
  PyObject* header = SerializedInfos(infos);
  if (header == nullptr) {
    Py_DECREF(data);
    return nullptr;
  }
  return Py_BuildValue("(NN)", header, data);
}

PyObject* ClientLookup(PyObject* self, PyObject* args) {
  const char* ns;
  Py_ssize_t ns_len;
  PyObject* keys_obj;
  int local_only;
  unsigned long long lease_ms;
  int compact;
  double timeout_s;
  if (!PyArg_ParseTuple(args, "s#OpKpd", &ns, &ns_len, &keys_obj, &local_only, &lease_ms,
                        &compact, &timeout_s)) {
    return nullptr;
  }
  std::shared_ptr<Client> c = ClientOf(self);
  if (c == nullptr) return nullptr;
  // The keys are viewed, not copied: a tuple of them holds each one alive while the GIL
  // is released (another thread may change the caller's list meanwhile).
  PyObject* held = PySequence_Tuple(keys_obj);
  if (held == nullptr) return nullptr;
  const Py_ssize_t n = PyTuple_GET_SIZE(held);
  std::vector<std::string_view> keys(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* k = PyTuple_GET_ITEM(held, i);
    if (!PyBytes_Check(k)) {
      Py_DECREF(held);
      return PyErr_Format(PyExc_TypeError, "keys[%zd] is not bytes", i);
    }
    keys[static_cast<size_t>(i)] =
        std::string_view(PyBytes_AS_STRING(k), static_cast<size_t>(PyBytes_GET_SIZE(k)));
  }
  client::LookupOptions options;
  options.local_only = local_only != 0;
  options.lease_ms = lease_ms;
  // Compact from the C++ client either way: the full form is written straight from it
  // (SerializeExpandedLookup), never built as one message per key and then serialized.
  options.keep_compact = true;
  client::CallOptions call;
  call.deadline_ms = DeadlineMs(timeout_s);
  std::string bytes;
  absl::Status status;
  {
    NoGil no_gil;
    absl::StatusOr<v1::LookupResponse> resp =
        c->Lookup(std::string_view(ns, static_cast<size_t>(ns_len)), keys, options, call);
    if (!resp.ok()) {
      status = resp.status();
    } else if (compact != 0) {
      resp->SerializeToString(&bytes);
    } else {
      status = SerializeExpandedLookup(*std::move(resp), &bytes);
      if (!status.ok()) status = absl::DataLossError(absl::StrCat("Lookup: ", status.message()));
    }
  }
  Py_DECREF(held);
  if (!status.ok()) return RaiseStatus(status, "Lookup");
  return PyBytes_FromStringAndSize(bytes.data(), static_cast<Py_ssize_t>(bytes.size()));
}

PyObject* ClientAllocateSharedBuffer(PyObject* self, PyObject* args) {
  unsigned long long nbytes;
  if (!PyArg_ParseTuple(args, "K", &nbytes)) return nullptr;
  std::shared_ptr<Client> c = ClientOf(self);
  if (c == nullptr) return nullptr;
  absl::StatusOr<client::SharedBuffer> buffer = c->AllocateSharedBuffer(nbytes);
  if (!buffer.ok()) return RaiseStatus(buffer.status(), "AllocateSharedBuffer");
  auto* obj = PyObject_New(SharedBufferObject, g_shared_buffer_type);
  if (obj == nullptr) return nullptr;
  obj->buffer = new client::SharedBuffer(std::move(*buffer));
  obj->exports = 0;
  return reinterpret_cast<PyObject*>(obj);
}

PyObject* ClientUsesSharedMemory(PyObject* self, PyObject*) {
  std::shared_ptr<Client> c = ClientOf(self);
  if (c == nullptr) return nullptr;
  return PyBool_FromLong(c->uses_shared_memory());
}

PyObject* ClientUsesUcx(PyObject* self, PyObject*) {
  std::shared_ptr<Client> c = ClientOf(self);
  if (c == nullptr) return nullptr;
  return PyBool_FromLong(c->uses_ucx());
}

PyObject* ClientSocketCalls(PyObject* self, PyObject*) {
  std::shared_ptr<Client> c = ClientOf(self);
  if (c == nullptr) return nullptr;
  return PyLong_FromUnsignedLongLong(c->shared_memory_socket_calls());
}

PyObject* ClientConnectInfo(PyObject* self, PyObject*) {
  std::shared_ptr<Client> c = ClientOf(self);
  if (c == nullptr) return nullptr;
  const client::ConnectInfo& i = c->connect_info();
  return Py_BuildValue("(s#s#s#s#)", i.node_id.data(), static_cast<Py_ssize_t>(i.node_id.size()),
                       i.server_hash_scheme.data(),
                       static_cast<Py_ssize_t>(i.server_hash_scheme.size()),
                       i.shared_memory_error.data(),
                       static_cast<Py_ssize_t>(i.shared_memory_error.size()), i.ucx_error.data(),
                       static_cast<Py_ssize_t>(i.ucx_error.size()));
}

PyObject* ClientClose(PyObject* self, PyObject*) {
  auto* obj = reinterpret_cast<ClientObject*>(self);
  std::shared_ptr<Client>* c = obj->client;
  obj->client = nullptr;
  if (c != nullptr) {
    NoGil no_gil;
    delete c;
  }
  Py_RETURN_NONE;
}

PyObject* ClientUnary(PyObject* self, PyObject* args) {
  const char* method;
  Py_ssize_t method_len;
  Py_buffer request;
  int idempotent;
  int wait_for_ready;
  double timeout_s;
  if (!PyArg_ParseTuple(args, "s#y*ppd", &method, &method_len, &request, &idempotent,
                        &wait_for_ready, &timeout_s)) {
    return nullptr;
  }
  std::shared_ptr<Client> c = ClientOf(self);
  if (c == nullptr) {
    PyBuffer_Release(&request);
    return nullptr;
  }
  const std::string_view name(method, static_cast<size_t>(method_len));
  client::CallOptions call;
  call.deadline_ms = DeadlineMs(timeout_s);
  absl::StatusOr<std::string> resp;
  {
    NoGil no_gil;
    resp = c->UnaryRaw(name, std::string_view(static_cast<const char*>(request.buf),
                                              static_cast<size_t>(request.len)),
                       idempotent != 0, wait_for_ready != 0, call);
  }
  PyBuffer_Release(&request);
  if (!resp.ok()) {
    const size_t slash = name.rfind('/');
    return RaiseStatus(resp.status(), slash == std::string_view::npos ? name
                                                                      : name.substr(slash + 1));
  }
  return PyBytes_FromStringAndSize(resp->data(), static_cast<Py_ssize_t>(resp->size()));
}

PyMethodDef kClientMethods[] = {
    {"unary", ClientUnary, METH_VARARGS,
     "unary(method, request, idempotent, wait_for_ready, timeout_s) -> serialized response"},
    {"put", ClientPut, METH_VARARGS, "put(ns, blocks, format, timeout_s) -> (blocks, bytes)"},
    {"get_into", ClientGetInto, METH_VARARGS,
     "get_into(ns, keys, buffers, format, timeout_s, lease_id) -> serialized GetHeader"},
    {"get", ClientGet, METH_VARARGS,
     "get(ns, keys, format, timeout_s, lease_id) -> (serialized GetHeader, payloads)"},
    {"lookup", ClientLookup, METH_VARARGS,
     "lookup(ns, keys, local_only, lease_ms, compact, timeout_s) -> serialized "
     "LookupResponse"},
    {"allocate_shared_buffer", ClientAllocateSharedBuffer, METH_VARARGS,
     "allocate_shared_buffer(nbytes) -> SharedBuffer"},
    {"uses_shared_memory", ClientUsesSharedMemory, METH_NOARGS, "uses_shared_memory() -> bool"},
    {"uses_ucx", ClientUsesUcx, METH_NOARGS, "uses_ucx() -> bool"},
    {"shared_memory_socket_calls", ClientSocketCalls, METH_NOARGS,
     "shared_memory_socket_calls() -> int"},
    {"connect_info", ClientConnectInfo, METH_NOARGS,
     "connect_info() -> (node_id, server_hash_scheme, shared_memory_error, ucx_error)"},
    {"close", ClientClose, METH_NOARGS, "close() -> None"},
    {nullptr, nullptr, 0, nullptr}};

PyType_Slot kClientSlots[] = {
    {Py_tp_doc, const_cast<char*>("The C++ kvtier client (client/client.h); see the module "
                                  "doc of client/python/native/client_binding.cc.")},
    {Py_tp_new, reinterpret_cast<void*>(PyType_GenericNew)},
    {Py_tp_init, reinterpret_cast<void*>(ClientInit)},
    {Py_tp_dealloc, reinterpret_cast<void*>(ClientDealloc)},
    {Py_tp_methods, kClientMethods},
    {0, nullptr}};

PyType_Spec kClientSpec = {"kvtier._native.Client", sizeof(ClientObject), 0, Py_TPFLAGS_DEFAULT,
                           kClientSlots};

}  // namespace

// Adds Client and SharedBuffer to `module`; false with a Python error set on failure.
bool AddClientTypes(PyObject* module) {
  static const char* names[] = {"key",         "payload",   "parent_key", "block_index",
                                "token_ids",   "lora_name", "extra_keys"};
  for (int i = 0; i < 7; ++i) {
    g_attr[i] = PyUnicode_InternFromString(names[i]);
    if (g_attr[i] == nullptr) return false;
  }
  PyObject* client_type = PyType_FromSpec(&kClientSpec);
  PyObject* buffer_type = PyType_FromSpec(&kSharedBufferSpec);
  g_shared_buffer_type = reinterpret_cast<PyTypeObject*>(buffer_type);  // kept for good
  const bool ok = client_type != nullptr && buffer_type != nullptr &&
                  PyModule_AddObjectRef(module, "Client", client_type) == 0 &&
                  PyModule_AddObjectRef(module, "SharedBuffer", buffer_type) == 0;
  Py_XDECREF(client_type);
  return ok;
}

}  // namespace kvtier::python
