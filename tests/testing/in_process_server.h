// StartSmallServer: an in-process kvtierd (service::KvtierServer) for tests of the gRPC
// surface: 127.0.0.1 port 0, a real store under `data_dir` (8 MiB hot), two executor
// threads, 64 KiB messages, no shared-memory socket, and namespace "ns" registered with
// testing::SmallLayout(). Header-only: callers link kvtier_service themselves.
#ifndef KVTIER_TESTS_TESTING_IN_PROCESS_SERVER_H_
#define KVTIER_TESTS_TESTING_IN_PROCESS_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "kvtier/v1/kvtier.grpc.pb.h"
#include "protocol/convert.h"
#include "protocol/error_detail.h"
#include "service/config.h"
#include "service/server.h"
#include "tests/testing/layouts.h"

namespace kvtier::testing {

// The RegisterNamespace request StartSmallServer sends.
inline v1::RegisterNamespaceRequest SmallNamespaceRequest() {
  v1::RegisterNamespaceRequest req;
  req.mutable_spec()->set_name("ns");
  *req.mutable_spec()->mutable_layout() = protocol::ToProto(SmallLayout());
  return req;
}

// Starts the server with the open store; `configure` may adjust the defaulted config
// first (it is validated after). Returns the config's, start's or registration's error.
inline absl::StatusOr<std::unique_ptr<service::KvtierServer>> StartSmallServer(
    const std::string& data_dir,
    const std::function<void(v1::ServerConfig&)>& configure = nullptr) {
  ASSIGN_OR_RETURN(service::CommandLine cl,
                   service::ParseCommandLine({"--port", "0", "--data-dir", data_dir,
                                              "--hot-capacity", "8MiB", "--executor-threads",
                                              "2", "--max-message-bytes", "64KiB",
                                              "--shm-socket", "off"}));
  if (configure) configure(cl.config);
  RETURN_IF_ERROR(service::ValidateConfig(cl.config));
  ASSIGN_OR_RETURN(std::unique_ptr<service::KvtierServer> server,
                   service::KvtierServer::Start(cl.config));
  RETURN_IF_ERROR(server->OpenStore());
  auto stub = v1::KvCache::NewStub(
      grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials()));
  v1::RegisterNamespaceResponse resp;
  grpc::ClientContext ctx;
  const grpc::Status s = stub->RegisterNamespace(&ctx, SmallNamespaceRequest(), &resp);
  if (!s.ok()) return protocol::FromGrpcStatus("RegisterNamespace", s);
  return server;
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_IN_PROCESS_SERVER_H_
