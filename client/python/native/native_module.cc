// kvtier._native: the payload-carrying Put and Get streams of the Python client's gRPC
// path, run in C++ with the GIL released (grpcio copies every sent message once more, and
// every received one three times, with the GIL held), and the frames of its same-node
// shared-memory calls with their staging copies (one GIL release per call), and the
// cluster client's rendezvous placement. Optional: kvtier.client uses it when it imports
// and falls back to grpcio (kvtier.rendezvous to pure Python) otherwise. No protocol
// logic of its own lives here: Python builds the serialized header / request, parses the
// GetHeader, picks the destinations, retries and maps errors; this module moves bytes
// (the sizes a staged Get copies out come from protocol::ReadGetHeaderSizes) and runs
// protocol/rendezvous.cc.
//
//   Channel(address, channel_id, max_receive_message_bytes, http2_stream_window_bytes,
//           tls=None | (root_pem, key_pem, cert_pem) with None for a missing file,
//           tls_server_name="")
//     One HTTP/2 connection (its own subchannel pool), connected on first use.
//   Channel.put(method, header, payloads, chunk_bytes, timeout_s, metadata) -> bytes
//     A client-streaming call: `header` (a serialized PutRequest) as the first message,
//     then the concatenated `payloads` (C-contiguous buffers, not copied: the slices point
//     at them until the call returns) in chunk messages of at most chunk_bytes payload
//     bytes (0x12, varint length, bytes). Returns the serialized response.
//   Channel.get(method, request, on_header, timeout_s, metadata) -> None
//     A server-streaming call of `request` (serialized). The first response message must
//     be the header: on_header(serialized GetHeader) is called (with the GIL) and returns
//     one entry per block, None or a writable C-contiguous buffer that the block's
//     payload bytes then fill completely, in order (protocol::GetStreamFramer).
//   metadata: None or a sequence of (key, value) str pairs; timeout_s: seconds (> 0).
//
//   ShmCalls(socket_path, region_address, region_bytes)
//     The same-node calls of one shared-memory session (protocol/shm_wire.h): a pool of
//     call connections to `socket_path`; the region is the caller's mapping at
//     region_address, which the caller keeps mapped while a call runs.
//   ShmCalls.call(op, request, timeout_s, copies, copy_outs=())
//       -> (code, message, details, body, copied)
//     Copies each (offset, buffer) of `copies` into the region at `offset` (the staged
//     payloads of a Put), then sends `request` (a serialized PutRequest header or
//     GetRequest; for op 3 Lookup, the session and a LookupRequest as
//     protocol::shm::JoinSessionAndRequest joins them) as one frame (op 1 Put, 2 Get, 3
//     Lookup) and waits for the reply; then, for an OK
//     Get reply whose header protocol::ReadGetHeaderSizes reads, copies block `index`'s
//     bytes from the region at `offset` to the start of `buffer` for each (index, offset,
//     writable buffer) of `copy_outs` whose block was found and fits (the staged
//     destinations of a Get); copied says whether it did (else the caller copies); all
//     without the GIL. TimeoutError when no reply came in time (the connection is
//     dropped), ConnectionError when the socket failed, ValueError for a copy outside the
//     region or a request too large for a frame.
//   ShmCalls.close(): drops the idle connections; later calls raise ConnectionError.
//   owners(namespace, keys, node_ids, r) -> list of lists of int
//     Rendezvous placement (protocol/rendezvous.h) of each of `keys` (bytes) in
//     `namespace` (str or bytes) over the ring of `node_ids` (str; sorted and deduplicated
//     as RendezvousRing does, so indices match kvtier.RendezvousRing.nodes): per key the
//     indices of its min(r, len) owners, best first (r = 0 counts as 1). What
//     kvtier.rendezvous computes in Python, where one key costs microseconds per node.
//   Errors: RpcError(code, details, error_details) with the gRPC status code number,
//   message and grpc-status-details-bin bytes; INTERNAL "get stream: ..." for a malformed
//   Get stream (the call is cancelled); an exception raised by on_header is re-raised
//   as is; TypeError / ValueError for arguments of the wrong kind.
// Thread-safe: calls on one Channel may run from many threads at once.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/bulk_copy.h"
#include "common/mutex.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/sync_stream.h"
#include "protocol/frame.h"
#include "protocol/rendezvous.h"
#include "protocol/shm_wire.h"
#include "protocol/slice_refs.h"

