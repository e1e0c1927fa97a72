// Hand-rolled protobuf framing for the payload-carrying messages of the kvtier data plane
// (kvtier.v1.PutRequest.chunk and kvtier.v1.GetResponse.chunk), so block payloads travel
// between caller memory and gRPC slices without being copied into protobuf `bytes`
// fields. The framing itself (chunk prefixes, SliceCursor, PlanChunks, GetStreamFramer)
// is protocol/frame.h; this header adds the Get stream parser that reads the GetHeader
// with protobuf. Used by both ends: the client (client/client.cc) and the server's Put /
// Get reactors (service/put_reactor.cc, service/get_reactor.cc). See docs/design.md §3
// Put / Get / Lookup data flow.
#ifndef KVTIER_PROTOCOL_WIRE_H_
#define KVTIER_PROTOCOL_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvtier/v1/kvtier.pb.h"
#include "protocol/frame.h"

namespace kvtier::protocol {

// Parses the server side of a Get stream. Feed each received GetResponse message as its
// list of byte spans (the gRPC slices, in order, not copied). The first message must be
// the header; the rest are chunks whose payload bytes are routed into the destination
// buffers of the found blocks, in header order.
// Thread-compatible.
class GetStreamParser {
 public:
  // Called once, when the header arrives, for every found block: returns the buffer the
  // block's `info.size()` bytes are written to. The span must be at least info.size()
  // bytes long and stay valid until the parser is done. An error aborts the parse.
  using DestinationFn =
      std::function<absl::StatusOr<std::span<uint8_t>>(size_t index,
                                                       const kvtier::v1::GetBlockInfo& info)>;

  explicit GetStreamParser(DestinationFn destination);
  // Not copyable or movable: the framer's header callback refers to this parser.
  GetStreamParser(const GetStreamParser&) = delete;
  GetStreamParser& operator=(const GetStreamParser&) = delete;

  // Consumes one message. INTERNAL naming the problem on a malformed message, a header
  // that does not parse, a chunk before the header, a second header, or more payload
  // bytes than the header announced; the destination's error otherwise.
  absl::Status Consume(std::span<const std::span<const uint8_t>> slices) {
    return framer_.Consume(slices);
  }

  // OK once the header arrived and every announced byte was received; INTERNAL (naming
  // the missing byte count) otherwise.
  absl::Status Finish() const { return framer_.Finish(); }

  bool has_header() const { return framer_.has_header(); }
  const kvtier::v1::GetHeader& header() const { return header_; }

 private:
  DestinationFn destination_;
  kvtier::v1::GetHeader header_;
  GetStreamFramer framer_;
};

}  // namespace kvtier::protocol

#endif  // KVTIER_PROTOCOL_WIRE_H_
