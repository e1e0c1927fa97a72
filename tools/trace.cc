#include "tools/trace.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace kvtier::tools {
namespace {

// A deliberately small JSON reader: enough for one flat object per line with numeric
// fields and one array of numbers; any other value is parsed and skipped.
class LineParser {
 public:
  explicit LineParser(std::string_view text) : s_(text) {}

  absl::Status Parse(TraceRequest* out) {
    SkipWs();
    if (!Eat('{')) return Error("expected '{'");
    bool have_ids = false;
    SkipWs();
    if (Eat('}')) return absl::InvalidArgumentError("missing field hash_ids");
    while (true) {
      SkipWs();
      std::string key;
      if (absl::Status st = ParseString(&key); !st.ok()) return st;
      SkipWs();
      if (!Eat(':')) return Error("expected ':'");
      SkipWs();
      if (key == "hash_ids") {
        if (absl::Status st = ParseIds(&out->hash_ids); !st.ok()) return st;
        have_ids = true;
      } else if (key == "timestamp" || key == "input_length" || key == "output_length") {
        uint64_t v = 0;
        if (absl::Status st = ParseUint(key, &v); !st.ok()) return st;
        if (key == "timestamp") out->timestamp_ms = v;
        if (key == "input_length") out->input_length = v;
        if (key == "output_length") out->output_length = v;
      } else {
        if (absl::Status st = SkipValue(0); !st.ok()) return st;
      }
      SkipWs();
      if (Eat(',')) continue;
      if (Eat('}')) break;
      return Error("expected ',' or '}'");
    }
    SkipWs();
    if (i_ != s_.size()) return Error("trailing characters");
    if (!have_ids) return absl::InvalidArgumentError("missing field hash_ids");
    return absl::OkStatus();
  }

 private:
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("malformed json: ", Sv(what),
                                                   " at column ", i_ + 1));
  }
  void SkipWs() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r' ||
                              s_[i_] == '\n')) {
      ++i_;
    }
  }
  bool Eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  absl::Status ParseString(std::string* out) {
    if (!Eat('"')) return Error("expected string");
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\') {
        ++i_;
        if (i_ >= s_.size()) break;
      }
      out->push_back(s_[i_++]);
    }
    if (!Eat('"')) return Error("unterminated string");
    return absl::OkStatus();
  }
  // A JSON number token (sign, digits, fraction, exponent).
  std::string_view NumberToken() {
    size_t start = i_;
    while (i_ < s_.size() &&
           (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '-' ||
            s_[i_] == '+' || s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
    }
    return s_.substr(start, i_ - start);
  }
  absl::Status ParseUint(std::string_view field, uint64_t* out) {
    std::string_view tok = NumberToken();
    if (tok.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("field ", Sv(field), ": expected a number at column ", i_ + 1));
    }
    bool digits_only = true;
    for (char c : tok) digits_only &= std::isdigit(static_cast<unsigned char>(c)) != 0;
    if (digits_only) {
      std::string t(tok);
      errno = 0;
      char* end = nullptr;
      unsigned long long v = std::strtoull(t.c_str(), &end, 10);
      if (errno != 0 || end != t.c_str() + t.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("field ", Sv(field), ": number out of range: ", t));
      }
      *out = v;
      return absl::OkStatus();
    }
    // Integral floats (e.g. 1.0e3) are accepted; anything else is rejected.
    std::string t(tok);
    char* end = nullptr;
    double d = std::strtod(t.c_str(), &end);
    if (end != t.c_str() + t.size() || !(d >= 0) || d != std::floor(d) || d > 1.8e19) {
      return absl::InvalidArgumentError(
          absl::StrCat("field ", Sv(field), ": expected a non-negative integer, got ", t));
    }
    *out = static_cast<uint64_t>(d);
    return absl::OkStatus();
  }
  absl::Status ParseIds(std::vector<uint64_t>* ids) {
    if (!Eat('[')) {
      return absl::InvalidArgumentError(
          absl::StrCat("field hash_ids: expected an array at column ", i_ + 1));
    }
    SkipWs();
    if (Eat(']')) return absl::OkStatus();
    while (true) {
      SkipWs();
      uint64_t v = 0;
      if (absl::Status st = ParseUint("hash_ids", &v); !st.ok()) return st;
      ids->push_back(v);
      SkipWs();
      if (Eat(',')) continue;
      if (Eat(']')) return absl::OkStatus();
      return Error("expected ',' or ']' in hash_ids");
    }
  }
  absl::Status SkipValue(int depth) {
    if (depth > 64) return Error("nesting too deep");
    SkipWs();
    if (i_ >= s_.size()) return Error("expected a value");
    char c = s_[i_];
    if (c == '"') {
      std::string ignored;
      return ParseString(&ignored);
    }
    if (c == '{' || c == '[') {
      char close = c == '{' ? '}' : ']';
      ++i_;
      SkipWs();
      if (Eat(close)) return absl::OkStatus();
      while (true) {
        SkipWs();
        if (c == '{') {
          std::string ignored;
          if (absl::Status st = ParseString(&ignored); !st.ok()) return st;
          SkipWs();
          if (!Eat(':')) return Error("expected ':'");
        }
        if (absl::Status st = SkipValue(depth + 1); !st.ok()) return st;
        SkipWs();
        if (Eat(',')) continue;
        if (Eat(close)) return absl::OkStatus();
        return Error("expected ',' or closing bracket");
      }
    }
    for (std::string_view lit : {"true", "false", "null"}) {
      if (s_.substr(i_, lit.size()) == lit) {
        i_ += lit.size();
        return absl::OkStatus();
      }
    }
    if (NumberToken().empty()) return Error("unexpected character");
    return absl::OkStatus();
  }

  std::string_view s_;
  size_t i_ = 0;
};