namespace kvtier::python {
namespace {

PyObject* g_rpc_error = nullptr;  // kvtier._native.RpcError, owned by the module

// A Py_buffer released (with the GIL held) when it goes out of scope.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (held_) PyBuffer_Release(&view_);
  }
  // False with a Python error set when `obj` has no such buffer.
  bool Get(PyObject* obj, int flags) {
    held_ = PyObject_GetBuffer(obj, &view_, flags) == 0;
    return held_;
  }
  uint8_t* data() const { return static_cast<uint8_t*>(view_.buf); }
  size_t size() const { return static_cast<size_t>(view_.len); }

 private:
  Py_buffer view_{};
  bool held_ = false;
};

// Releases the GIL for its lifetime; Reacquire()/Release() bracket a Python callback.
class NoGil {
 public:
  NoGil() : state_(PyEval_SaveThread()) {}
  NoGil(const NoGil&) = delete;
  NoGil& operator=(const NoGil&) = delete;
  ~NoGil() { PyEval_RestoreThread(state_); }
  void Reacquire() { PyEval_RestoreThread(state_); }
  void Release() { state_ = PyEval_SaveThread(); }

 private:
  PyThreadState* state_;
};

using protocol::SliceRefs;

struct Metadata {
  std::vector<std::pair<std::string, std::string>> pairs;
};

// Reads a None-or-sequence of (str, str) pairs; false with a Python error set otherwise.
bool ParseMetadata(PyObject* obj, Metadata* out) {
  if (obj == Py_None) return true;
  PyObject* seq = PySequence_Fast(obj, "metadata must be a sequence of (key, value) pairs");
  if (seq == nullptr) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  for (Py_ssize_t i = 0; i < n; ++i) {
    const char* key;
    const char* value;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "ss;metadata: (key, value) pairs",
                          &key, &value)) {
      Py_DECREF(seq);
      return false;
    }
    out->pairs.emplace_back(key, value);
  }
  Py_DECREF(seq);
  return true;
}

// False with a Python error set unless timeout_s > 0.
bool CheckTimeout(double timeout_s) {
  if (timeout_s > 0) return true;
  PyErr_SetString(PyExc_ValueError, "timeout_s must be > 0");
  return false;
}

// Sets the deadline and metadata of a call (no Python: runs without the GIL).
void SetUpContext(double timeout_s, const Metadata& md, grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::duration_cast<std::chrono::system_clock::duration>(
                        std::chrono::duration<double>(timeout_s)));
  for (const auto& [k, v] : md.pairs) ctx->AddMetadata(k, v);
}

PyObject* RaiseRpcError(int code, const std::string& message, const std::string& details) {
  PyObject* args = Py_BuildValue("(is#y#)", code, message.data(),
                                 static_cast<Py_ssize_t>(message.size()), details.data(),
                                 static_cast<Py_ssize_t>(details.size()));
  if (args != nullptr) {
    PyErr_SetObject(g_rpc_error, args);
    Py_DECREF(args);
  }
  return nullptr;
}

// The bytes of a received message (a few hundred bytes: a PutResponse).
bool Flatten(const grpc::ByteBuffer& bb, std::string* out) {
  std::vector<grpc::Slice> slices;
  if (!bb.Dump(&slices).ok()) return false;
  for (const auto& s : slices) out->append(reinterpret_cast<const char*>(s.begin()), s.size());
  return true;
}

