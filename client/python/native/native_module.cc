// kvtier._native: the C++ side of the kvtier Python package. Optional: kvtier.client,
// kvtier.rendezvous, kvtier.codec, kvtier.keys, kvtier.lookup_form and kvtier.wire use it
// when it imports and fall back to pure Python otherwise (tests/python runs both).
//
//   Client, SharedBuffer      the C++ client bound for Python (client_binding.cc): the
//                             payload calls run the C++ path loop with the GIL released.
//   protocol constants and formulas (protocol_exports.cc): codec sizes, XXH3, prefix-key
//                             chaining, the compact Lookup form, chunk framing, client
//                             defaults, so Python takes them from the C++ definitions.
//   owners(namespace, keys, node_ids, r) -> list of lists of int
//     Rendezvous placement (protocol/rendezvous.h) of each of `keys` (bytes) in
//     `namespace` (str or bytes) over the ring of `node_ids` (str; sorted and deduplicated
//     as RendezvousRing does, so indices match kvtier.RendezvousRing.nodes): per key the
//     indices of its min(r, len) owners, best first (r = 0 counts as 1). What
//     kvtier.rendezvous computes in Python, where one key costs microseconds per node.
//   RpcError(code, message, details): a failed call's gRPC status code number, message
//     and grpc-status-details-bin bytes (kvtier.errors.from_native_error maps it onto the
//     kvtier.errors class of the code).
// Thread-safe.
#include <algorithm>
#include <string>
#include <vector>

#include "client/python/native/py_util.h"
#include "protocol/rendezvous.h"

namespace kvtier::python {

bool AddClientTypes(PyObject* module);      // client_binding.cc
bool AddProtocolExports(PyObject* module);  // protocol_exports.cc

namespace {

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
                        "The C++ client, protocol formulas and placement of the kvtier Python "
                        "package.",
                        -1, kModuleMethods, nullptr, nullptr, nullptr, nullptr};

}  // namespace
}  // namespace kvtier::python

PyMODINIT_FUNC PyInit__native() {
  using namespace kvtier::python;
  PyObject* m = PyModule_Create(&g_module);
  if (m == nullptr) return nullptr;
  if (RpcErrorType() == nullptr) {
    RpcErrorType() = PyErr_NewException("kvtier._native.RpcError", nullptr, nullptr);
  }
  // PyModule_AddObjectRef keeps our reference: RpcError lives as long as the process.
  const bool ok = RpcErrorType() != nullptr &&
                  PyModule_AddObjectRef(m, "RpcError", RpcErrorType()) == 0 &&
                  AddClientTypes(m) && AddProtocolExports(m);
  if (!ok) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
