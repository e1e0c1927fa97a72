// `kvtier stats | namespaces | lookup | put | get | evict | flush | drop-namespace |
// recover`: talk to a kvtierd.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/cli/admin_common.h"
#include "client/cli/commands.h"
#include "client/client.h"
#include "client/prefix_keys.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "google/protobuf/util/json_util.h"
#include "kv/codec.h"
#include "tools/flags.h"
#include "tools/synthetic_blocks.h"

namespace kvtier::cli {
namespace {

namespace v1 = ::kvtier::v1;
using client::Client;
using client::ClientOptions;

constexpr char kAdminUsage[] =
    "usage: kvtier <command> [--server HOST:PORT] [--auth-token T] [--json] [flags]\n"
    "  TLS: --tls-ca FILE (roots; --tls alone: system roots), --tls-cert FILE --tls-key FILE\n"
    "       (client certificate), --tls-server-name NAME (name the server's cert must carry)\n"
    "\n"
    "  stats [--namespace NS] [--watch] [--interval S] [--cluster]\n"
    "        blocks, bytes, lookup and get hit rates, evictions per namespace and tier,\n"
    "        leases; `kvtier stats --help` explains each column\n"
    "  namespaces                     registered namespaces and their layouts\n"
    "  lookup --namespace NS (--keys HEX,HEX.. | --tokens FILE | --generate N [--seed S]\n"
    "         [--shared-prefix P])    how much of a prefix chain is cached, and where\n"
    "  put --namespace NS --generate N [--seed S] [--shared-prefix P]\n"
    "         [--layout LxHxDxT] [--dtype fp16|bf16] [--codec NAME] [--tenant T]\n"
    "        puts N synthetic raw blocks of a generated token sequence (registers the\n"
    "        namespace first if needed; the server encodes with the namespace codec)\n"
    "  put --namespace NS --key HEX [--parent HEX] [--index I] --file PATH [--raw]\n"
    "        puts one block from a file (encoded blob, or raw KV with --raw)\n"
    "  get --namespace NS (--keys HEX,.. | --generate N [--seed S] [--shared-prefix P])\n"
    "        [--out PATH] [--raw]     fetches blocks; --out writes the first one\n"
    "  evict --namespace NS [--keys HEX,..] [--drop]   demote (or drop) blocks\n"
    "  flush [--namespace NS] [--max-ms MS]   make hot blocks durable in the cold tier;\n"
    "        each call stops near its deadline (or after MS) and reports progress;\n"
    "        kvtier loops until done, one progress line per call\n"
    "  drop-namespace --namespace NS [--force]\n"
    "        removes every block of NS and NS itself from this server (AllBlocksCleared);\n"
    "        refused while leases of NS are in force unless --force\n"
    "  recover [--verify]   scan this server's cold slab and re-create the index and\n"
    "        namespace records it lost (docs/recovery.md); --verify only reports what a\n"
    "        rebuild would do. Operator token; reads the whole slab (call deadline:\n"
    "        --timeout-ms, default 1 hour)\n";

std::string JsonEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

const char* TierName(v1::Tier t) {
  switch (t) {
    case v1::TIER_HOT: return "hot";
    case v1::TIER_COLD: return "cold";
    default: return "none";
  }
}

absl::Status RunNamespaces(const Flags& flags) {
  ASSIGN_OR_RETURN(auto client, ConnectFromFlags(flags));
  ASSIGN_OR_RETURN(auto resp, client->ListNamespaces());
  if (flags.Has("json")) {
    std::printf("%s\n", ProtoJson(resp).c_str());
    return absl::OkStatus();
  }
  std::vector<std::vector<std::string>> rows = {
      {"NAMESPACE", "TENANT", "MODEL", "LAYOUT", "CODEC", "BYTES/BLOCK", "BYTES/TOKEN"}};
  for (const auto& spec : resp.namespaces()) {
    const auto& l = spec.layout();
    std::string layout = absl::StrFormat("L%u H%u D%u T%u %s sinks%u", l.num_layers(),
                                         l.num_kv_heads(), l.head_dim(), l.tokens_per_block(),
                                         l.dtype() == v1::DTYPE_BF16 ? "bf16" : "fp16",
                                         l.sink_tokens());
    auto kl = client::FromProto(l);
    rows.push_back({spec.name(), spec.tenant().empty() ? "default" : spec.tenant(),
                    spec.model_id(), layout, CodecLabel(spec.codec()),
                    kl.ok() ? HumanBytes(kl->BytesPerBlock()) : "?",
                    kl.ok() ? absl::StrCat(kl->BytesPerToken()) : "?"});
  }
  PrintTable(rows);
  return absl::OkStatus();
}

// Finds namespace `name` on the server. NOT_FOUND if absent.
absl::StatusOr<v1::NamespaceSpec> FindNamespace(Client& client, const std::string& name) {
  ASSIGN_OR_RETURN(auto resp, client.ListNamespaces());
  for (const auto& spec : resp.namespaces()) {
    if (spec.name() == name) return spec;
  }
  return absl::NotFoundError(absl::StrCat("namespace '", name, "' is not registered"));
}

// Builds a spec from --layout LxHxDxT, --dtype, --codec, --tenant, --model, --sinks.
absl::StatusOr<v1::NamespaceSpec> SpecFromFlags(const Flags& flags, const std::string& name) {
  kv::Layout layout;
  const std::string ltext = flags.GetString("layout", "4x2x64x16");
  std::vector<std::string> parts = absl::StrSplit(ltext, 'x');
  uint32_t dims[4];
  if (parts.size() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("--layout expects LAYERSxKV_HEADSxHEAD_DIMxTOKENS, got '", ltext, "'"));
  }
  for (int i = 0; i < 4; ++i) {
    if (!absl::SimpleAtoi(parts[i], &dims[i])) {
      return absl::InvalidArgumentError(absl::StrCat("--layout: '", parts[i], "' is not a number"));
    }
  }
  layout.num_layers = dims[0];
  layout.num_kv_heads = dims[1];
  layout.head_dim = dims[2];
  layout.tokens_per_block = dims[3];
  const std::string dtype = flags.GetString("dtype", "fp16");
  if (dtype == "fp16") layout.dtype = kv::Dtype::kFp16;
  else if (dtype == "bf16") layout.dtype = kv::Dtype::kBf16;
  else return absl::InvalidArgumentError(absl::StrCat("--dtype must be fp16 or bf16, got '", dtype, "'"));
  ASSIGN_OR_RETURN(int64_t sinks, flags.GetInt("sinks", 4));
  layout.sink_tokens = static_cast<uint32_t>(sinks);
  RETURN_IF_ERROR(layout.Validate());
  v1::NamespaceSpec spec;
  spec.set_name(name);
  spec.set_tenant(flags.GetString("tenant", ""));
  spec.set_model_id(flags.GetString("model", ""));
  *spec.mutable_layout() = client::ToProto(layout);
  if (flags.Has("codec")) {
    ASSIGN_OR_RETURN(kv::CodecId codec, kv::ParseCodecName(flags.GetString("codec", "")));
    spec.set_codec(static_cast<v1::Codec>(codec));
  }
  return spec;
}

absl::StatusOr<std::vector<std::string>> ParseHexKeys(const std::string& text) {
  std::vector<std::string> keys;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    ASSIGN_OR_RETURN(auto key, client::KeyFromHex(std::string_view(part.data(), part.size())));
    keys.push_back(std::move(key));
  }
  if (keys.empty()) return absl::InvalidArgumentError("--keys is empty");
  return keys;
}