struct ChannelObject {
  PyObject_HEAD
  std::shared_ptr<grpc::Channel>* channel;  // owned; null until __init__ succeeded
};

void ChannelDealloc(PyObject* self) {
  delete reinterpret_cast<ChannelObject*>(self)->channel;
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);  // a heap type: each instance holds a reference
}

int ChannelInit(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"address", "channel_id", "max_receive_message_bytes",
                                 "http2_stream_window_bytes", "tls", "tls_server_name",
                                 nullptr};
  const char* address;
  int channel_id;
  int max_receive;
  int window;
  PyObject* tls = Py_None;
  const char* server_name = "";
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "siii|Os", const_cast<char**>(kwlist),
                                   &address, &channel_id, &max_receive, &window, &tls,
                                   &server_name)) {
    return -1;
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (tls == Py_None) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    PyObject* pems[3] = {nullptr, nullptr, nullptr};
    if (!PyArg_ParseTuple(tls, "OOO;tls: (root_pem, key_pem, cert_pem)", &pems[0], &pems[1],
                          &pems[2])) {
      return -1;
    }
    std::string text[3];
    for (int i = 0; i < 3; ++i) {
      if (pems[i] == Py_None) continue;
      char* data;
      Py_ssize_t n;
      if (PyBytes_AsStringAndSize(pems[i], &data, &n) != 0) return -1;
      text[i].assign(data, static_cast<size_t>(n));
    }
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = text[0];
    ssl.pem_private_key = text[1];
    ssl.pem_cert_chain = text[2];
    credentials = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments ch_args;
  if (server_name[0] != '\0') ch_args.SetSslTargetNameOverride(server_name);
  ch_args.SetMaxReceiveMessageSize(max_receive);
  ch_args.SetMaxSendMessageSize(-1);
  // One TCP connection per channel, as the grpcio channels and the C++ client.
  ch_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  ch_args.SetInt("kvtier.channel_id", channel_id);
  if (window > 0) ch_args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, window);
  auto* obj = reinterpret_cast<ChannelObject*>(self);
  delete obj->channel;
  obj->channel = new std::shared_ptr<grpc::Channel>(
      grpc::CreateCustomChannel(address, credentials, ch_args));
  return 0;
}

std::shared_ptr<grpc::Channel> ChannelOf(PyObject* self) {
  auto* obj = reinterpret_cast<ChannelObject*>(self);
  if (obj->channel == nullptr) {
    PyErr_SetString(PyExc_ValueError, "kvtier._native.Channel is not initialized");
    return nullptr;
  }
  return *obj->channel;
}

// Runs one Put stream (without the GIL); the slices of `payloads` it hands gRPC are
// counted in `refs`. Returns once the call is over and its context gone (the context
// holds the call, and the call the slices it had not sent).
void PutStream(grpc::Channel* channel, const char* method, double timeout_s, const Metadata& md,
               const Buffer& header, const std::vector<Buffer>& payloads,
               const std::vector<uint64_t>& sizes, uint64_t chunk_bytes, SliceRefs* refs,
               grpc::ByteBuffer* response, grpc::Status* status) {
  grpc::ClientContext ctx;
  SetUpContext(timeout_s, md, &ctx);
  const grpc::internal::RpcMethod rpc(method, grpc::internal::RpcMethod::CLIENT_STREAMING);
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(channel, rpc, &ctx,
                                                                    response));
  grpc::Slice first(header.data(), header.size());  // copied: the small header
  bool ok = writer->Write(grpc::ByteBuffer(&first, 1));
  for (const auto& chunk : protocol::PlanChunks(sizes, chunk_bytes)) {
    if (!ok) break;
    ok = writer->Write(protocol::ChunkMessage(
        chunk, [&](size_t b) -> const uint8_t* { return payloads[b].data(); }, refs));
  }
  if (ok) writer->WritesDone();
  *status = writer->Finish();
}

