#include "server/fault_link.h"

#include <cstdlib>
#include <iostream>

#include "absl/strings/str_cat.h"

namespace reckon::server {

class FaultLink final : public Link {
 public:
  FaultLink(FaultInjector* injector, std::shared_ptr<Link> inner)
      : injector_(injector), inner_(std::move(inner)) {}
  bool Send(std::shared_ptr<const v1::GossipFrame> frame, size_t byte_cap) override {
    return injector_->Send(inner_, Describe(), std::move(frame), byte_cap);
  }
  size_t QueuedBytes() const override { return inner_->QueuedBytes(); }
  void Close() override { inner_->Close(); }
  void Abort() override { inner_->Abort(); }
  bool dialed() const override { return inner_->dialed(); }
  std::string Describe() const override { return inner_->Describe(); }
  void ResumeReading() override { inner_->ResumeReading(); }

 private:
  FaultInjector* injector_;
  std::shared_ptr<Link> inner_;
};

FaultInjector::FaultInjector(FaultOptions options, OriginKey self, LinkEvents* node, uint64_t seed)
    : options_(options),
      self_(std::move(self)),
      node_(node),
      rng_(seed),
      delayed_("reckon-faults", [this](Delayed& d) { SendDelayed(d); }) {}

FaultInjector::~FaultInjector() = default;

void FaultInjector::SendDelayed(Delayed& d) {
  {
    absl::MutexLock l(&mu_);
    if (silenced_) return;
  }
  if (std::shared_ptr<Link> inner = d.inner.lock()) inner->Send(std::move(d.frame), d.byte_cap);
}

Dialer FaultInjector::Wrap(Dialer inner) {
  return [this, inner = std::move(inner)](const std::string& address) -> std::shared_ptr<Link> {
    std::shared_ptr<Link> link = inner(address);
    if (!link) return nullptr;
    return OuterOf(link);
  };
}

std::shared_ptr<FaultLink> FaultInjector::OuterOf(const std::shared_ptr<Link>& inner) {
  absl::MutexLock l(&mu_);
  std::weak_ptr<FaultLink>& slot = outer_[inner.get()];
  std::shared_ptr<FaultLink> outer = slot.lock();
  if (!outer) {
    outer = std::make_shared<FaultLink>(this, inner);
    slot = outer;
  }
  return outer;
}

void FaultInjector::OnLinkUp(const std::shared_ptr<Link>& link) { node_->OnLinkUp(OuterOf(link)); }

bool FaultInjector::OnFrame(const std::shared_ptr<Link>& link, v1::GossipFrame frame) {
  return node_->OnFrame(OuterOf(link), std::move(frame));
}

void FaultInjector::OnLinkClosed(const std::shared_ptr<Link>& link, const std::string& why) {
  std::shared_ptr<FaultLink> outer = OuterOf(link);
  {
    absl::MutexLock l(&mu_);
    outer_.erase(link.get());
  }
  node_->OnLinkClosed(outer, why);
}

bool FaultInjector::Delay(const std::shared_ptr<Link>& inner,
                          const std::shared_ptr<const v1::GossipFrame>& frame, size_t byte_cap) {
  // Each copy may be held back a random while: independent delays reorder.
  if (options_.max_delay_ms <= 0 || options_.delay_probability <= 0 ||
      std::uniform_real_distribution<double>(0, 1)(rng_) >= options_.delay_probability) {
    return false;
  }
  const auto when =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(std::uniform_int_distribution<int>(1, options_.max_delay_ms)(rng_));
  delayed_.Push(when, Delayed{inner, frame, byte_cap});
  return true;
}

bool FaultInjector::Send(const std::shared_ptr<Link>& inner, const std::string& describe,
                         std::shared_ptr<const v1::GossipFrame> frame, size_t byte_cap) {
  const bool ours = frame->has_update() && KeyOf(frame->update().origin()) == self_;
  const uint64_t seq = ours ? frame->update().seq() : 0;
  // Decided under the lock, sent outside it: a link may report events
  // inline, and they come back through this injector.
  std::vector<std::shared_ptr<const v1::GossipFrame>> now;
  bool die = false;
  {
    absl::MutexLock l(&mu_);
    if (silenced_) return true;  // dying: swallowed, as by a crash
    if (ours && seq == options_.die_after_partial_send_seq) {
      silenced_ = true;
      die = true;
      now.push_back(frame);
    } else {
      if (ours && seq == options_.corrupt_seq) {
        // A copy whose payload no longer matches its CRC, first.
        auto bad = std::make_shared<v1::GossipFrame>(*frame);
        std::string* payload = bad->mutable_update()->mutable_payload();
        if (payload->empty()) {
          bad->mutable_update()->set_crc32c(bad->update().crc32c() ^ 1);
        } else {
          (*payload)[0] ^= 0x5a;
        }
        now.push_back(std::move(bad));
      }
      if (!frame->has_update()) {
        now.push_back(frame);
      } else {
        const bool twice = options_.duplicate_probability > 0 &&
                           std::uniform_real_distribution<double>(0, 1)(rng_) <
                               options_.duplicate_probability;
        for (int copy = 0; copy < (twice ? 2 : 1); ++copy) {
          if (!Delay(inner, frame, byte_cap)) now.push_back(frame);
        }
      }
    }
  }
  if (die) {
    std::cerr << "reckon-gossip[" << self_.node_id << "]: fault: sending seq " << seq << " to "
              << describe << " only, then dying\n"
              << std::flush;
  }
  bool sent = now.empty();  // all delayed: accepted
  for (auto& f : now) sent = inner->Send(std::move(f), die ? SIZE_MAX : byte_cap) || sent;
  if (die) std::thread([this, inner] { DieAfterFlush(inner); }).detach();
  return sent;
}

void FaultInjector::DieAfterFlush(std::shared_ptr<Link> link) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (link->QueuedBytes() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // on the wire
  std::_Exit(86);
}

}  // namespace reckon::server
