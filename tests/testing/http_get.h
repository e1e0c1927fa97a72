// A minimal HTTP/1.0 GET against a loopback port, for scraping kvtierd's Prometheus
// /metrics endpoint in tests. Thread-safe (no shared state).
#ifndef KVTIER_TESTS_TESTING_HTTP_GET_H_
#define KVTIER_TESTS_TESTING_HTTP_GET_H_

#include <string>
#include <string_view>

namespace kvtier::testing {

// GET http://127.0.0.1:port<path>; returns the whole response (status line, headers and
// body), or "" when the connection fails.
std::string HttpGet(int port, std::string_view path = "/metrics");

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_HTTP_GET_H_
