// Internal to the weight-update-sharding pass: the plan (which value of which computation becomes
// a shard, in which layout, and where values stay sharded across loop iterations or steps), made
// by plan.cpp and carried out by emit.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/ir/ir.h"
#include "partitioner/weight_update_sharding/redundancy.h"
#include "partitioner/weight_update_sharding/shard_format.h"
#include "partitioner/weight_update_sharding/weight_update_sharding.h"

namespace shardscope::wus {

// A value's layout: its shard format and the scheme that places the shards.
struct Layout {
  ShardFormat format;
  int32_t scheme = 0;
};

enum class ValueKind : uint8_t {
  kFull,          // as in the input program
  kSeed,          // a gradient all-reduce: reduce-scatter instead (section 2.2)
  kElementwise,   // elementwise on the shards
  kBroadcast,     // broadcast of a shard (dims [0, merge) kept in front)
  kReduceKeep,    // reduce over dims outside the shard dims: a shard of the result
  kReduceMasked,  // reduce over the shard dims: masked local reduce + all-reduce (section 4.1)
  kAbsorbed,      // a gradient all-reduce (or data movement after it) folded into a later seed
};

struct ValuePlan {
  ValueKind kind = ValueKind::kFull;
  int32_t layout = -1;   // of the result when it is a shard
  int32_t cluster = -1;  // the gradient cluster it belongs to
  // kReduceKeep / kReduceMasked whose operand is a full value sliced for the purpose (a norm of a
  // weight: section 4.1's reduce on a shard of a weight, not of a gradient): the operand's layout.
  int32_t operand_layout = -1;
  // A convert of a value kept sharded whose full uses are all this cast: cast the shard, then
  // all-gather in the narrower type (Figure 7).
  bool gather_after_cast = false;
};

// Where values stay sharded: a computation's inputs and outputs (section 4.2).
struct ShardedIo {
  // Tuple parameter 0's elements (while body / condition, conditional branch) or, for the entry
  // split, parameter numbers -> layout.
  std::map<int64_t, int32_t> inputs;
  // Root tuple elements (or 0 for an array root) -> layout.
  std::map<int64_t, int32_t> outputs;
  bool empty() const { return inputs.empty() && outputs.empty(); }
};

struct Cluster {
  std::vector<const Instruction*> seeds;  // gradient all-reduces
  const Computation* comp = nullptr;
  int32_t layout = -1;                   // of the (first) seed
  bool rejected = false;
  WeightUpdateDecision decision;
};

struct ComputationPlan {
  const Computation* comp = nullptr;
  std::unordered_map<const Instruction*, ValuePlan> values;
  // How often the computation runs per step relative to its caller context (1; a branch taken
  // every k steps: 1/k).
  double frequency = 1;
  bool is_loop_body = false;
};

inline constexpr int64_t kBranchStride = int64_t{1} << 32;

// The whole plan.
struct Plan {
  const Module* module = nullptr;
  WeightUpdateShardingOptions options;
  std::unique_ptr<RedundancyAnalysis> redundancy;
  std::vector<ShardingScheme> schemes;
  std::vector<Layout> layouts;
  std::unordered_map<std::string, int32_t> layout_ids;
  std::vector<Cluster> clusters;
  std::unordered_map<const Computation*, ComputationPlan> comps;
  // Sharded inputs/outputs per computation (while bodies and their conditions share one; the
  // entry's is the step split; conditional branches get the rare-branch shards).
  std::unordered_map<const Computation*, ShardedIo> io;
  // While instructions whose state keeps elements sharded (body io) and conditionals that pass
  // shards into their branches, as seen from the caller: instruction -> element -> layout
  // (conditionals: key branch * kBranchStride + element of the branch's operand tuple).
  std::unordered_map<const Instruction*, std::map<int64_t, int32_t>> call_shards;
  // A seed that is data movement (transpose, reshape, copy) after a gradient all-reduce -> that
  // all-reduce: the sum commutes with moving data, so the reduce-scatter runs after the movement.
  std::unordered_map<const Instruction*, const Instruction*> seed_source;
  // (tuple, element) -> layout: tuples that hand a shard to a conditional branch.
  std::map<std::pair<const Instruction*, int64_t>, int32_t> shard_tuple_slots;
  bool split = false;
  std::vector<bool> redundant_entry_parameters;
  // Loop bodies and conditions: the names of what the loop state's elements start as (reports).
  std::unordered_map<const Computation*, std::vector<std::string>> state_names;

  int32_t Intern(const Layout& l);
  const Layout& layout(int32_t id) const { return layouts[static_cast<size_t>(id)]; }
  const ShardingScheme& scheme_of(int32_t layout_id) const {
    return schemes[static_cast<size_t>(layouts[static_cast<size_t>(layout_id)].scheme)];
  }
  const ValuePlan* Find(const Instruction* inst) const;
  // The positions at which `tuple` has `v` as an operand, in order. Indexed once per tuple: a step's
  // root tuple has an operand per weight and auxiliary (thousands), and asking it per value by
  // scanning every operand was quadratic.
  const std::vector<int64_t>& SlotsOf(const Instruction* tuple, const Instruction* v) const;

 private:
  mutable std::unordered_map<const Instruction*, std::unordered_map<const Instruction*, std::vector<int64_t>>> slots_;
};

// Whether `user` reads its operand `v` as a shard of layout `layout` (an update op on shards, a root
// or a branch's operand tuple keeping the slot sharded); otherwise it needs v whole.
bool ConsumesShard(const Plan& plan, const Instruction* user, const Instruction* v, int32_t layout);

// Builds the plan: redundancy, clusters, formats, layouts, placement and profitability.
Result<std::unique_ptr<Plan>> MakePlan(const Module& module, const WeightUpdateShardingOptions& options);

// Carries out the plan: the rewritten module(s) and the record of what was inserted.
Status EmitPlan(const Plan& plan, WeightUpdateShardingResult* result);

// Section 5.2 batching of the pass's collectives in `module`; updates `collectives` (the records of
// what was combined). Returns the number of collectives merged away.
// Collectives named in `once` (after a loop, in the unsharding program) are left alone.
int64_t CombineCollectives(Module* module, int64_t threshold_bytes, const std::unordered_set<std::string>& once,
                           std::vector<InsertedCollective>* collectives);

// Operand `i` of an elementwise op that the op reads whole at every element (clamp's scalar
// bounds): such operands stay full.
bool IsScalarOperand(const Instruction& inst, int64_t i);

}  // namespace shardscope::wus
