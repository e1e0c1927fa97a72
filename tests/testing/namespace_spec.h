// A kvtier.v1.NamespaceSpec for tests that register namespaces through a client (header
// only; the including test links kvtier_protocol).
#ifndef KVTIER_TESTS_TESTING_NAMESPACE_SPEC_H_
#define KVTIER_TESTS_TESTING_NAMESPACE_SPEC_H_

#include <string>

#include "kv/layout.h"
#include "kvtier/v1/kvtier.pb.h"
#include "protocol/convert.h"

namespace kvtier::testing {

// Namespace `name` with `layout` and `codec`; tenant and model id only when non-empty.
inline v1::NamespaceSpec NamespaceSpecOf(const std::string& name, const kv::Layout& layout,
                                         v1::Codec codec = v1::CODEC_FP16,
                                         const std::string& tenant = "",
                                         const std::string& model_id = "") {
  v1::NamespaceSpec spec;
  spec.set_name(name);
  spec.set_tenant(tenant);
  spec.set_model_id(model_id);
  *spec.mutable_layout() = protocol::ToProto(layout);
  spec.set_codec(codec);
  return spec;
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_NAMESPACE_SPEC_H_
