#include "simulator/collective_timing.h"

#include <cstring>

#include "simulator/topology.h"

namespace shardscope::sim {

namespace {

template <typename T>
void Put(std::string& s, const T& v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void PutString(std::string& s, const std::string& v) {
  Put(s, static_cast<uint64_t>(v.size()));
  s += v;
}

int64_t ApproxBytes(const std::string& key, const CollectiveTiming& t) {
  int64_t b = static_cast<int64_t>(key.size()) + 256;
  b += static_cast<int64_t>(t.group_of.size() * sizeof(int32_t) + t.group_size.size() * sizeof(int32_t) +
                            (t.group_time.size() + t.per_byte_group_latency.size() + t.per_byte_group_data.size()) * sizeof(double));
  b += static_cast<int64_t>(t.cost.link_traffic.size() * sizeof(LinkTraffic) + t.cost.pass_busiest.size() * sizeof(LinkTraffic) +
                            t.cost.algorithm.size());
  for (const auto& g : t.request.groups) b += static_cast<int64_t>(g.size() * sizeof(int64_t) + 24);
  b += static_cast<int64_t>(t.request.source_target_pairs.size() * 2 * sizeof(int64_t));
  return b;
}

}  // namespace

std::string CollectiveTimingMemo::ContextKey(const Topology& topology, const CollectiveOptions& options) {
  std::string s;
  Put(s, static_cast<int>(options.latency_model));
  Put(s, options.bidirectional);
  Put(s, options.per_axis_all_to_all);
  const ChipSpec& chip = topology.chip();
  PutString(s, chip.name);
  Put(s, static_cast<int>(chip.interconnect));
  Put(s, chip.cores_per_chip);
  Put(s, chip.hop_latency);
  Put(s, chip.ici_link_bandwidth);
  Put(s, chip.dcn_bandwidth);
  Put(s, static_cast<uint64_t>(topology.shape().size()));
  for (int64_t d : topology.shape()) Put(s, d);
  for (bool w : topology.wraparound()) Put(s, w);
  Put(s, static_cast<uint64_t>(topology.device_to_chip().size()));
  for (int64_t c : topology.device_to_chip()) Put(s, c);
  Put(s, static_cast<uint64_t>(topology.links().size()));
  for (const TopologyLink& l : topology.links()) {
    Put(s, l.id);
    Put(s, l.src);
    Put(s, l.dst);
    Put(s, l.axis);
    Put(s, l.direction);
    Put(s, l.wraparound);
    Put(s, l.bandwidth);
    Put(s, l.latency);
  }
  return s;
}

std::string CollectiveTimingMemo::CollectiveKey(CollectiveKind kind, double operand_bytes,
                                                const std::vector<std::vector<int64_t>>& groups,
                                                const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  std::string s;
  size_t n = 0;
  for (const auto& g : groups) n += g.size() + 1;
  s.reserve(16 + 8 * n + 16 * pairs.size() + 16);
  Put(s, static_cast<int>(kind));
  Put(s, operand_bytes);
  Put(s, static_cast<uint64_t>(groups.size()));
  for (const auto& g : groups) {
    Put(s, static_cast<uint64_t>(g.size()));
    s.append(reinterpret_cast<const char*>(g.data()), g.size() * sizeof(int64_t));
  }
  Put(s, static_cast<uint64_t>(pairs.size()));
  for (const auto& [a, b] : pairs) {
    Put(s, a);
    Put(s, b);
  }
  return s;
}

std::shared_ptr<const CollectiveTiming> CollectiveTimingMemo::Find(const std::string& context, const std::string& collective) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto t = tables_.find(context);
  if (t != tables_.end()) {
    auto it = t->second.find(collective);
    if (it != t->second.end()) {
      ++hits_;
      return it->second;
    }
  }
  ++misses_;
  return nullptr;
}

std::shared_ptr<const CollectiveTiming> CollectiveTimingMemo::Store(const std::string& context, const std::string& collective,
                                                                  CollectiveTiming timing) {
  const int64_t b = ApproxBytes(collective, timing);
  auto value = std::make_shared<const CollectiveTiming>(std::move(timing));
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes_ + b > max_bytes_) {
    tables_.clear();
    bytes_ = 0;
  }
  auto [it, fresh] = tables_[context].emplace(collective, value);
  if (fresh) bytes_ += b;
  return it->second;
}

int64_t CollectiveTimingMemo::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}
int64_t CollectiveTimingMemo::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}
int64_t CollectiveTimingMemo::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace shardscope::sim
