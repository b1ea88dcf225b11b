#include "server/member_table.h"

#include <algorithm>

#include <utility>

namespace reckon::server {

MemberTable::MemberTable(Options options)
    : options_(std::move(options)), handshakes_(options_.handshakes) {}

Member* MemberTable::Find(const std::string& node_id) {
  auto it = members_.find(node_id);
  return it == members_.end() ? nullptr : &it->second;
}

const Member* MemberTable::Find(const std::string& node_id) const {
  auto it = members_.find(node_id);
  return it == members_.end() ? nullptr : &it->second;
}

Member* MemberTable::FindByStream(const std::shared_ptr<Link>& link) {
  for (auto& [id, m] : members_) {
    if (m.links.stream() == link) return &m;
  }
  return nullptr;
}

bool MemberTable::IsCurrent(const OriginKey& origin) const {
  const Member* m = Find(origin.node_id);
  return m != nullptr && m->incarnation == origin.incarnation;
}

bool MemberTable::IsAlive(const OriginKey& origin) const {
  const Member* m = Find(origin.node_id);
  return m != nullptr && m->incarnation == origin.incarnation && m->state() == MemberState::kAlive;
}

size_t MemberTable::CountAlive() const {
  size_t alive = 0;
  for (const auto& [id, m] : members_) alive += m.state() == MemberState::kAlive;
  return alive;
}

std::vector<std::string> MemberTable::AliveIds() const {
  std::vector<std::string> ids;
  for (const auto& [id, m] : members_) {
    if (m.state() == MemberState::kAlive) ids.push_back(id);
  }
  return ids;
}

std::vector<std::string> MemberTable::LiveAddresses(const std::string& except) const {
  std::vector<std::string> out;
  for (const auto& [id, m] : members_) {
    if (m.state() == MemberState::kAlive && !m.address.empty() && m.address != except) {
      out.push_back(m.address);
    }
  }
  return out;
}

bool MemberTable::ConnectedOrLeftAt(const std::string& address,
                                    const std::string& reached_there) const {
  for (const auto& [id, m] : members_) {
    if ((m.address == address || id == reached_there) &&
        (m.links.connected() || m.state() == MemberState::kLeft))
      return true;
  }
  return false;
}

bool MemberTable::OnlyAName(const Member& m) {
  return m.incarnation == 0 && !m.vouched && !m.links.connected();
}

std::string MemberTable::Forget(const std::string& id) {
  auto it = members_.find(id);
  if (it == members_.end()) return "";
  std::string address = it->second.address;
  members_.erase(it);
  if (forgotten_.insert(id).second) forgotten_order_.push_back(id);
  while (forgotten_order_.size() > options_.max_members) {
    forgotten_.erase(forgotten_order_.front());
    forgotten_order_.pop_front();
  }
  return address;
}

HelloVerdict MemberTable::Judge(const v1::Hello& hello, HelloContext context) const {
  context.self = options_.self;
  context.members = &members_;
  context.max_members = options_.max_members;
  // Asked only of a full table (a Hello is judged for each stream).
  context.a_name_can_give_way =
      members_.size() >= options_.max_members &&
      std::any_of(members_.begin(), members_.end(), [](const auto& e) { return OnlyAName(e.second); });
  return JudgeHello(hello, context);
}

MemberTable::Admitted MemberTable::Admit(const std::shared_ptr<Link>& link, const v1::Hello& hello,
                                         Clock::time_point now) {
  handshakes_.Remove(link);
  const std::string& id = hello.self().node_id();
  std::string gave_way;
  if (!members_.count(id) && members_.size() >= options_.max_members) {
    // Full (JudgeHello let it in: a name can give way): the first such name goes.
    for (auto it = members_.begin(); it != members_.end(); ++it) {
      if (OnlyAName(it->second)) {
        gave_way = it->second.address;
        members_.erase(it);
        break;
      }
    }
  }
  Member& m = members_[id];
  if (m.node_id.empty()) {
    m.node_id = id;
    m.first_known = now;
  }
  Admitted admitted{&m, false, std::move(gave_way)};
  if (hello.self().incarnation() != m.incarnation) {  // JudgeHello let it take the id
    admitted.restarted = m.incarnation != 0;
    m.BeginIncarnation(hello.self().incarnation());
  }
  return admitted;
}

ListLearned MemberTable::Learn(Member& from,
                               const google::protobuf::RepeatedPtrField<v1::Member>& list,
                               Clock::time_point now) {
  return LearnMemberList(from, list, options_.self.node_id, options_.max_members, now, &members_,
                         &forgotten_);
}

bool MemberTable::MarkAlive(Member& m, Clock::time_point now) {
  const bool was_alive = m.state_ == MemberState::kAlive;
  m.state_ = MemberState::kAlive;
  m.alive_since_ = now;
  return !was_alive;
}

}  // namespace reckon::server