PyObject* ChannelPut(PyObject* self, PyObject* args) {
  const char* method;
  PyObject* header_obj;
  PyObject* payloads_obj;
  unsigned long long chunk_bytes;
  double timeout_s;
  PyObject* md_obj;
  if (!PyArg_ParseTuple(args, "sOOKdO", &method, &header_obj, &payloads_obj, &chunk_bytes,
                        &timeout_s, &md_obj)) {
    return nullptr;
  }
  std::shared_ptr<grpc::Channel> channel = ChannelOf(self);
  if (channel == nullptr) return nullptr;
  if (chunk_bytes == 0) {
    PyErr_SetString(PyExc_ValueError, "chunk_bytes is 0");
    return nullptr;
  }
  Metadata md;
  if (!ParseMetadata(md_obj, &md) || !CheckTimeout(timeout_s)) return nullptr;
  Buffer header;
  if (!header.Get(header_obj, PyBUF_SIMPLE)) return nullptr;
  PyObject* seq = PySequence_Fast(payloads_obj, "payloads must be a sequence of buffers");
  if (seq == nullptr) return nullptr;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  std::vector<Buffer> payloads(static_cast<size_t>(n));
  std::vector<uint64_t> sizes;
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!payloads[i].Get(PySequence_Fast_GET_ITEM(seq, i), PyBUF_C_CONTIGUOUS)) {
      Py_DECREF(seq);
      return nullptr;
    }
    sizes.push_back(payloads[i].size());
  }
  Py_DECREF(seq);

  grpc::Status status;
  grpc::ByteBuffer response;
  {
    NoGil no_gil;
    SliceRefs refs;
    PutStream(channel.get(), method, timeout_s, md, header, payloads, sizes, chunk_bytes, &refs,
              &response, &status);
    refs.WaitForNone();
  }
  if (!status.ok()) {
    return RaiseRpcError(status.error_code(), status.error_message(), status.error_details());
  }
  std::string bytes;
  if (!Flatten(response, &bytes)) {
    return RaiseRpcError(grpc::StatusCode::INTERNAL, "cannot read the response slices", "");
  }
  return PyBytes_FromStringAndSize(bytes.data(), static_cast<Py_ssize_t>(bytes.size()));
}