void Recount(Trace* trace) {
  absl::flat_hash_set<uint64_t> ids;
  trace->total_blocks = 0;
  for (const TraceRequest& r : trace->requests) {
    trace->total_blocks += r.hash_ids.size();
    ids.insert(r.hash_ids.begin(), r.hash_ids.end());
  }
  trace->unique_blocks = ids.size();
}

}  // namespace

Trace Trace::Slice(size_t begin, size_t end) const {
  Trace out;
  end = std::min(end, requests.size());
  begin = std::min(begin, end);
  out.requests.assign(requests.begin() + begin, requests.begin() + end);
  Recount(&out);
  return out;
}

absl::StatusOr<TraceRequest> ParseTraceLine(std::string_view line) {
  TraceRequest req;
  LineParser parser(line);
  if (absl::Status st = parser.Parse(&req); !st.ok()) return st;
  absl::flat_hash_set<uint64_t> seen;
  for (uint64_t id : req.hash_ids) {
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("field hash_ids: id ", id, " repeated in one request"));
    }
  }
  return req;
}

absl::StatusOr<Trace> ParseTrace(std::string_view text) {
  Trace trace;
  // id -> (parent id + 1, 0 for a root; request number that first set it)
  absl::flat_hash_map<uint64_t, std::pair<uint64_t, size_t>> parent;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    absl::StatusOr<TraceRequest> req = ParseTraceLine(line);
    if (!req.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_no, ": ", req.status().message()));
    }
    for (size_t i = 0; i < req->hash_ids.size(); ++i) {
      uint64_t p = i == 0 ? 0 : req->hash_ids[i - 1] + 1;
      auto [it, inserted] = parent.try_emplace(req->hash_ids[i], p, line_no);
      if (!inserted && it->second.first != p) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", line_no, ": field hash_ids: id ", req->hash_ids[i],
            " has a different parent than on line ", it->second.second,
            " (trace is not prefix-chained)"));
      }
    }
    trace.requests.push_back(*std::move(req));
  }
  if (trace.requests.empty()) return absl::InvalidArgumentError("trace has no requests");
  Recount(&trace);
  return trace;
}

ReuseStats ComputeReuseStats(const Trace& trace) {
  struct Seen {
    uint64_t refs = 0;
    size_t last_request = 0;
  };
  absl::flat_hash_map<uint64_t, Seen> seen;
  std::vector<uint64_t> first_gaps, repeat_gaps;
  for (size_t r = 0; r < trace.requests.size(); ++r) {
    for (uint64_t id : trace.requests[r].hash_ids) {
      Seen& s = seen[id];
      if (s.refs == 1) first_gaps.push_back(r - s.last_request);
      if (s.refs >= 2) repeat_gaps.push_back(r - s.last_request);
      ++s.refs;
      s.last_request = r;
    }
  }
  auto median = [](std::vector<uint64_t>& v) -> uint64_t {
    if (v.empty()) return 0;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  ReuseStats stats;
  stats.unique_blocks = seen.size();
  uint64_t once = 0, later_refs = 0;
  for (const auto& [id, s] : seen) {
    if (s.refs == 1) ++once;
    if (s.refs >= 2) later_refs += s.refs - 1;  // 2nd..last references
  }
  if (!seen.empty()) {
    stats.referenced_once = static_cast<double>(once) / seen.size();
    stats.reused_after_first = static_cast<double>(seen.size() - once) / seen.size();
  }
  // A 2nd-or-later reference is followed by another one exactly repeat_gaps.size() times.
  if (later_refs > 0) {
    stats.reused_after_repeat = static_cast<double>(repeat_gaps.size()) / later_refs;
  }
  stats.median_first_gap = median(first_gaps);
  stats.median_repeat_gap = median(repeat_gaps);
  return stats;
}

absl::StatusOr<Trace> ReadTrace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("trace file not found: ", path));
  std::stringstream buf;
  buf << in.rdbuf();
  absl::StatusOr<Trace> trace = ParseTrace(buf.str());
  if (!trace.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", trace.status().message()));
  }
  return trace;
}

}  // namespace kvtier::tools