// Token ids from a file: whitespace- or comma-separated unsigned integers.
absl::StatusOr<std::vector<uint32_t>> ReadTokens(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("--tokens: cannot open '", path, "'"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<uint32_t> tokens;
  for (absl::string_view part : absl::StrSplit(text, absl::ByAnyChar(" \t\r\n,[]"),
                                               absl::SkipEmpty())) {
    uint32_t t;
    if (!absl::SimpleAtoi(part, &t)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tokens: '", part, "' in '", path, "' is not a token id"));
    }
    tokens.push_back(t);
  }
  return tokens;
}

struct Sequence {
  std::vector<std::string> keys;
  uint64_t seed = 0;
};

// Keys of the sequence named by --keys, --tokens or --generate.
absl::StatusOr<Sequence> SequenceFromFlags(const Flags& flags, const v1::NamespaceSpec& spec) {
  Sequence seq;
  if (flags.Has("keys")) {
    ASSIGN_OR_RETURN(seq.keys, ParseHexKeys(flags.GetString("keys", "")));
    return seq;
  }
  client::PrefixKeyParams params;
  params.namespace_name = spec.name();
  params.tenant = spec.tenant();
  params.tokens_per_block = spec.layout().tokens_per_block();
  params.extra = flags.GetString("extra", "");
  std::vector<uint32_t> tokens;
  if (flags.Has("tokens")) {
    ASSIGN_OR_RETURN(tokens, ReadTokens(flags.GetString("tokens", "")));
  } else if (flags.Has("generate")) {
    ASSIGN_OR_RETURN(int64_t n, flags.GetInt("generate", 1));
    ASSIGN_OR_RETURN(int64_t seed, flags.GetInt("seed", 1));
    ASSIGN_OR_RETURN(int64_t shared, flags.GetInt("shared-prefix", 0));
    if (n < 1 || n > 100000) return absl::InvalidArgumentError("--generate must be in 1..100000");
    seq.seed = static_cast<uint64_t>(seed);
    tokens = tools::SyntheticTokens(seq.seed, static_cast<uint32_t>(n),
                                     static_cast<uint32_t>(shared), params.tokens_per_block);
  } else {
    return absl::InvalidArgumentError("give one of --keys, --tokens or --generate");
  }
  ASSIGN_OR_RETURN(seq.keys, client::PrefixKeysForTokens(params, tokens));
  if (seq.keys.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fewer tokens than one block (", params.tokens_per_block, " tokens)"));
  }
  return seq;
}

absl::Status RunLookup(const Flags& flags) {
  ASSIGN_OR_RETURN(auto client, ConnectFromFlags(flags));
  const std::string ns = flags.GetString("namespace", "");
  if (ns.empty()) return absl::InvalidArgumentError("--namespace is required");
  v1::NamespaceSpec spec;
  if (!flags.Has("keys")) {
    ASSIGN_OR_RETURN(spec, FindNamespace(*client, ns));
  }
  ASSIGN_OR_RETURN(Sequence seq, SequenceFromFlags(flags, spec));
  ASSIGN_OR_RETURN(auto resp, client->Lookup(ns, seq.keys, flags.Has("local-only")));
  if (flags.Has("json")) {
    std::string out = absl::StrCat("{\"namespace\":\"", JsonEscape(ns),
                                   "\",\"prefix_blocks\":", resp.prefix_blocks(),
                                   ",\"requested_blocks\":", seq.keys.size(), ",\"blocks\":[");
    for (size_t i = 0; i < seq.keys.size(); ++i) {
      const v1::BlockLocation loc = i < static_cast<size_t>(resp.blocks_size())
                                         ? resp.blocks(i) : v1::BlockLocation();
      absl::StrAppend(&out, i ? "," : "", "{\"key\":\"", client::KeyToHex(seq.keys[i]),
                      "\",\"tier\":\"", TierName(loc.tier()), "\",\"owner\":\"",
                      JsonEscape(loc.owner()), "\"}");
    }
    out += "]}";
    std::printf("%s\n", out.c_str());
    return absl::OkStatus();
  }
  std::printf("%u of %zu leading blocks cached (%s)\n", resp.prefix_blocks(), seq.keys.size(),
              Pct(seq.keys.empty() ? 0 : double(resp.prefix_blocks()) / seq.keys.size()).c_str());
  std::vector<std::vector<std::string>> rows = {{"BLOCK", "KEY", "TIER", "OWNER"}};
  for (size_t i = 0; i < seq.keys.size(); ++i) {
    const v1::BlockLocation loc =
        i < static_cast<size_t>(resp.blocks_size()) ? resp.blocks(i) : v1::BlockLocation();
    rows.push_back({absl::StrCat(i), client::KeyToHex(seq.keys[i]), TierName(loc.tier()),
                    loc.owner()});
  }
  PrintTable(rows);
  return absl::OkStatus();
}

absl::Status RunPut(const Flags& flags) {
  const std::string ns = flags.GetString("namespace", "");
  if (ns.empty()) return absl::InvalidArgumentError("--namespace is required");
  ASSIGN_OR_RETURN(auto client, ConnectFromFlags(flags));
  auto existing = FindNamespace(*client, ns);
  if (!existing.ok() && !absl::IsNotFound(existing.status())) return existing.status();
  v1::NamespaceSpec spec;
  bool created = false;
  if (existing.ok() && !flags.Has("layout") && !flags.Has("codec") && !flags.Has("dtype")) {
    spec = *existing;
  } else {
    ASSIGN_OR_RETURN(spec, SpecFromFlags(flags, ns));
    // Registers it, or checks the flags against the stored namespace (FAILED_PRECONDITION
    // naming the field on a mismatch).
    ASSIGN_OR_RETURN(auto reg, client->RegisterNamespace(spec));
    created = reg.created();
    spec = reg.spec();
  }
  ASSIGN_OR_RETURN(kv::Layout layout, client::FromProto(spec.layout()));

  std::vector<client::PutBlock> blocks;
  std::vector<std::string> payloads;
  client::PutOptions put_options;
  if (flags.Has("file")) {
    const std::string path = flags.GetString("file", "");
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("--file: cannot open '", path, "'"));
    payloads.emplace_back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    client::PutBlock b;
    ASSIGN_OR_RETURN(b.key, client::KeyFromHex(flags.GetString("key", "")));
    if (flags.Has("parent")) {
      ASSIGN_OR_RETURN(b.parent_key, client::KeyFromHex(flags.GetString("parent", "")));
    }
    ASSIGN_OR_RETURN(int64_t index, flags.GetInt("index", 0));
    b.block_index = static_cast<uint32_t>(index);
    blocks.push_back(b);
    put_options.format =
        flags.Has("raw") ? v1::PAYLOAD_FORMAT_RAW : v1::PAYLOAD_FORMAT_ENCODED;
  } else {
    ASSIGN_OR_RETURN(Sequence seq, SequenceFromFlags(flags, spec));
    for (size_t i = 0; i < seq.keys.size(); ++i) {
      // Shared-prefix blocks carry the same KV whatever the seed.
      ASSIGN_OR_RETURN(int64_t shared, flags.GetInt("shared-prefix", 0));
      const uint64_t data_seed = static_cast<int64_t>(i) < shared ? 0 : seq.seed;
      payloads.push_back(tools::SyntheticRawBlock(layout, data_seed, static_cast<uint32_t>(i)));
      client::PutBlock b;
      b.key = seq.keys[i];
      b.parent_key = i == 0 ? "" : seq.keys[i - 1];
      b.block_index = static_cast<uint32_t>(i);
      blocks.push_back(b);
    }
    put_options.format = v1::PAYLOAD_FORMAT_RAW;
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    blocks[i].payload = kv::AsBytes(payloads[i]);
  }
  ASSIGN_OR_RETURN(auto result, client->PutBlocks(ns, blocks, put_options));
  uint64_t sent = 0;
  for (const auto& p : payloads) sent += p.size();
  if (flags.Has("json")) {
    std::printf("{\"namespace\":\"%s\",\"created\":%s,\"blocks_stored\":%u,\"bytes_sent\":%llu,"
                "\"bytes_stored\":%llu,\"keys\":[",
                JsonEscape(ns).c_str(), created ? "true" : "false", result.blocks_stored,
                static_cast<unsigned long long>(sent),
                static_cast<unsigned long long>(result.bytes_stored));
    for (size_t i = 0; i < blocks.size(); ++i) {
      std::printf("%s\"%s\"", i ? "," : "", client::KeyToHex(blocks[i].key).c_str());
    }
    std::printf("]}\n");
    return absl::OkStatus();
  }
  if (created) std::printf("registered namespace %s\n", ns.c_str());
  std::printf("stored %u blocks: %s sent, %s stored (%s)\n", result.blocks_stored,
              HumanBytes(sent).c_str(), HumanBytes(result.bytes_stored).c_str(),
              CodecLabel(spec.codec()).c_str());
  for (size_t i = 0; i < blocks.size(); ++i) {
    std::printf("  %zu %s\n", i, client::KeyToHex(blocks[i].key).c_str());
  }
  return absl::OkStatus();
}

