#include "tests/deploy/mini_yaml.h"

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvtier::testing {
namespace {

struct Line {
  int indent;        // logical indentation (a rewritten "- " item gets the item's column)
  std::string text;  // content after the indentation
  std::string raw;   // the original line, for block scalars
  int lineno;        // 1-based, for error messages
};

bool IsBlank(const std::string& s) { return s.find_first_not_of(" \t\r") == std::string::npos; }

bool IsSeqItem(const std::string& text) {
  return text == "-" || (text.size() >= 2 && text[0] == '-' && text[1] == ' ');
}

// Splits "key: rest" / "key:" into key and rest; false if the text is not a map entry.
bool SplitKey(const std::string& text, std::string* key, std::string* rest) {
  if (text.empty()) return false;
  size_t colon;
  if (text[0] == '"' || text[0] == '\'') {
    const size_t close = text.find(text[0], 1);
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return false;
    }
    *key = text.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = text.find(": ");
    if (colon == std::string::npos) {
      if (text.back() != ':') return false;
      colon = text.size() - 1;
    }
    *key = text.substr(0, colon);
  }
  if (colon + 1 < text.size() && text[colon + 1] != ' ') return false;
  const size_t start = text.find_first_not_of(' ', colon + 1);
  *rest = start == std::string::npos ? "" : text.substr(start);
  return true;
}

class Parser {
 public:
  explicit Parser(std::vector<Line> lines) : lines_(std::move(lines)) {}

  absl::StatusOr<YamlNode> ParseDocument() {
    SkipBlank();
    if (pos_ >= lines_.size()) return YamlNode{};
    absl::StatusOr<YamlNode> node = ParseNode();
    if (!node.ok()) return node;
    SkipBlank();
    if (pos_ < lines_.size()) return Error("unexpected content");
    return node;
  }

 private:
  absl::Status Error(std::string_view what) const {
    const int lineno = pos_ < lines_.size() ? lines_[pos_].lineno : -1;
    return absl::InvalidArgumentError(absl::StrCat("yaml line ", lineno, ": ", std::string(what)));
  }

  void SkipBlank() {
    while (pos_ < lines_.size() && (IsBlank(lines_[pos_].text) || lines_[pos_].text[0] == '#')) {
      ++pos_;
    }
  }

  absl::StatusOr<YamlNode> ParseNode() {
    const Line& line = lines_[pos_];
    if (IsSeqItem(line.text)) return ParseSeq(line.indent);
    std::string key, rest;
    if (SplitKey(line.text, &key, &rest)) return ParseMap(line.indent);
    absl::StatusOr<YamlNode> scalar = ParseInline(line.text);
    ++pos_;
    return scalar;
  }

  absl::StatusOr<YamlNode> ParseSeq(int indent) {
    YamlNode node;
    node.kind = YamlNode::Kind::kSeq;
    while (true) {
      SkipBlank();
      if (pos_ >= lines_.size() || lines_[pos_].indent != indent || !IsSeqItem(lines_[pos_].text)) {
        break;
      }
      Line& line = lines_[pos_];
      if (line.text == "-") {
        ++pos_;
        SkipBlank();
        if (pos_ < lines_.size() && lines_[pos_].indent > indent) {
          absl::StatusOr<YamlNode> item = ParseNode();
          if (!item.ok()) return item;
          node.seq.push_back(std::move(*item));
        } else {
          node.seq.emplace_back();
        }
        continue;
      }
      // "- rest": treat rest as a line indented at its own column, so "- a: 1" followed
      // by "  b: 2" parses as one map.
      const size_t start = line.text.find_first_not_of(' ', 1);
      line.indent += static_cast<int>(start);
      line.text = line.text.substr(start);
      absl::StatusOr<YamlNode> item = ParseNode();
      if (!item.ok()) return item;
      node.seq.push_back(std::move(*item));
    }
    return node;
  }

  absl::StatusOr<YamlNode> ParseMap(int indent) {
    YamlNode node;
    node.kind = YamlNode::Kind::kMap;
    while (true) {
      SkipBlank();
      if (pos_ >= lines_.size() || lines_[pos_].indent < indent) break;
      const Line& line = lines_[pos_];
      if (line.indent > indent) return Error("unexpected indentation");
      if (IsSeqItem(line.text)) break;  // the parent's sequence continues
      std::string key, rest;
      if (!SplitKey(line.text, &key, &rest)) return Error("expected 'key: value'");
      for (const auto& [k, v] : node.map) {
        if (k == key) return Error(absl::StrCat("duplicate key ", key));
      }
      YamlNode value;
      if (rest.empty()) {
        ++pos_;
        SkipBlank();
        if (pos_ < lines_.size() &&
            (lines_[pos_].indent > indent ||
             (lines_[pos_].indent == indent && IsSeqItem(lines_[pos_].text)))) {
          absl::StatusOr<YamlNode> child = ParseNode();
          if (!child.ok()) return child;
          value = std::move(*child);
        }
      } else if (rest[0] == '|') {
        absl::StatusOr<YamlNode> block = ParseBlockScalar(indent, rest);
        if (!block.ok()) return block;
        value = std::move(*block);
      } else {
        absl::StatusOr<YamlNode> scalar = ParseInline(rest);
        if (!scalar.ok()) return scalar;
        value = std::move(*scalar);
        ++pos_;
      }
      node.map.emplace_back(std::move(key), std::move(value));
    }
    return node;
  }

  // Literal block scalar introduced by `header` (|, |-, |+) on the current line.
  absl::StatusOr<YamlNode> ParseBlockScalar(int indent, const std::string& header) {
    char chomp = 'c';  // clip
    if (header == "|-") {
      chomp = '-';
    } else if (header == "|+") {
      chomp = '+';
    } else if (header != "|") {
      return Error(absl::StrCat("unsupported block scalar header ", header));
    }
    ++pos_;
    std::vector<std::string> body;
    int block_indent = -1;
    while (pos_ < lines_.size()) {
      const std::string& raw = lines_[pos_].raw;
      if (IsBlank(raw)) {
        body.push_back("");
        ++pos_;
        continue;
      }
      const int ind = static_cast<int>(raw.find_first_not_of(' '));
      if (ind <= indent) break;
      if (block_indent < 0) block_indent = ind;
      if (ind < block_indent) return Error("block scalar line less indented than its first");
      body.push_back(raw.substr(static_cast<size_t>(block_indent)));
      ++pos_;
    }
    size_t trailing = 0;
    while (trailing < body.size() && body[body.size() - 1 - trailing].empty()) ++trailing;
    std::string text;
    for (size_t i = 0; i + trailing < body.size(); ++i) {
      text += body[i];
      text += '\n';
    }
    if (chomp == '-' && !text.empty()) text.pop_back();
    if (chomp == '+') text.append(trailing, '\n');
    YamlNode node;
    node.kind = YamlNode::Kind::kScalar;
    node.scalar = std::move(text);
    return node;
  }

  absl::StatusOr<YamlNode> ParseInline(const std::string& text) {
    YamlNode node;
    if (text == "{}") {
      node.kind = YamlNode::Kind::kMap;
      return node;
    }
    if (text == "[]") {
      node.kind = YamlNode::Kind::kSeq;
      return node;
    }
    if (text == "null" || text == "~") return node;
    const char c = text[0];
    if (c == '{' || c == '[' || c == '&' || c == '*' || c == '!' || c == '>') {
      return Error(absl::StrCat("unsupported yaml construct: ", text));
    }
    node.kind = YamlNode::Kind::kScalar;
    if (c == '\'') {
      if (text.size() < 2 || text.back() != '\'') return Error("unterminated 'string'");
      for (size_t i = 1; i + 1 < text.size(); ++i) {
        node.scalar += text[i];
        if (text[i] == '\'') ++i;  // '' is an escaped quote
      }
      return node;
    }
    if (c == '"') {
      if (text.size() < 2 || text.back() != '"') return Error("unterminated \"string\"");
      for (size_t i = 1; i + 1 < text.size(); ++i) {
        if (text[i] != '\\') {
          node.scalar += text[i];
          continue;
        }
        ++i;
        switch (text[i]) {
          case 'n':
            node.scalar += '\n';
            break;
          case 't':
            node.scalar += '\t';
            break;
          case '"':
            node.scalar += '"';
            break;
          case '\\':
            node.scalar += '\\';
            break;
          case '/':
            node.scalar += '/';
            break;
          default:
            return Error(absl::StrCat("unsupported escape in ", text));
        }
      }
      return node;
    }
    node.scalar = text;
    return node;
  }

  std::vector<Line> lines_;
  size_t pos_ = 0;
};

}  // namespace

