#include "app/cli/wus_options.h"

#include "app/cli/cli.h"

namespace shardscope::cli {

namespace {

bool ParseBytes(const std::string& t, int64_t* out) {
  try {
    size_t pos = 0;
    const long long v = std::stoll(t, &pos);
    if (pos != t.size() || v < 0) return false;
    *out = v;
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace

std::string TakeWeightUpdateShardingOptions(std::vector<std::string>& args, bool* on, WeightUpdateShardingOptions* o) {
  *on = TakeFlag(args, "weight-update-sharding");
  std::string mesh, min_shard, threshold;
  if (TakeOption(args, "replica-mesh", &mesh)) {
    const auto x = mesh.find('x');
    int64_t r = 0, c = 0;
    if (x == std::string::npos || !ParseBytes(mesh.substr(0, x), &r) || !ParseBytes(mesh.substr(x + 1), &c) || r < 1 || c < 1)
      return "--replica-mesh takes ROWSxCOLS, e.g. 4x8";
    o->replica_mesh = {r, c};
  }
  const bool two = TakeFlag(args, "two-phase"), no_two = TakeFlag(args, "no-two-phase");
  if (two && no_two) return "--two-phase contradicts --no-two-phase";
  if (two) o->two_phase = true;
  if (no_two) o->two_phase = false;
  if (TakeFlag(args, "no-partial-sharding")) o->partial_sharding = false;
  if (TakeFlag(args, "wus-force")) o->force = true;
  if (TakeFlag(args, "no-keep-weights-sharded")) o->keep_weights_sharded = false;
  if (TakeFlag(args, "no-step-split")) o->split_step_program = false;
  if (TakeFlag(args, "batch-small-updates")) o->batch_small_updates = true;
  if (TakeOption(args, "min-shard-bytes", &min_shard) && !ParseBytes(min_shard, &o->min_shard_bytes))
    return "--min-shard-bytes takes a non-negative integer";
  if (TakeOption(args, "combine-threshold-bytes", &threshold) && !ParseBytes(threshold, &o->combine_threshold_bytes))
    return "--combine-threshold-bytes takes a non-negative integer";
  return "";
}

}  // namespace shardscope::cli