absl::Status RunGet(const Flags& flags) {
  const std::string ns = flags.GetString("namespace", "");
  if (ns.empty()) return absl::InvalidArgumentError("--namespace is required");
  ASSIGN_OR_RETURN(auto client, ConnectFromFlags(flags));
  v1::NamespaceSpec spec;
  if (!flags.Has("keys")) {
    ASSIGN_OR_RETURN(spec, FindNamespace(*client, ns));
  }
  ASSIGN_OR_RETURN(Sequence seq, SequenceFromFlags(flags, spec));
  client::GetOptions opts;
  opts.format = flags.Has("raw") ? v1::PAYLOAD_FORMAT_RAW : v1::PAYLOAD_FORMAT_ENCODED;
  ASSIGN_OR_RETURN(auto blocks, client->GetBlocks(ns, seq.keys, opts));
  if (flags.Has("out") && !blocks.empty() && blocks[0].info.found()) {
    const std::string path = flags.GetString("out", "");
    std::ofstream out(path, std::ios::binary);
    out.write(blocks[0].data.data(), static_cast<std::streamsize>(blocks[0].data.size()));
    if (!out) return absl::InternalError(absl::StrCat("--out: cannot write '", path, "'"));
  }
  size_t found = 0;
  for (const auto& b : blocks) found += b.info.found() ? 1 : 0;
  if (flags.Has("json")) {
    std::string out = absl::StrCat("{\"namespace\":\"", JsonEscape(ns), "\",\"found\":", found,
                                   ",\"blocks\":[");
    for (size_t i = 0; i < blocks.size(); ++i) {
      const auto& info = blocks[i].info;
      absl::StrAppend(&out, i ? "," : "", "{\"key\":\"", client::KeyToHex(seq.keys[i]),
                      "\",\"found\":", info.found() ? "true" : "false", ",\"size\":", info.size(),
                      ",\"tier\":\"", TierName(info.tier()), "\",\"codec\":\"",
                      CodecLabel(info.codec()), "\"}");
    }
    out += "]}";
    std::printf("%s\n", out.c_str());
    return absl::OkStatus();
  }
  std::printf("%zu of %zu blocks found\n", found, blocks.size());
  std::vector<std::vector<std::string>> rows = {{"BLOCK", "KEY", "FOUND", "TIER", "SIZE", "CODEC"}};
  for (size_t i = 0; i < blocks.size(); ++i) {
    const auto& info = blocks[i].info;
    rows.push_back({absl::StrCat(i), client::KeyToHex(seq.keys[i]), info.found() ? "yes" : "no",
                    TierName(info.tier()), HumanBytes(info.size()),
                    info.found() ? CodecLabel(info.codec()) : ""});
  }
  PrintTable(rows);
  return absl::OkStatus();
}

