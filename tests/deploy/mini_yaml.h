// A minimal YAML reader for the block-style YAML that `kubectl kustomize` (kyaml) emits:
// `---`-separated documents of block maps, block sequences (items at the parent key's
// indentation or deeper), plain / "double" / 'single' quoted scalars, literal block
// scalars (| |- |+), and the empty flow collections {} and []. Anchors, tags, multi-line
// plain scalars and non-empty flow collections are not supported (kustomize does not
// emit them for our manifests); an unsupported construct is a parse error, never a
// silent misread. Test-only code. Thread-compatible.
#ifndef KVTIER_TESTS_DEPLOY_MINI_YAML_H_
#define KVTIER_TESTS_DEPLOY_MINI_YAML_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kvtier::testing {

struct YamlNode {
  enum class Kind { kNull, kScalar, kMap, kSeq };
  Kind kind = Kind::kNull;
  std::string scalar;                                 // kScalar, quotes removed
  std::vector<std::pair<std::string, YamlNode>> map;  // kMap, in document order
  std::vector<YamlNode> seq;                          // kSeq

  bool is_map() const { return kind == Kind::kMap; }
  bool is_seq() const { return kind == Kind::kSeq; }
  bool is_scalar() const { return kind == Kind::kScalar; }

  // Returns the value at a dot-separated path of map keys ("spec.template.spec"), or
  // nullptr when a step is missing or not a map. Keys containing dots cannot be reached
  // this way: use Child().
  const YamlNode* Get(std::string_view path) const;
  // Returns the value of one map key, or nullptr.
  const YamlNode* Child(std::string_view key) const;
  // Returns the scalar at `path`, or `fallback` when absent or not a scalar.
  std::string Str(std::string_view path, std::string fallback = "") const;
};

// Parses a multi-document YAML stream. INVALID_ARGUMENT with the line number on anything
// outside the supported subset.
absl::StatusOr<std::vector<YamlNode>> ParseYamlDocuments(std::string_view text);

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_DEPLOY_MINI_YAML_H_
