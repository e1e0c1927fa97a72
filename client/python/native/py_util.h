// Helpers shared by the source files of kvtier._native (client/python/native/): buffer
// views, GIL release, and raising a status as kvtier._native.RpcError. Private to the
// module. Everything here is called with the GIL held unless it says otherwise.
#ifndef KVTIER_CLIENT_PYTHON_NATIVE_PY_UTIL_H_
#define KVTIER_CLIENT_PYTHON_NATIVE_PY_UTIL_H_

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "kvtier/v1/kvtier.pb.h"

namespace kvtier::python {

// kvtier._native.RpcError(code, message, details): a failed call's gRPC status code
// number, message and grpc-status-details-bin bytes. Set once by PyInit__native.
PyObject*& RpcErrorType();

// A Py_buffer released (with the GIL held) when it goes out of scope. Movable only
// before Get() succeeded.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& other) noexcept : view_(other.view_), held_(other.held_) {
    other.held_ = false;
  }
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

// Raises RpcError(code, message, details); returns nullptr.
PyObject* RaiseRpcError(int code, std::string_view message, std::string_view details);

// Raises the RpcError of a non-OK `status` of the C++ client: its code, its message
// without the "<rpc>: " prefix the client adds, and its ErrorDetail (if any) as the
// serialized kvtier.v1.RpcStatus a server sends. Returns nullptr.
PyObject* RaiseStatus(const absl::Status& status, std::string_view rpc);

// Reads a sequence of bytes-like objects into `out`; false with a Python error set
// (TypeError naming `what`) otherwise.
bool ReadByteStrings(PyObject* seq_obj, const char* what, std::vector<std::string>* out);

// Serializes `response` in the full form (one BlockLocation per key): what
// protocol::ExpandLookup and SerializeToString give, fields in another order, written
// straight from the compact fields without building a message per key (the Python side
// parses it once). A response already in the full form is serialized as is. DATA_LOSS
// when the compact fields do not match (protocol::CheckLookup). Needs no GIL.
absl::Status SerializeExpandedLookup(kvtier::v1::LookupResponse response, std::string* out);

}  // namespace kvtier::python

#endif  // KVTIER_CLIENT_PYTHON_NATIVE_PY_UTIL_H_