absl::Status RunEvict(const Flags& flags) {
  const std::string ns = flags.GetString("namespace", "");
  if (ns.empty()) return absl::InvalidArgumentError("--namespace is required");
  ASSIGN_OR_RETURN(auto client, ConnectFromFlags(flags));
  std::vector<std::string> keys;
  if (flags.Has("keys")) {
    ASSIGN_OR_RETURN(keys, ParseHexKeys(flags.GetString("keys", "")));
  }
  ASSIGN_OR_RETURN(uint64_t n, client->Evict(ns, keys, flags.Has("drop")));
  if (flags.Has("json")) {
    std::printf("{\"namespace\":\"%s\",\"blocks\":%llu}\n", JsonEscape(ns).c_str(),
                static_cast<unsigned long long>(n));
  } else {
    std::printf("%s %llu blocks\n", flags.Has("drop") ? "dropped" : "evicted",
                static_cast<unsigned long long>(n));
  }
  return absl::OkStatus();
}

absl::Status RunDropNamespace(const Flags& flags) {
  const std::string ns = flags.GetString("namespace", "");
  if (ns.empty()) return absl::InvalidArgumentError("--namespace is required");
  ASSIGN_OR_RETURN(auto client, ConnectFromFlags(flags));
  ASSIGN_OR_RETURN(uint64_t n, client->DropNamespace(ns, flags.Has("force")));
  if (flags.Has("json")) {
    std::printf("{\"namespace\":\"%s\",\"blocks\":%llu}\n", JsonEscape(ns).c_str(),
                static_cast<unsigned long long>(n));
  } else {
    std::printf("dropped namespace %s (%llu blocks)\n", ns.c_str(),
                static_cast<unsigned long long>(n));
  }
  return absl::OkStatus();
}