PyObject* ChannelGet(PyObject* self, PyObject* args) {
  const char* method;
  PyObject* request_obj;
  PyObject* on_header;
  double timeout_s;
  PyObject* md_obj;
  if (!PyArg_ParseTuple(args, "sOOdO", &method, &request_obj, &on_header, &timeout_s,
                        &md_obj)) {
    return nullptr;
  }
  std::shared_ptr<grpc::Channel> channel = ChannelOf(self);
  if (channel == nullptr) return nullptr;
  if (!PyCallable_Check(on_header)) {
    PyErr_SetString(PyExc_TypeError, "on_header must be callable");
    return nullptr;
  }
  Metadata md;
  if (!ParseMetadata(md_obj, &md)) return nullptr;
  Buffer request;
  if (!request.Get(request_obj, PyBUF_SIMPLE)) return nullptr;
  if (!CheckTimeout(timeout_s)) return nullptr;
  grpc::ClientContext ctx;
  SetUpContext(timeout_s, md, &ctx);

  std::vector<std::unique_ptr<Buffer>> destinations;  // released with the GIL, below
  bool python_error = false;  // on_header raised (or returned garbage): re-raised below
  grpc::Status status;
  absl::Status parse_status;
  {
    NoGil no_gil;
    // A Python error raised here stays set (the thread state keeps it) until returned.
    protocol::GetStreamFramer framer(
        [&](std::string_view header) -> absl::StatusOr<std::vector<std::span<uint8_t>>> {
          no_gil.Reacquire();
          std::vector<std::span<uint8_t>> spans;
          PyObject* result = PyObject_CallFunction(on_header, "y#", header.data(),
                                                   static_cast<Py_ssize_t>(header.size()));
          PyObject* seq = result == nullptr
                              ? nullptr
                              : PySequence_Fast(result, "on_header must return a sequence");
          Py_XDECREF(result);
          python_error = seq == nullptr;
          for (Py_ssize_t i = 0; seq != nullptr && i < PySequence_Fast_GET_SIZE(seq); ++i) {
            PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
            if (item == Py_None) {
              spans.emplace_back();
              continue;
            }
            auto buf = std::make_unique<Buffer>();
            if (!buf->Get(item, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS)) {
              python_error = true;
              break;
            }
            spans.emplace_back(buf->data(), buf->size());
            destinations.push_back(std::move(buf));
          }
          Py_XDECREF(seq);
          no_gil.Release();
          if (python_error) return absl::CancelledError("on_header raised");
          return spans;
        });
    const grpc::internal::RpcMethod rpc(method, grpc::internal::RpcMethod::SERVER_STREAMING);
    grpc::Slice req_slice(request.data(), request.size());
    std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
        grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
            channel.get(), rpc, &ctx, grpc::ByteBuffer(&req_slice, 1)));
    grpc::ByteBuffer bb;
    std::vector<grpc::Slice> slices;
    std::vector<std::span<const uint8_t>> spans;
    while (parse_status.ok() && reader->Read(&bb)) {
      slices.clear();
      if (!bb.Dump(&slices).ok()) {
        parse_status = absl::InternalError("get stream: cannot read response slices");
        break;
      }
      spans.clear();
      for (const auto& s : slices) spans.emplace_back(s.begin(), s.size());
      parse_status = framer.Consume(spans);
    }
    if (parse_status.ok()) {
      status = reader->Finish();
      if (status.ok()) parse_status = framer.Finish();
    } else {
      ctx.TryCancel();
      reader->Finish();
    }
  }
  destinations.clear();
  if (python_error) return nullptr;
  if (!status.ok()) {
    return RaiseRpcError(status.error_code(), status.error_message(), status.error_details());
  }
  if (!parse_status.ok()) {
    return RaiseRpcError(static_cast<int>(parse_status.code()),
                         std::string(parse_status.message()), "");
  }
  Py_RETURN_NONE;
}

PyMethodDef kChannelMethods[] = {
    {"put", ChannelPut, METH_VARARGS,
     "put(method, header, payloads, chunk_bytes, timeout_s, metadata) -> bytes"},
    {"get", ChannelGet, METH_VARARGS,
     "get(method, request, on_header, timeout_s, metadata) -> None"},
    {nullptr, nullptr, 0, nullptr}};

PyType_Slot kChannelSlots[] = {
    {Py_tp_doc,
     const_cast<char*>("One HTTP/2 connection to a kvtierd for Put / Get streams (see the "
                       "module doc).")},
    {Py_tp_new, reinterpret_cast<void*>(PyType_GenericNew)},
    {Py_tp_init, reinterpret_cast<void*>(ChannelInit)},
    {Py_tp_dealloc, reinterpret_cast<void*>(ChannelDealloc)},
    {Py_tp_methods, kChannelMethods},
    {0, nullptr}};

PyType_Spec kChannelSpec = {"kvtier._native.Channel", sizeof(ChannelObject), 0,
                            Py_TPFLAGS_DEFAULT, kChannelSlots};

// -- ShmCalls ---------------------------------------------------------------------------

namespace shm = protocol::shm;

struct ShmCallsObject {
  PyObject_HEAD
  // Owned; null until __init__ succeeded and after close(). A call holds its own
  // reference, so close() during a call frees nothing under it.
  std::shared_ptr<shm::CallConnections>* calls;
  uint8_t* region;
  uint64_t region_bytes;
};

void ShmCallsDealloc(PyObject* self) {
  delete reinterpret_cast<ShmCallsObject*>(self)->calls;
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);
}

