// --peers resolution (worker/gossip_peers.h ResolvePeers): every address a
// name has, as ip:port, once each; a malformed entry is refused by name.
#include <gtest/gtest.h>

#include <algorithm>

#include "worker/gossip_peers.h"

namespace reckon::worker {
namespace {

bool Has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(ResolvePeers, LiteralsPassThroughAsIpAndPort) {
  absl::StatusOr<std::vector<std::string>> peers =
      ResolvePeers("10.0.0.1:7070, 10.0.0.2:7071,[::1]:7072");
  ASSERT_TRUE(peers.ok()) << peers.status();
  EXPECT_EQ(*peers, (std::vector<std::string>{"10.0.0.1:7070", "10.0.0.2:7071", "[::1]:7072"}));
}

TEST(ResolvePeers, ANameBecomesEveryAddressItHas) {
  // localhost is in /etc/hosts on every machine this runs on: no DNS.
  absl::StatusOr<std::vector<std::string>> peers = ResolvePeers("localhost:7070");
  ASSERT_TRUE(peers.ok()) << peers.status();
  ASSERT_FALSE(peers->empty());
  EXPECT_TRUE(Has(*peers, "127.0.0.1:7070") || Has(*peers, "[::1]:7070")) << peers->size();
  for (const std::string& p : *peers) EXPECT_NE(p.find(":7070"), std::string::npos) << p;
}

TEST(ResolvePeers, EachAddressOnceAndEmptyEntriesSkipped) {
  absl::StatusOr<std::vector<std::string>> peers =
      ResolvePeers("10.0.0.1:7070,,10.0.0.1:7070, ,10.0.0.1:7071");
  ASSERT_TRUE(peers.ok()) << peers.status();
  EXPECT_EQ(*peers, (std::vector<std::string>{"10.0.0.1:7070", "10.0.0.1:7071"}));
  absl::StatusOr<std::vector<std::string>> none = ResolvePeers("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(ResolvePeers, AnEntryWithoutAValidPortIsRefusedByName) {
  for (const char* bad : {"10.0.0.1", "10.0.0.1:", "10.0.0.1:0", "10.0.0.1:65536", "host:http",
                          "10.0.0.1:7070,other"}) {
    absl::StatusOr<std::vector<std::string>> peers = ResolvePeers(bad);
    ASSERT_FALSE(peers.ok()) << bad;
    EXPECT_EQ(peers.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(peers.status().message().find("is not host:port"), std::string::npos)
        << peers.status();
  }
}

}  // namespace
}  // namespace reckon::worker