absl::Status RunFlush(const Flags& flags) {
  ASSIGN_OR_RETURN(auto client, ConnectFromFlags(flags));
  ASSIGN_OR_RETURN(int64_t max_ms, flags.GetInt("max-ms", 0));
  if (max_ms < 0 || max_ms > 0xffffffffll) {
    return absl::InvalidArgumentError("--max-ms must be 0..4294967295");
  }
  const std::string ns = flags.GetString("namespace", "");
  const bool json = flags.Has("json");
  uint64_t total = 0;
  for (int call = 1;; ++call) {
    ASSIGN_OR_RETURN(v1::FlushResponse r, client->FlushStep(ns, static_cast<uint32_t>(max_ms)));
    total += r.flushed_blocks();
    if (json) {
      std::printf("{\"call\":%d,\"flushed_blocks\":%llu,\"remaining_blocks\":%llu,"
                  "\"remaining_bytes\":%llu,\"done\":%s}\n",
                  call, static_cast<unsigned long long>(r.flushed_blocks()),
                  static_cast<unsigned long long>(r.remaining_blocks()),
                  static_cast<unsigned long long>(r.remaining_bytes()), r.done() ? "true" : "false");
    } else if (r.done()) {
      std::printf("flushed %llu blocks in %d calls; %llu unflushed blocks (%llu bytes) remain\n",
                  static_cast<unsigned long long>(total), call,
                  static_cast<unsigned long long>(r.remaining_blocks()),
                  static_cast<unsigned long long>(r.remaining_bytes()));
    } else {
      std::printf("call %d: flushed %llu blocks, %llu remain (%llu bytes)\n", call,
                  static_cast<unsigned long long>(r.flushed_blocks()),
                  static_cast<unsigned long long>(r.remaining_blocks()),
                  static_cast<unsigned long long>(r.remaining_bytes()));
    }
    std::fflush(stdout);
    if (r.done()) return absl::OkStatus();
    if (r.flushed_blocks() == 0) {
      return absl::DeadlineExceededError(
          "flush: a call wrote nothing before its deadline; raise --timeout-ms");
    }
  }
}

