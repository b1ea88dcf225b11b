#include "server/checksum_ledger.h"

namespace reckon::server {

ChecksumLedger::ChecksumLedger(size_t history_per_origin)
    : history_per_origin_(history_per_origin < 1 ? 1 : history_per_origin) {}

void ChecksumLedger::Reset(uint64_t total, const VersionMap& at) {
  total_ = total;
  origins_.clear();
  for (const auto& [origin, seq] : at) {
    if (seq == 0) continue;
    History& h = origins_[origin];
    h.last_seq = seq;
    h.first_seq = seq;
    h.sums.push_back(0);
  }
}

void ChecksumLedger::Add(const OriginKey& origin, uint64_t seq, uint64_t contribution) {
  total_ += contribution;
  History& h = origins_[origin];
  if (h.sums.empty()) {
    // First message of an origin: its history starts at seq 0 (nothing).
    h.first_seq = seq - 1;
    h.sums.push_back(0);
  }
  h.sums.push_back(h.sums.back() + contribution);
  h.last_seq = seq;
  while (h.sums.size() > history_per_origin_ + 1) {
    h.sums.pop_front();
    ++h.first_seq;
  }
}

std::optional<uint64_t> ChecksumLedger::At(const VersionMap& v) const {
  uint64_t result = total_;
  for (const auto& [origin, h] : origins_) {
    const uint64_t want = SeqOf(v, origin);
    if (want < h.first_seq || want > h.last_seq) return std::nullopt;
    result -= h.sums.back() - h.sums[want - h.first_seq];
  }
  for (const auto& [origin, seq] : v) {
    if (seq != 0 && !origins_.count(origin)) return std::nullopt;  // ahead of us
  }
  return result;
}

bool ChecksumLedger::Passed(const VersionMap& v) const {
  for (const auto& [origin, seq] : v) {
    auto it = origins_.find(origin);
    if (seq > (it == origins_.end() ? 0 : it->second.last_seq)) return false;
  }
  return true;
}

}  // namespace reckon::server
