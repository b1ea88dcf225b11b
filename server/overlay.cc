#include "server/overlay.h"

#include <algorithm>

namespace reckon::server {

std::vector<size_t> TreeChildren(size_t relative, size_t size) {
  std::vector<size_t> children;
  // The origin's span is the whole ring; a member's ends below its lowest
  // set bit (it got the message from relative - that bit).
  const size_t span = relative == 0 ? size : (relative & (~relative + 1));
  for (size_t step = 1; step < span && relative + step < size; step <<= 1) {
    children.push_back(relative + step);
  }
  return children;
}

size_t TreeParent(size_t relative) { return relative - (relative & (~relative + 1)); }

Ring::Ring(std::vector<std::string> node_ids) : ids_(std::move(node_ids)) {
  std::sort(ids_.begin(), ids_.end());
}

std::optional<size_t> Ring::Position(const std::string& node_id) const {
  auto it = std::lower_bound(ids_.begin(), ids_.end(), node_id);
  if (it == ids_.end() || *it != node_id) return std::nullopt;
  return static_cast<size_t>(it - ids_.begin());
}

std::vector<std::string> Ring::Children(const std::string& origin, const std::string& self) const {
  const std::optional<size_t> o = Position(origin), s = Position(self);
  if (!o || !s) return {};
  const size_t n = ids_.size();
  std::vector<std::string> out;
  for (size_t child : TreeChildren((*s + n - *o) % n, n)) out.push_back(ids_[(*o + child) % n]);
  return out;
}

bool Ring::IsChild(const std::string& origin, const std::string& self,
                   const std::string& member) const {
  const std::optional<size_t> o = Position(origin), s = Position(self), m = Position(member);
  if (!o || !s || !m) return false;
  const size_t n = ids_.size();
  const size_t relative = (*m + n - *o) % n;
  return relative != 0 && TreeParent(relative) == (*s + n - *o) % n;
}

bool Ring::Neighbours(const std::string& a, const std::string& b) const {
  const std::optional<size_t> pa = Position(a), pb = Position(b);
  if (!pa || !pb || *pa == *pb) return false;
  const size_t n = ids_.size();
  const size_t forward = (*pb + n - *pa) % n, backward = n - forward;
  auto power_of_two = [](size_t x) { return (x & (x - 1)) == 0; };
  return power_of_two(forward) || power_of_two(backward);
}

}  // namespace reckon::server