absl::Status RunRecover(const Flags& flags) {
  ASSIGN_OR_RETURN(auto client, ConnectFromFlags(flags));
  client::CallOptions call;
  ASSIGN_OR_RETURN(call.deadline_ms, flags.GetInt("timeout-ms", 3600 * 1000));
  const bool verify = flags.Has("verify");
  ASSIGN_OR_RETURN(v1::RecoverResponse r, client->Recover(verify, call));
  auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  if (flags.Has("json")) {
    std::printf("%s\n", ProtoJson(r).c_str());
    return absl::OkStatus();
  }
  std::printf("%s: %llu bytes of slab scanned in %.2f s, %llu extents verified\n",
              verify ? "verify (nothing changed)" : "rebuild", u(r.scan_bytes()), r.seconds(),
              u(r.extents_scanned()));
  std::printf("index records: %llu verified, %llu %s, %llu naming a damaged extent\n",
              u(r.records_verified()), u(r.records_recreated()),
              verify ? "to re-create" : "re-created", u(r.damaged_records()));
  std::printf("extents %s: %llu damaged, %llu stale copies, %llu orphans; %llu deleted "
              "extents seen\n",
              verify ? "to free" : "freed", u(r.damaged_extents()), u(r.stale_copies()),
              u(r.orphan_blocks()), u(r.deleted_extents()));
  std::printf("namespace records %s: %llu\n", verify ? "to re-create" : "re-created",
              u(r.namespaces_recreated()));
  return absl::OkStatus();
}

}  // namespace

