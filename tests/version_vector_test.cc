// Version vectors (server/version_vector.h): the map every anti-entropy,
// quiescence and snapshot decision is made from.
#include "server/version_vector.h"

#include <gtest/gtest.h>

#include "base/json.h"

namespace reckon::server {
namespace {

const OriginKey kA{"a", 1}, kA2{"a", 2}, kB{"b", 7};

TEST(VersionVector, AnOriginIsOneProcessLifeOfOneWorker) {
  EXPECT_EQ(kA.ToString(), "a#1");
  EXPECT_NE(kA, kA2);  // a restart is a new origin
  EXPECT_LT(kA, kA2);
  EXPECT_LT(kA2, kB);  // ordered by node, then incarnation
  v1::Origin proto;
  proto.set_node_id("b");
  proto.set_incarnation(7);
  EXPECT_EQ(KeyOf(proto), kB);
}

TEST(VersionVector, AbsentOriginsCountAsZero) {
  const VersionMap v = {{kA, 5}};
  EXPECT_EQ(SeqOf(v, kA), 5u);
  EXPECT_EQ(SeqOf(v, kB), 0u);
  EXPECT_TRUE(SameVersions(v, {{kA, 5}, {kB, 0}}));
  EXPECT_TRUE(SameVersions({{kB, 0}}, {}));
  EXPECT_FALSE(SameVersions(v, {{kA, 4}}));
  EXPECT_FALSE(SameVersions(v, {{kA, 5}, {kB, 1}}));
  EXPECT_FALSE(SameVersions({}, v));
}

TEST(VersionVector, ProtoRoundTripKeepsEveryEntry) {
  const VersionMap v = {{kA, 5}, {kA2, 1}, {kB, 1ull << 40}};
  v1::VersionVector proto;
  ToProto(v, &proto);
  EXPECT_EQ(proto.entries_size(), 3);
  EXPECT_EQ(FromProto(proto), v);
  v1::VersionVector empty;
  ToProto({}, &empty);
  EXPECT_TRUE(FromProto(empty).empty());
}

TEST(VersionVector, ReadsAsAJsonObjectEvenWithOddNames) {
  // Node ids are validated at the flag, but the log line must stay JSON.
  const VersionMap v = {{kA, 5}, {{"q\"uote", 3}, 2}};
  absl::StatusOr<base::Json> json = base::ParseJson(VersionJson(v), "version vector");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->at("a#1"), 5);
  EXPECT_EQ(json->at("q\"uote#3"), 2);
  EXPECT_EQ(VersionJson({}), "{}");
}

}  // namespace
}  // namespace reckon::server
