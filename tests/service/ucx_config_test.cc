// The ucx block of ServerConfig: flags, validation (the TLS opt-in) and start-up.
#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "service/config.h"
#include "service/ucx_put.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::service {
namespace {

using ::testing::HasSubstr;

TEST(UcxConfigTest, FlagsSetTheUcxBlock) {
  auto cl = ParseCommandLine({"--ucx", "--ucx-port", "0", "--ucx-transports", "tcp"});
  ASSERT_OK(cl);
  EXPECT_TRUE(cl->config.ucx().enabled());
  EXPECT_EQ(cl->config.ucx().port(), 0u);
  EXPECT_EQ(cl->config.ucx().transports(), "tcp");
  auto off = ParseCommandLine({});
  ASSERT_OK(off);
  EXPECT_FALSE(off->config.ucx().enabled());
  auto bad = ParseCommandLine({"--ucx", "--ucx-port", "70000"});
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
}

TEST(UcxConfigTest, UcxWithTlsNeedsTheOperatorsOptIn) {
  v1::ServerConfig c;
  c.mutable_tls()->set_cert_file("server.pem");
  c.mutable_ucx()->set_enabled(true);
  absl::Status s = ValidateUcxConfig(c);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("allow_plaintext_with_tls"));
  c.mutable_ucx()->set_allow_plaintext_with_tls(true);
  EXPECT_OK(ValidateUcxConfig(c));
  c.mutable_ucx()->set_enabled(false);
  c.mutable_ucx()->set_allow_plaintext_with_tls(false);
  EXPECT_OK(ValidateUcxConfig(c));  // off: nothing to protect
}

TEST(UcxConfigTest, StartsOnlyWhenEnabledAndReportsItsPort) {
  setenv("UCX_TLS", "tcp", 1);
  v1::ServerConfig c;
  c.set_listen_address("127.0.0.1");
  auto none = StartUcxFromConfig(c, nullptr);
  ASSERT_OK(none);
  EXPECT_EQ(*none, nullptr);
  c.mutable_ucx()->set_enabled(true);
  auto on = StartUcxFromConfig(c, nullptr);
  ASSERT_OK(on);
  ASSERT_NE(*on, nullptr);
  EXPECT_GT((*on)->port(), 0);
  EXPECT_EQ((*on)->advertised_host(), "127.0.0.1");
  EXPECT_EQ((*on)->instance_id().size(), 16u);
  EXPECT_EQ((*on)->session_count(), 0u);
}

}  // namespace
}  // namespace kvtier::service