int ShmCallsInit(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"socket_path", "region_address", "region_bytes", nullptr};
  const char* path;
  unsigned long long address;
  unsigned long long bytes;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sKK", const_cast<char**>(kwlist), &path, &address,
                                   &bytes)) {
    return -1;
  }
  auto* obj = reinterpret_cast<ShmCallsObject*>(self);
  delete obj->calls;
  obj->calls =
      new std::shared_ptr<shm::CallConnections>(std::make_shared<shm::CallConnections>(path));
  obj->region = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(address));
  obj->region_bytes = bytes;
  return 0;
}

// One staged copy: a Put's payload `buffer` into the region at `offset`, or (with the
// index of its block) a Get's block from the region at `offset` into `buffer`.
struct RegionCopy {
  size_t index = 0;
  uint64_t offset = 0;
  Buffer buffer;
};

// Parses `seq_obj`, a sequence of (offset, buffer) or, for copy-outs, of (block index,
// offset, writable buffer), named `what` in errors. False with a Python error set when an
// entry is malformed or its buffer's range leaves the region.
bool ParseRegionCopies(PyObject* seq_obj, const char* what, bool outs, uint64_t region_bytes,
                       std::vector<RegionCopy>* out) {
  PyObject* seq = PySequence_Fast(seq_obj, "copies and copy_outs must be sequences of tuples");
  if (seq == nullptr) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  *out = std::vector<RegionCopy>(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    RegionCopy& c = (*out)[i];
    Py_ssize_t index = 0;
    unsigned long long offset;
    PyObject* buffer;
    PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
    const bool parsed =
        outs ? PyArg_ParseTuple(item, "nKO;copy_outs: (index, offset, buffer)", &index, &offset,
                                &buffer)
             : PyArg_ParseTuple(item, "KO;copies: (offset, buffer)", &offset, &buffer);
    if (!parsed ||
        !c.buffer.Get(buffer, outs ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS : PyBUF_C_CONTIGUOUS)) {
      Py_DECREF(seq);
      return false;
    }
    if (index < 0 || offset > region_bytes || c.buffer.size() > region_bytes - offset) {
      Py_DECREF(seq);
      PyErr_Format(PyExc_ValueError, "%s[%zd]: %zu bytes at offset %llu leave the region", what, i,
                   c.buffer.size(), offset);
      return false;
    }
    c.index = static_cast<size_t>(index);
    c.offset = offset;
  }
  Py_DECREF(seq);
  return true;
}

// The copies of `outs` for an OK Get reply. False, with nothing copied, when the reply's
// header is not one ReadGetHeaderSizes reads or names fewer blocks than an index; a
// block larger than its buffer is not copied (the caller reports it).
bool CopyOutBlocks(const shm::CallReply& reply, const ShmCallsObject* obj,
                   const std::vector<RegionCopy>& outs) {
  std::vector<uint64_t> sizes;
  if (!protocol::ReadGetHeaderSizes(
          std::span(reinterpret_cast<const uint8_t*>(reply.body.data()), reply.body.size()),
          &sizes)) {
    return false;
  }
  for (const RegionCopy& o : outs) {
    if (o.index >= sizes.size()) return false;
  }
  for (const RegionCopy& o : outs) {
    const uint64_t n = sizes[o.index];
    if (n != 0 && n <= o.buffer.size()) {
      common::BulkCopy(o.buffer.data(), obj->region + o.offset, n);
    }
  }
  return true;
}

