#include "partitioner/spmd/context.h"

#include <bit>

namespace shardscope::spmd {

namespace {
// What a memoised answer depends on among the options (the memo key with the device count).
std::string OptionsKey(const SpmdOptions& o) {
  std::string key;
  key += o.prefer_reduce_scatter ? 'r' : '-';
  key += o.conv_halo_exchange_always_on_lhs ? 'l' : '-';
  key += std::to_string(o.windowed_einsum_threshold_mib);
  key += '/';
  key += std::to_string(o.windowed_einsum_max_iterations);
  return key;
}
}  // namespace

SpmdContext::SpmdContext(Module* out, int64_t num_devices, const SpmdOptions& options, PartitionResult* result,
                         const HandlerTable& handlers)
    : options_(options),
      handlers_(handlers),
      builder_(out, num_devices, result),
      own_tables_(options.memo ? nullptr : std::make_unique<PartitionTables>(num_devices)),
      tables_(options.memo ? options.memo->TablesFor(num_devices, OptionsKey(options)) : *own_tables_),
      maps_(tables_.maps),
      resharder_(builder_, maps_, &tables_.plans),
      decisions_(tables_.decisions) {}

std::optional<TileMap> SpmdContext::JointTiling(const std::vector<JointSource>& sources, int64_t num_labels) {
  return MemoisedJointTiling(sources, num_labels, [&] { return BuildJointTiling(sources, num_labels, num_devices()); });
}

std::optional<TileMap> SpmdContext::MemoisedJointTiling(const std::vector<JointSource>& sources, int64_t num_labels,
                                                        const std::function<std::optional<TileMap>()>& build) {
  std::string key;
  key.append(reinterpret_cast<const char*>(&num_labels), sizeof num_labels);
  for (const JointSource& s : sources) {
    const void* id = s.map->identity();
    key.append(reinterpret_cast<const char*>(&id), sizeof id);
    const int64_t k = static_cast<int64_t>(s.label_of_dim.size());
    key.append(reinterpret_cast<const char*>(&k), sizeof k);
    key.append(reinterpret_cast<const char*>(s.label_of_dim.data()), s.label_of_dim.size() * sizeof(int64_t));
  }
  auto it = tables_.joints.find(key);
  if (it != tables_.joints.end()) return it->second.joint;
  PartitionTables::Joint entry;
  for (const JointSource& s : sources) entry.sources.push_back(*s.map);
  entry.joint = build();
  return tables_.joints.emplace(std::move(key), std::move(entry)).first->second.joint;
}

std::vector<SpmdContext::SubsetTiling> SpmdContext::SubsetJointTilings(const std::vector<JointSource>& sources,
                                                                      int64_t num_labels) {
  const int64_t n = static_cast<int64_t>(sources.size());
  // Smaller subsets first: a subset's joint is its subset without its last source's when that
  // source splits nothing new and agrees (ExtendJointTiling: one pass over the devices instead of
  // building an equal map, which most subsets gave), or none when it disagrees.
  std::vector<std::optional<TileMap>> joint_of(static_cast<size_t>(int64_t{1} << n));
  std::vector<JointSource> subset;
  for (int64_t mask = 0; mask < (int64_t{1} << n); ++mask) {
    subset.clear();
    int64_t last = -1;
    for (int64_t i = 0; i < n; ++i)
      if (mask & (int64_t{1} << i)) {
        subset.push_back(sources[static_cast<size_t>(i)]);
        last = i;
      }
    const std::optional<TileMap>* smaller =
        last < 0 ? nullptr : &joint_of[static_cast<size_t>(mask & ~(int64_t{1} << last))];
    joint_of[static_cast<size_t>(mask)] = MemoisedJointTiling(subset, num_labels, [&]() -> std::optional<TileMap> {
      if (smaller && *smaller) {
        switch (ExtendJointTiling(**smaller, sources[static_cast<size_t>(last)])) {
          case JointExtension::kSame: return *smaller;
          case JointExtension::kConflict: return std::nullopt;
          case JointExtension::kNew: break;
        }
      }
      return BuildJointTiling(subset, num_labels, num_devices());
    });
  }
  // From all the sources down to none.
  std::vector<SubsetTiling> out;
  for (int64_t mask = (int64_t{1} << n) - 1; mask >= 0; --mask)
    if (const auto& joint = joint_of[static_cast<size_t>(mask)])
      out.push_back({*joint, static_cast<int64_t>(std::popcount(static_cast<uint64_t>(mask)))});
  return out;
}

const PartitionedHlo& SpmdContext::Get(const Instruction* orig) const {
  static const PartitionedHlo kMissing;
  auto it = values_.find(orig);
  return it == values_.end() ? kMissing : it->second;
}

const HloSharding& SpmdContext::ShardingOf(const Instruction& orig) {
  static const HloSharding kReplicated = HloSharding::Replicate();
  if (orig.has_sharding()) return *orig.sharding();
  return kReplicated;
}

Instruction* MaskPadding(SpmdContext& ctx, const PartitionedHlo& v, const std::vector<int64_t>& dims, double identity) {
  auto m = ctx.maps().Get(v.sharding, v.base_shape.rank());
  if (!m.ok()) return v.hlo;
  return ctx.builder().MaskPadding(v.hlo, *m, v.base_shape, dims, identity);
}

}  // namespace shardscope::spmd
