#include "client/cli/admin_common.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "kv/codec.h"

namespace kvtier::cli {

absl::StatusOr<std::unique_ptr<client::Client>> ConnectFromFlags(const Flags& flags) {
  client::ClientOptions options;
  options.server = flags.GetString("server", "127.0.0.1:50051");
  options.auth_token = AuthTokenFromFlags(flags);
  ApplyTlsFlags(flags, &options);
  options.num_channels = 1;
  // One-shot commands move a few blocks at most: not worth mapping a shared region.
  options.shared_memory = false;
  ASSIGN_OR_RETURN(options.connect_deadline_ms, flags.GetInt("timeout-ms", 5000));
  options.default_deadline_ms = options.connect_deadline_ms;
  return client::Client::Connect(options);
}

std::string HumanBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrFormat("%.0f%s", b, units[u]) : absl::StrFormat("%.1f%s", b, units[u]);
}

std::string Pct(double x) { return absl::StrFormat("%.1f%%", 100.0 * x); }

std::string ProtoJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.always_print_primitive_fields = true;
  opts.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, opts);
  return out;
}

std::string CodecLabel(v1::Codec c) {
  if (c == v1::CODEC_UNSPECIFIED) return "source";
  return kv::CodecName(static_cast<kv::CodecId>(c));
}

// Prints a table with left-aligned columns.
void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    if (width.size() < r.size()) width.resize(r.size(), 0);
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 2, ' ');
    }
    std::printf("%s\n", line.c_str());
  }
}

}  // namespace kvtier::cli