PyObject* ShmCallsCall(PyObject* self, PyObject* args) {
  unsigned int op;
  PyObject* request_obj;
  double timeout_s;
  PyObject* copies_obj;
  PyObject* copy_outs_obj = nullptr;
  if (!PyArg_ParseTuple(args, "IOdO|O", &op, &request_obj, &timeout_s, &copies_obj,
                        &copy_outs_obj)) {
    return nullptr;
  }
  auto* obj = reinterpret_cast<ShmCallsObject*>(self);
  if (obj->calls == nullptr) {
    PyErr_SetString(PyExc_ConnectionError, "shared memory: the session was closed");
    return nullptr;
  }
  if (op != static_cast<unsigned>(shm::FrameOp::kPut) &&
      op != static_cast<unsigned>(shm::FrameOp::kGet) &&
      op != static_cast<unsigned>(shm::FrameOp::kLookup)) {
    PyErr_SetString(PyExc_ValueError, "op must be 1 (Put), 2 (Get) or 3 (Lookup)");
    return nullptr;
  }
  if (!CheckTimeout(timeout_s)) return nullptr;
  Buffer request;
  if (!request.Get(request_obj, PyBUF_SIMPLE)) return nullptr;
  std::vector<RegionCopy> ins, outs;
  if (!ParseRegionCopies(copies_obj, "copies", false, obj->region_bytes, &ins) ||
      (copy_outs_obj != nullptr &&
       !ParseRegionCopies(copy_outs_obj, "copy_outs", true, obj->region_bytes, &outs))) {
    return nullptr;
  }
  std::shared_ptr<shm::CallConnections> calls = *obj->calls;
  absl::StatusOr<shm::CallReply> reply;
  bool copied = false;
  {
    NoGil no_gil;
    for (const RegionCopy& c : ins) {
      common::BulkCopy(obj->region + c.offset, c.buffer.data(), c.buffer.size());
    }
    const int64_t deadline_ms = shm::NowUnixMs() + static_cast<int64_t>(timeout_s * 1000) + 1;
    reply =
        calls->Call(static_cast<shm::FrameOp>(op),
                    std::string_view(reinterpret_cast<const char*>(request.data()), request.size()),
                    deadline_ms);
    if (reply.ok() && reply->code == 0 && !outs.empty()) copied = CopyOutBlocks(*reply, obj, outs);
  }
  if (!reply.ok()) {
    PyObject* type = absl::IsDeadlineExceeded(reply.status())  ? PyExc_TimeoutError
                     : absl::IsInvalidArgument(reply.status()) ? PyExc_ValueError
                                                               : PyExc_ConnectionError;
    PyErr_SetString(type, std::string(reply.status().message()).c_str());
    return nullptr;
  }
  return Py_BuildValue("(is#y#y#O)", reply->code, reply->message.data(),
                       static_cast<Py_ssize_t>(reply->message.size()), reply->details.data(),
                       static_cast<Py_ssize_t>(reply->details.size()), reply->body.data(),
                       static_cast<Py_ssize_t>(reply->body.size()), copied ? Py_True : Py_False);
}

PyObject* ShmCallsClose(PyObject* self, PyObject*) {
  auto* obj = reinterpret_cast<ShmCallsObject*>(self);
  delete obj->calls;
  obj->calls = nullptr;
  Py_RETURN_NONE;
}

PyMethodDef kShmCallsMethods[] = {
    {"call", ShmCallsCall, METH_VARARGS,
     "call(op, request, timeout_s, copies, copy_outs=()) -> (code, message, details, body, "
     "copied)"},
    {"close", ShmCallsClose, METH_NOARGS, "close() -> None"},
    {nullptr, nullptr, 0, nullptr}};

PyType_Slot kShmCallsSlots[] = {
    {Py_tp_doc,
     const_cast<char*>("The same-node calls of one shared-memory session (see the module doc).")},
    {Py_tp_new, reinterpret_cast<void*>(PyType_GenericNew)},
    {Py_tp_init, reinterpret_cast<void*>(ShmCallsInit)},
    {Py_tp_dealloc, reinterpret_cast<void*>(ShmCallsDealloc)},
    {Py_tp_methods, kShmCallsMethods},
    {0, nullptr}};

PyType_Spec kShmCallsSpec = {"kvtier._native.ShmCalls", sizeof(ShmCallsObject), 0,
                             Py_TPFLAGS_DEFAULT, kShmCallsSlots};

