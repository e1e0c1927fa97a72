// The active messages of kvtier's UCX data plane (docs/design.md §3 "Cross-node UCX"):
// ids and headers.
// Headers are fixed-size plain structs sent in the host's byte order (kvtier runs on
// little-endian hosts only). gRPC carries every request except a Put whose call frame fits
// one AM header (kCall, below); these carry payloads, that frame and the session handshake.
//
//   client -> server  kHello      HelloHeader, no payload
//   server -> client  kHelloReply HelloReplyHeader, no payload (session valid when ok)
//   client -> server  kPutData    PutDataHeader + block `index` of the Put naming
//                                 (session, transfer) in its PutHeader
//   server -> client  kGetData    GetDataHeader + the payload of key `index` of the Get
//                                 naming `transfer` in its GetRequest
//   client -> server  kCall       a call frame (protocol/shm_wire.h: FrameHeader + the
//                                 serialized PutRequest naming the session and a transfer)
//                                 as the AM header, no payload; only to a server whose
//                                 hello reply has kFeatureCalls, and only when the frame
//                                 fits Worker::max_header()
//   server -> client  kCallReply  the reply frame (ReplyHeader + message + details +
//                                 PutResponse) as the AM header, no payload
//
// A call runs as the session of the endpoint that sent it (the identity the first gRPC
// call naming the session bound; with auth on, a session no gRPC call named yet is
// refused UNAUTHENTICATED and the client sends that Put's header over gRPC instead).
// The server accepts kPutData only from the endpoint its session was issued on, so an id
// alone cannot inject payloads from another connection; kGetData goes only to the
// session's endpoint.
#ifndef KVTIER_UCX_AM_PROTOCOL_H_
#define KVTIER_UCX_AM_PROTOCOL_H_

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace kvtier::ucx {

inline constexpr uint16_t kAmHello = 1;
inline constexpr uint16_t kAmHelloReply = 2;
inline constexpr uint16_t kAmPutData = 3;
inline constexpr uint16_t kAmGetData = 4;
inline constexpr uint16_t kAmCall = 5;
inline constexpr uint16_t kAmCallReply = 6;

// HelloReplyHeader.features bits.
inline constexpr uint32_t kFeatureCalls = 1;  // the server answers kCall frames

inline constexpr char kAmMagic[8] = {'K', 'V', 'T', 'U', 'C', 'X', '0', '1'};
inline constexpr size_t kSessionBytes = 16;
inline constexpr size_t kInstanceBytes = 16;

struct HelloHeader {
  char magic[8];
  uint8_t instance[kInstanceBytes];  // UcxOffer.instance_id of the server meant
};

struct HelloReplyHeader {
  char magic[8];
  uint32_t ok;        // 1: session valid
  uint32_t features;  // kFeature* bits (0 from a server older than them)
  uint8_t session[kSessionBytes];
};

struct PutDataHeader {
  uint8_t session[kSessionBytes];
  uint64_t transfer;
  uint32_t index;
  uint32_t reserved;
};

struct GetDataHeader {
  uint64_t transfer;
  uint32_t index;
  uint32_t reserved;
};

// The header as bytes for Worker::Send.
template <typename T>
std::string HeaderBytes(const T& h) {
  return std::string(reinterpret_cast<const char*>(&h), sizeof(T));
}

// Parses a header of exactly sizeof(T) bytes; nullopt otherwise.
template <typename T>
std::optional<T> ParseHeader(std::string_view bytes) {
  if (bytes.size() != sizeof(T)) return std::nullopt;
  T h;
  std::memcpy(&h, bytes.data(), sizeof(T));
  return h;
}

}  // namespace kvtier::ucx

#endif  // KVTIER_UCX_AM_PROTOCOL_H_
