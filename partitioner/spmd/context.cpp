#include "partitioner/spmd/context.h"

namespace shardscope::spmd {

SpmdContext::SpmdContext(Module* out, int64_t num_devices, const SpmdOptions& options, PartitionResult* result,
                         const HandlerTable& handlers)
    : options_(options),
      handlers_(handlers),
      builder_(out, num_devices, result),
      maps_(num_devices),
      resharder_(builder_, maps_) {}

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
