#include "client/python/native/py_util.h"

#include "protocol/error_detail.h"

namespace kvtier::python {

PyObject*& RpcErrorType() {
  static PyObject* type = nullptr;
  return type;
}

PyObject* RaiseRpcError(int code, std::string_view message, std::string_view details) {
  PyObject* args = Py_BuildValue("(is#y#)", code, message.data(),
                                 static_cast<Py_ssize_t>(message.size()), details.data(),
                                 static_cast<Py_ssize_t>(details.size()));
  if (args != nullptr) {
    PyErr_SetObject(RpcErrorType(), args);
    Py_DECREF(args);
  }
  return nullptr;
}

PyObject* RaiseStatus(const absl::Status& status, std::string_view rpc) {
  std::string_view message(status.message().data(), status.message().size());
  if (message.size() > rpc.size() + 1 && message.substr(0, rpc.size()) == rpc &&
      message.substr(rpc.size(), 2) == ": ") {
    message.remove_prefix(rpc.size() + 2);
  }
  // The ErrorDetail (if any) as the server sends it: a serialized kvtier.v1.RpcStatus.
  const grpc::Status wire = protocol::ToGrpcStatus(status);
  return RaiseRpcError(static_cast<int>(status.code()), message, wire.error_details());
}

bool ReadByteStrings(PyObject* seq_obj, const char* what, std::vector<std::string>* out) {
  PyObject* seq = PySequence_Fast(seq_obj, "expected a sequence of bytes objects");
  if (seq == nullptr) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  out->reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
    if (PyBytes_Check(item)) {
      out->emplace_back(PyBytes_AS_STRING(item), static_cast<size_t>(PyBytes_GET_SIZE(item)));
      continue;
    }
    Buffer b;
    if (!b.Get(item, PyBUF_SIMPLE)) {
      Py_DECREF(seq);
      PyErr_Format(PyExc_TypeError, "%s[%zd] is not bytes-like", what, i);
      return false;
    }
    out->emplace_back(reinterpret_cast<const char*>(b.data()), b.size());
  }
  Py_DECREF(seq);
  return true;
}

}  // namespace kvtier::python
