// base/process.h FreeLoopbackPorts: the ports test clusters and `reckonctl
// local` give their workers. They are released before a worker binds them,
// so they must come from outside the kernel's ephemeral range: there, any
// outgoing connection (a worker dialling its peers) can take one first, and
// the worker then fails with "cannot listen" (seen in CI: a fault test's
// worker lost its port to its own cluster's connections).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <set>

#include "base/process.h"

namespace reckon::base {
namespace {

TEST(FreeLoopbackPorts, DistinctBindableAndOutsideTheEphemeralRange) {
  int low = 0, high = 0;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low >> high;
  ASSERT_GT(low, 1024) << "this test needs /proc/sys/net/ipv4/ip_local_port_range";
  for (int round = 0; round < 20; ++round) {
    absl::StatusOr<std::vector<int>> ports = FreeLoopbackPorts(8);
    ASSERT_TRUE(ports.ok()) << ports.status();
    ASSERT_EQ(ports->size(), 8u);
    EXPECT_EQ(std::set<int>(ports->begin(), ports->end()).size(), 8u);
    for (int port : *ports) {
      EXPECT_TRUE(port < low || port > high)
          << port << " is in the ephemeral range " << low << "-" << high;
      EXPECT_GT(port, 1024) << port;
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(port));
      EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << port;
      ::close(fd);
    }
  }
}

}  // namespace
}  // namespace reckon::base