int RunAdmin(int argc, char** argv) {
  const std::string_view command = argv[0];
  Flags flags = Flags::Parse(argc, argv, 1,
                              {"json", "watch", "raw", "drop", "local-only", "cluster", "tls",
                               "help", "force", "verify"});
  if (flags.Has("help") && command != "stats") {  // stats explains its own columns
    std::fputs(kAdminUsage, stdout);
    return 0;
  }
  absl::Status known = flags.CheckKnown(
      {"server", "auth-token", "json", "timeout-ms", "namespace", "watch", "interval", "cluster", "keys", "tokens",
       "generate", "seed", "shared-prefix", "extra", "local-only", "layout", "dtype", "codec",
       "tenant", "model", "sinks", "key", "parent", "index", "file", "raw", "out", "drop",
       "tls", "tls-ca", "tls-cert", "tls-key", "tls-server-name", "max-ms", "help", "force",
       "verify"});
  if (!known.ok() || !flags.positional().empty()) {
    std::fprintf(stderr, "kvtier %s: %s\n\n%s", std::string(command).c_str(),
                 known.ok() ? "unexpected positional argument" : std::string(known.message()).c_str(),
                 kAdminUsage);
    return 2;
  }
  absl::Status status;
  if (command == "stats") status = RunStats(flags);
  else if (command == "namespaces") status = RunNamespaces(flags);
  else if (command == "lookup") status = RunLookup(flags);
  else if (command == "put") status = RunPut(flags);
  else if (command == "get") status = RunGet(flags);
  else if (command == "evict") status = RunEvict(flags);
  else if (command == "flush") status = RunFlush(flags);
  else if (command == "drop-namespace") status = RunDropNamespace(flags);
  else if (command == "recover") status = RunRecover(flags);
  else status = absl::InvalidArgumentError("unknown command");
  if (!status.ok()) {
    std::fprintf(stderr, "kvtier %s: %s\n", std::string(command).c_str(),
                 status.ToString().c_str());
    return absl::IsInvalidArgument(status) ? 2 : 1;
  }
  return 0;
}

}  // namespace kvtier::cli
