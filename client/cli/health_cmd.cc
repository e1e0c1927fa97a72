// `kvtier health`: one grpc.health.v1.Health/Check, exit 0 when the server answers
// SERVING. Meant for exec probes of a TLS server (the kubelet's native gRPC probe speaks
// plaintext only; deploy/components/tls). Health needs no tenant credentials.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "client/cli/commands.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/client_unary_call.h"
#include "grpcpp/impl/rpc_method.h"
#include "protocol/tls.h"
#include "tools/flags.h"

namespace kvtier::cli {

using tools::Flags;
using tools::TlsFlags;
using tools::TlsFromFlags;

namespace {

constexpr char kHealthUsage[] =
    "usage: kvtier health [--server HOST:PORT] [--service NAME] [--timeout-ms N]\n"
    "                     [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]\n"
    "                     [--tls-server-name NAME] [--tls]\n"
    "Asks grpc.health.v1.Health/Check for NAME (default \"\": the whole server); exits 0\n"
    "when SERVING, 1 otherwise (printing why).\n";

// grpc.health.v1.HealthCheckRequest{service} and the SERVING response, hand-encoded:
// field 1, length-delimited / varint.
std::string EncodeRequest(const std::string& service) {
  if (service.empty()) return "";
  return std::string(1, '\x0a') + static_cast<char>(service.size()) + service;
}
constexpr char kServing[] = "\x08\x01";

}  // namespace

int RunHealth(int argc, char** argv) {
  Flags flags = Flags::Parse(argc, argv, 1, {"tls", "help"});
  if (flags.Has("help")) {
    std::fputs(kHealthUsage, stdout);
    return 0;
  }
  absl::Status known = flags.CheckKnown({"server", "service", "timeout-ms", "tls", "tls-ca",
                                         "tls-cert", "tls-key", "tls-server-name", "help"});
  auto timeout = flags.GetInt("timeout-ms", 2000);
  const std::string service = flags.GetString("service", "");
  if (!known.ok() || !timeout.ok() || !flags.positional().empty() || service.size() > 127) {
    std::fprintf(stderr, "kvtier health: %s\n\n%s",
                 !known.ok() ? std::string(known.message()).c_str() : "bad arguments",
                 kHealthUsage);
    return 2;
  }
  const TlsFlags tls = TlsFromFlags(flags);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  grpc::ChannelArguments args;
  if (tls.tls) {
    const protocol::TlsFiles files{
        .cert_file = tls.cert_file, .key_file = tls.key_file, .ca_file = tls.ca_file};
    if (absl::Status s = protocol::CheckTlsFiles(files, "--tls"); !s.ok()) {
      std::fprintf(stderr, "kvtier health: %s\n", std::string(s.message()).c_str());
      return 2;
    }
    credentials = protocol::ChannelTlsCredentials(files);
    if (!tls.server_name.empty()) args.SetSslTargetNameOverride(tls.server_name);
  }
  auto channel =
      grpc::CreateCustomChannel(flags.GetString("server", "127.0.0.1:50051"), credentials, args);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(*timeout));
  const std::string request = EncodeRequest(service);
  grpc::Slice slice(request);
  grpc::ByteBuffer req(&slice, 1), resp;
  grpc::internal::RpcMethod method("/grpc.health.v1.Health/Check",
                                   grpc::internal::RpcMethod::NORMAL_RPC);
  grpc::Status status = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel.get(), method, &ctx, req, &resp);
  if (!status.ok()) {
    std::fprintf(stderr, "kvtier health: %s\n", status.error_message().c_str());
    return 1;
  }
  std::string body;
  std::vector<grpc::Slice> slices;
  if (resp.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) {
      body.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  if (body != std::string(kServing, 2)) {
    std::fprintf(stderr, "kvtier health: not serving\n");
    return 1;
  }
  std::puts("SERVING");
  return 0;
}

}  // namespace kvtier::cli