const YamlNode* YamlNode::Child(std::string_view key) const {
  if (kind != Kind::kMap) return nullptr;
  for (const auto& [k, v] : map) {
    if (k == key) return &v;
  }
  return nullptr;
}

const YamlNode* YamlNode::Get(std::string_view path) const {
  const YamlNode* node = this;
  while (node != nullptr && !path.empty()) {
    const size_t dot = path.find('.');
    node = node->Child(path.substr(0, dot));
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
  }
  return node;
}

std::string YamlNode::Str(std::string_view path, std::string fallback) const {
  const YamlNode* node = Get(path);
  return node != nullptr && node->is_scalar() ? node->scalar : fallback;
}

absl::StatusOr<std::vector<YamlNode>> ParseYamlDocuments(std::string_view text) {
  std::vector<YamlNode> docs;
  std::vector<Line> lines;
  auto flush = [&]() -> absl::Status {
    Parser parser(std::move(lines));
    lines.clear();
    absl::StatusOr<YamlNode> doc = parser.ParseDocument();
    if (!doc.ok()) return doc.status();
    if (doc->kind != YamlNode::Kind::kNull) docs.push_back(std::move(*doc));
    return absl::OkStatus();
  };
  int lineno = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string raw(text.substr(start, end - start));
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();
    ++lineno;
    start = end + 1;
    if (raw.substr(0, raw.find_first_not_of(" \t")).find('\t') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("yaml line ", lineno, ": tab indent"));
    }
    if (raw == "---" || raw.rfind("--- ", 0) == 0) {
      absl::Status s = flush();
      if (!s.ok()) return s;
      continue;
    }
    const size_t ind = raw.find_first_not_of(' ');
    Line line;
    line.indent = ind == std::string::npos ? 0 : static_cast<int>(ind);
    line.text = ind == std::string::npos ? "" : raw.substr(ind);
    line.raw = raw;
    line.lineno = lineno;
    lines.push_back(std::move(line));
    if (end == text.size()) break;
  }
  absl::Status s = flush();
  if (!s.ok()) return s;
  return docs;
}

}  // namespace kvtier::testing
