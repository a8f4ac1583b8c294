// SpmdContext: the state of one partitioning run that every handler works in (XLA's
// SpmdPartitioningVisitor). It holds what the run has produced so far — the partitioned value of
// every original instruction and the partitioned called computations — and the run's parts, each
// in its own file:
//   builder()    emitting the SPMD program's instructions and collectives  (spmd_builder.h)
//   maps()       every sharding seen per device, built once per run        (tile_map.h)
//   resharder()  planning and executing reshards (§4.5)                    (reshard.h)
//   halo exchange and joint tilings are functions over these               (halo.h, joint_tiling.h)
//   Decisions<T>()  handlers' own memo tables (the dot handler's choice)
// Every cache lives here, for one run: what a cached answer depends on beyond its key — the
// device count and the options — is fixed for the run.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <typeindex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/ir/ir.h"
#include "partitioner/spmd/halo.h"
#include "partitioner/spmd/joint_tiling.h"
#include "partitioner/spmd/partition_memo.h"
#include "partitioner/spmd/reshard.h"
#include "partitioner/spmd/spmd_builder.h"
#include "partitioner/spmd/spmd_partitioner.h"
#include "partitioner/spmd/tile_map.h"

namespace shardscope::spmd {

class HandlerTable;

class SpmdContext {
 public:
  SpmdContext(Module* out, int64_t num_devices, const SpmdOptions& options, PartitionResult* result,
              const HandlerTable& handlers);
  SpmdContext(const SpmdContext&) = delete;
  SpmdContext& operator=(const SpmdContext&) = delete;

  int64_t num_devices() const { return maps_.num_devices(); }
  const SpmdOptions& options() const { return options_; }

  // ---- values: the partitioned form of each original instruction ----
  const PartitionedHlo& Get(const Instruction* orig) const;
  void Set(const Instruction* orig, PartitionedHlo v) { values_[orig] = std::move(v); }
  // The sharding an original instruction should have (replicated when absent).
  static const HloSharding& ShardingOf(const Instruction& orig);

  // ---- the run's parts ----
  SpmdBuilder& builder() { return builder_; }
  const TileMapCache& maps() const { return maps_; }
  Resharder& resharder() { return resharder_; }
  // A memo table of handler decisions of type T, keyed by text the handler builds from everything
  // the decision reads (shardings, shapes, dimension numbers); one table per T for the run.
  template <typename T>
  std::unordered_map<std::string, T>& Decisions() {
    std::shared_ptr<void>& slot = decisions_[std::type_index(typeid(T))];
    if (!slot) slot = std::make_shared<std::unordered_map<std::string, T>>();
    return *static_cast<std::unordered_map<std::string, T>*>(slot.get());
  }

  // BuildJointTiling (joint_tiling.h) over the run's devices, memoised: the same operand maps meet
  // in the same dots on every layer.
  std::optional<TileMap> JointTiling(const std::vector<JointSource>& sources, int64_t num_labels);
  // The joint tilings of the subsets of `sources` (JointTiling above): the candidates the dot,
  // convolution, gather and scatter handlers cost. From all the sources down to none (subset bit
  // masks descending, bit i for sources[i]), each with its subset's size; subsets whose tilings
  // conflict are left out.
  struct SubsetTiling {
    TileMap joint;
    int64_t sources = 0;
  };
  std::vector<SubsetTiling> SubsetJointTilings(const std::vector<JointSource>& sources, int64_t num_labels);

  // ---- the driver (spmd_partitioner.cpp) ----
  // Runs the handlers over one computation's instructions, in post order, emitting into `out`.
  Status PartitionComputation(const Computation* orig, Computation* out);
  // Partitions a called computation (while body/condition, call, conditional branch) with the
  // given parameter shardings, its root resharded to `root_sharding`; once per computation.
  Result<Computation*> PartitionCalled(const Computation* callee, const std::vector<HloSharding>& param_shardings,
                                       const HloSharding& root_sharding);
  // Partitions `inst` by its op family's handler now (a pattern's inner instruction the pattern
  // could not partition after all, or its root), emitting with `inst` as the origin.
  Status PartitionNow(const Instruction& inst);

 private:
  // JointTiling, the joint made by `build` when the memo has none.
  std::optional<TileMap> MemoisedJointTiling(const std::vector<JointSource>& sources, int64_t num_labels,
                                             const std::function<std::optional<TileMap>()>& build);
  // The instruction's patterns, then its handler.
  Status Partition(const Instruction& inst);
  Status RunHandler(const Instruction& inst);

  SpmdOptions options_;
  const HandlerTable& handlers_;
  SpmdBuilder builder_;
  // The memo tables: the run's own, or those of options.memo for this device count and options.
  std::unique_ptr<PartitionTables> own_tables_;
  PartitionTables& tables_;
  TileMapCache& maps_;
  Resharder resharder_;
  std::unordered_map<const Instruction*, PartitionedHlo> values_;
  std::unordered_map<const Computation*, Computation*> partitioned_;
  std::unordered_set<const Instruction*> absorbed_;  // inner parts of patterns, no value of their own
  std::unordered_map<std::type_index, std::shared_ptr<void>>& decisions_;
};

// Masks the padding of v's shards along `dims` with `identity` (SpmdBuilder::MaskPadding on v's
// tile map); v.hlo unchanged when v's sharding has no map.
Instruction* MaskPadding(SpmdContext& ctx, const PartitionedHlo& v, const std::vector<int64_t>& dims, double identity);

}  // namespace shardscope::spmd
