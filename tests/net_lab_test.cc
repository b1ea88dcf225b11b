// The network lab (ctl/net_lab.h): its link descriptions, and that its
// switch shapes real TCP the way it says (a rate is never exceeded, a delay
// is always paid, a partition cuts). The shaping tests need root and TUN and
// are skipped, saying why, elsewhere.
//
// The checks on time are one-sided bounds that hold on any machine, however
// loaded: a shaped link cannot carry more than its rate allows, and a
// connection cannot complete faster than one round trip. The lower bound on
// throughput is loose (a third of the rate) and only catches a broken switch.
#include "ctl/net_lab.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace reckon::ctl {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

TEST(LinkShapeText, ParsesEveryPropertyAndPrintsItBack) {
  absl::StatusOr<LinkShape> s =
      ParseLinkShape("rate=100mbit,delay=1ms,jitter=250us,loss=0.01,duplicate=0.02,queue=20ms");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->rate_bits_per_s, 1e8);
  EXPECT_EQ(s->delay, microseconds(1000));
  EXPECT_EQ(s->jitter, microseconds(250));
  EXPECT_EQ(s->loss, 0.01);
  EXPECT_EQ(s->duplicate, 0.02);
  EXPECT_EQ(s->queue, microseconds(20000));
  EXPECT_EQ(LinkShapeText(*s),
            "rate=100mbit,queue=20ms,delay=1ms,jitter=250us,loss=0.01,duplicate=0.02");
  absl::StatusOr<LinkShape> g = ParseLinkShape("rate=1gbit,delay=25ms");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->rate_bits_per_s, 1e9);
  EXPECT_EQ(LinkShapeText(*g), "rate=1gbit,queue=50ms,delay=25ms");
  EXPECT_EQ(LinkShapeText(*ParseLinkShape("")), "delay=0ms");  // nothing: an ideal link
}

