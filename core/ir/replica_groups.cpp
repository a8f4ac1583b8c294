#include "core/ir/replica_groups.h"

#include <algorithm>
#include <charconv>

namespace shardscope {

namespace {

void AppendList(std::string* s, char open, const std::vector<int64_t>& v, char close) {
  *s += open;
  char buf[24];
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) *s += ',';
    const auto r = std::to_chars(buf, buf + sizeof buf, v[i]);
    s->append(buf, r.ptr);
  }
  *s += close;
}

std::string Abbreviated(const std::vector<std::vector<int64_t>>& groups) {
  std::string head = "{{";
  const auto& first = groups[0];
  for (size_t j = 0; j < first.size() && j < 4; ++j) {
    if (j) head += ',';
    head += std::to_string(first[j]);
  }
  head += first.size() > 4 ? ",...},...}" : "},...}";
  return head + " (" + std::to_string(groups.size()) + " groups of " + std::to_string(first.size()) + ")";
}

}  // namespace

std::string ReplicaGroupsText(const std::vector<std::vector<int64_t>>& groups, size_t max_chars) {
  std::string s = "{";
  size_t devices = 0;
  for (const auto& g : groups) devices += g.size();
  // Each id takes a digit and a separator at least: text surely longer than max_chars is not
  // written out (a 2048-device group would be 10 kB).
  if (!groups.empty() && max_chars != std::string::npos && 1 + 2 * devices + groups.size() > max_chars) return Abbreviated(groups);
  s.reserve(std::min(max_chars, 2 + 3 * groups.size() + 6 * devices));
  for (size_t i = 0; i < groups.size(); ++i) {
    if (i) s += ',';
    AppendList(&s, '{', groups[i], '}');
    if (s.size() > max_chars) return Abbreviated(groups);
  }
  return s + "}";
}

std::string ReplicaGroupsText(const ReplicaGroups& g, size_t max_chars) {
  if (g.iota_form && g.iota_dims.size() == 2) {
    std::string s;
    AppendList(&s, '[', g.iota_dims, ']');
    s += "<=";
    if (g.iota_reshape.empty()) AppendList(&s, '[', {g.iota_dims[0] * g.iota_dims[1]}, ']');
    else AppendList(&s, '[', g.iota_reshape, ']');
    if (!g.iota_perm.empty()) {
      s += 'T';
      AppendList(&s, '(', g.iota_perm, ')');
    }
    return s;
  }
  return ReplicaGroupsText(g.groups, max_chars);
}

const std::string& ReplicaGroupsTextMemo::operator()(const std::vector<std::vector<int64_t>>& groups) {
  for (const auto& [g, text] : entries_)
    if (g == groups) return text;
  if (entries_.size() >= capacity_) entries_.pop_front();
  entries_.emplace_back(groups, ReplicaGroupsText(groups, max_chars_));
  return entries_.back().second;
}

std::string SourceTargetPairsText(const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  std::string s = "{";
  s.reserve(2 + 8 * pairs.size());
  char buf[24];
  for (size_t i = 0; i < pairs.size(); ++i) {
    s += i ? ",{" : "{";
    s.append(buf, std::to_chars(buf, buf + sizeof buf, pairs[i].first).ptr);
    s += ',';
    s.append(buf, std::to_chars(buf, buf + sizeof buf, pairs[i].second).ptr);
    s += '}';
  }
  return s + "}";
}

}  // namespace shardscope