PyObject* Owners(PyObject*, PyObject* args) {
  const char* ns = nullptr;
  Py_ssize_t ns_len = 0;
  PyObject* keys = nullptr;
  PyObject* node_ids = nullptr;
  Py_ssize_t r = 0;
  if (!PyArg_ParseTuple(args, "s#OOn", &ns, &ns_len, &keys, &node_ids, &r)) return nullptr;
  PyObject* ids_seq = PySequence_Fast(node_ids, "node_ids must be a sequence of str");
  if (ids_seq == nullptr) return nullptr;
  std::vector<std::string> ids;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(ids_seq); ++i) {
    Py_ssize_t len = 0;
    const char* id = PyUnicode_AsUTF8AndSize(PySequence_Fast_GET_ITEM(ids_seq, i), &len);
    if (id == nullptr) {
      Py_DECREF(ids_seq);
      return nullptr;
    }
    ids.emplace_back(id, static_cast<size_t>(len));
  }
  Py_DECREF(ids_seq);
  const protocol::RendezvousRing ring(std::move(ids));
  PyObject* keys_seq = PySequence_Fast(keys, "keys must be a sequence of bytes");
  if (keys_seq == nullptr) return nullptr;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(keys_seq);
  PyObject* out = PyList_New(n);
  std::vector<size_t> owners;
  const std::string_view space(ns, static_cast<size_t>(ns_len));
  for (Py_ssize_t i = 0; out != nullptr && i < n; ++i) {
    char* key = nullptr;
    Py_ssize_t key_len = 0;
    if (PyBytes_AsStringAndSize(PySequence_Fast_GET_ITEM(keys_seq, i), &key, &key_len) != 0) {
      Py_CLEAR(out);
      break;
    }
    ring.OwnersOfHashInto(
        protocol::RendezvousKeyHash(space, std::string_view(key, static_cast<size_t>(key_len))),
        static_cast<size_t>(std::max<Py_ssize_t>(r, 0)), &owners);
    PyObject* row = PyList_New(static_cast<Py_ssize_t>(owners.size()));
    if (row == nullptr) {
      Py_CLEAR(out);
      break;
    }
    PyList_SET_ITEM(out, i, row);  // out owns it from here
    for (size_t j = 0; j < owners.size(); ++j) {
      PyObject* index = PyLong_FromSize_t(owners[j]);
      if (index == nullptr) {
        Py_CLEAR(out);
        break;
      }
      PyList_SET_ITEM(row, static_cast<Py_ssize_t>(j), index);
    }
  }
  Py_DECREF(keys_seq);
  return out;
}

PyMethodDef kModuleMethods[] = {
    {"owners", Owners, METH_VARARGS,
     "owners(namespace, keys, node_ids, r) -> list of lists of int (see the module doc)"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef g_module = {PyModuleDef_HEAD_INIT, "kvtier._native",
                        "Put / Get streams and placement of the kvtier Python client in C++.",
                        -1, kModuleMethods, nullptr, nullptr, nullptr, nullptr};

}  // namespace
}  // namespace kvtier::python

PyMODINIT_FUNC PyInit__native() {
  using namespace kvtier::python;
  PyObject* m = PyModule_Create(&g_module);
  if (m == nullptr) return nullptr;
  PyObject* channel_type = PyType_FromSpec(&kChannelSpec);
  PyObject* shm_calls_type = PyType_FromSpec(&kShmCallsSpec);
  g_rpc_error = PyErr_NewException("kvtier._native.RpcError", nullptr, nullptr);
  // PyModule_AddObjectRef keeps our references: g_rpc_error lives as long as the process.
  const bool ok = channel_type != nullptr && shm_calls_type != nullptr && g_rpc_error != nullptr &&
                  PyModule_AddObjectRef(m, "Channel", channel_type) == 0 &&
                  PyModule_AddObjectRef(m, "ShmCalls", shm_calls_type) == 0 &&
                  PyModule_AddObjectRef(m, "RpcError", g_rpc_error) == 0;
  Py_XDECREF(channel_type);
  Py_XDECREF(shm_calls_type);
  if (!ok) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