TEST(LinkShapeText, RefusesWhatIsNotALinkNamingThePart) {
  for (const auto& [text, named] : std::vector<std::pair<std::string, std::string>>{
           {"rate=100", "rate=100"},               // no unit
           {"rate=-5mbit", "rate=-5mbit"},
           {"rate=fastmbit", "rate=fastmbit"},
           {"delay=1", "delay=1"},
           {"delay=-1ms", "delay=-1ms"},
           {"loss=1", "loss=1"},                   // a link that loses everything is a cut
           {"loss=0.5x", "loss=0.5x"},
           {"queue=0ms", "queue=0ms"},
           {"bandwidth=1gbit", "bandwidth"},
           {"delay=1ms,jitter=2ms", "jitter 2ms exceeds delay 1ms"}}) {
    absl::StatusOr<LinkShape> s = ParseLinkShape(text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_NE(s.status().message().find(named), std::string::npos) << s.status();
  }
}

class NetLabShaping : public ::testing::Test {
 protected:
  void SetUp() override {
    if (absl::Status s = NetLab::Available(); !s.ok()) {
      GTEST_SKIP() << "network-lab shaping tests skipped: " << s.message();
    }
    absl::StatusOr<std::unique_ptr<NetLab>> lab = NetLab::Create(3);
    ASSERT_TRUE(lab.ok()) << lab.status();
    lab_ = *std::move(lab);
  }

  struct Transfer {
    bool ok = false;
    double connect_s = 0;   // the TCP handshake
    double transfer_s = 0;  // from connected until the receiver has read everything
  };

  // Sends `bytes` over TCP from namespace `from` to `to`:`port` (a thread
  // in each namespace). A connection the network never completes fails
  // after `give_up`.
  Transfer Send(int from, int to, int port, int64_t bytes,
                milliseconds give_up = milliseconds(30000)) {
    std::atomic<int64_t> received{-1};
    std::atomic<int> listener{-1};
    std::thread receiver([&] {
      if (!lab_->EnterNamespace(to).ok()) return;
      const int server = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      const int one = 1;
      setsockopt(server, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      const sockaddr_in address = Address(to, port);
      if (bind(server, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 ||
          listen(server, 4) != 0) {
        close(server);
        listener.store(-2);
        return;
      }
      listener.store(server);
      const int connection = accept(server, nullptr, nullptr);
      if (connection < 0) return;  // closed by the sender's side: it gave up
      std::string buffer(1 << 16, '\0');
      int64_t total = 0;
      for (ssize_t n; (n = read(connection, buffer.data(), buffer.size())) > 0;) total += n;
      received.store(total);
      close(connection);
    });
    Transfer t;
    std::thread sender([&] {
      if (!lab_->EnterNamespace(from).ok()) return;
      while (listener.load() == -1) std::this_thread::sleep_for(milliseconds(1));
      if (listener.load() < 0) return;
      const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      const timeval timeout{give_up.count() / 1000, (give_up.count() % 1000) * 1000};
      setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);  // bounds connect()
      const sockaddr_in address = Address(to, port);
      const auto start = Clock::now();
      if (connect(s, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
        close(s);
        return;
      }
      const auto connected = Clock::now();
      std::string chunk(1 << 16, 'x');
      for (int64_t left = bytes; left > 0;) {
        const ssize_t n = write(s, chunk.data(), std::min<int64_t>(left, chunk.size()));
        if (n <= 0) break;
        left -= n;
      }
      shutdown(s, SHUT_WR);
      char c;
      while (read(s, &c, 1) > 0) {
      }
      close(s);
      t.connect_s = std::chrono::duration<double>(connected - start).count();
      t.transfer_s = std::chrono::duration<double>(Clock::now() - connected).count();
      t.ok = true;
    });
    sender.join();
    if (listener.load() >= 0) shutdown(listener.load(), SHUT_RDWR);  // wakes accept()
    receiver.join();
    if (listener.load() >= 0) close(listener.load());
    t.ok = t.ok && received.load() == bytes;
    return t;
  }

  sockaddr_in Address(int i, int port) const {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, lab_->ip(i).c_str(), &address.sin_addr);
    return address;
  }

  std::unique_ptr<NetLab> lab_;
};

// 4 MB at 40 Mbit/s takes at least 0.8 s, whatever the machine does.
TEST_F(NetLabShaping, ARateIsNeverExceeded) {
  lab_->Shape(*ParseLinkShape("rate=40mbit,delay=1ms"));
  const int64_t bytes = 4'000'000;
  const Transfer t = Send(0, 1, 7000, bytes);
  ASSERT_TRUE(t.ok);
  const double bits_per_s = 8.0 * bytes / t.transfer_s;
  std::printf("FIGURES 4 MB over a 40 Mbit/s, 1 ms link: %.1f Mbit/s of payload in %.2f s\n",
              bits_per_s / 1e6, t.transfer_s);
  EXPECT_LE(bits_per_s, 40e6 * 1.02);
  EXPECT_GE(bits_per_s, 40e6 / 3) << "the switch carries far less than the rate it was given";
}

// Two senders into one node share its downlink: together they get no more
// than the rate, though each has an uplink of its own.
TEST_F(NetLabShaping, TwoSendersShareTheReceiversDownlink) {
  lab_->Shape(*ParseLinkShape("rate=40mbit,delay=1ms"));
  const int64_t bytes = 2'000'000;
  Transfer a, b;
  const auto start = Clock::now();
  std::thread first([&] { a = Send(0, 2, 7000, bytes); });
  std::thread second([&] { b = Send(1, 2, 7001, bytes); });
  first.join();
  second.join();
  const double both_s = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_TRUE(a.ok && b.ok);
  const double bits_per_s = 8.0 * 2 * bytes / both_s;
  std::printf("FIGURES two 2 MB transfers into one 40 Mbit/s downlink: %.1f Mbit/s together\n",
              bits_per_s / 1e6);
  EXPECT_LE(bits_per_s, 40e6 * 1.02);
}

// A 20 ms one-way delay: the TCP handshake takes a round trip, 40 ms. A
// partition cuts between groups and not inside them.
TEST_F(NetLabShaping, ADelayIsAlwaysPaidAndAPartitionCuts) {
  lab_->Shape(*ParseLinkShape("delay=20ms"));
  const Transfer t = Send(0, 1, 7000, 1000);
  ASSERT_TRUE(t.ok);
  EXPECT_GE(t.connect_s, 0.040);
  lab_->Partition({{0}, {1, 2}});
  // (The first connection's last packets may still be crossing: the cut
  // counter is compared before and after, not with zero.)
  EXPECT_TRUE(Send(1, 2, 7001, 1000).ok) << "inside a group";
  const uint64_t cut_before = lab_->counters().cut;
  EXPECT_FALSE(Send(0, 1, 7002, 1000, milliseconds(500)).ok) << "across the cut";
  EXPECT_GT(lab_->counters().cut, cut_before);
  lab_->Heal();
  EXPECT_TRUE(Send(0, 1, 7003, 1000).ok) << "healed";
}

// A rate-limited queue longer than its limit drops (tail drop), and TCP
// still delivers everything: the drops are counted.
TEST_F(NetLabShaping, AShortQueueDropsAndTcpRecovers) {
  lab_->Shape(*ParseLinkShape("rate=20mbit,delay=5ms,queue=2ms"));
  const Transfer t = Send(0, 1, 7000, 2'000'000);
  ASSERT_TRUE(t.ok);
  EXPECT_GT(lab_->counters().overflowed, 0u);
}

}  // namespace
}  // namespace reckon::ctl
