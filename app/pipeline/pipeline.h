// The analysis pipeline: propagate -> strategy passes -> partition -> verify -> estimate ->
// simulate -> store, over the engines' own types, in one place that the CLI, the GUI and the
// benchmarks call alike (DESIGN.md: app/pipeline). Plain C++: no Qt.
//
// Each stage is also a function of its own (propagate.h, partition.h, simulate.h) for callers that
// keep state between runs (the GUI's incremental propagation, a partitioned program simulated on
// several chips). RunPipeline strings them together as the options say:
//
//   pipeline::PipelineOptions o;
//   o.topology = pipeline::SliceForMesh("tpu-v5e", mesh).value();
//   o.simulation = SimulationOptions{};
//   auto r = pipeline::RunPipeline(std::move(module), o);   // r.simulation->run.summary ...
//
// Strategy passes that act on annotations (pipelining, ...) plug in as ModulePass entries that run
// on the propagated module before it is partitioned. Post-partitioning passes rewrite the SPMD
// program right after the partitioner (Stage::kPostPartition): XLA's WhileLoopAllReduceCodeMotion
// (partitioner/while_loop_all_reduce_code_motion.h) sinks all-reduces that a loop only accumulates,
// such as the pipelined model's weight gradients. Weight-update sharding, which rewrites the
// data-parallel SPMD program, runs after them (options.weight_update_sharding). Last, XLA's
// all-reduce combiner (partitioner/all_reduce_combiner.h) merges small independent all-reduces into
// one per threshold on the program partitioned here, and on the program before weight-update
// sharding too, so both sides of that comparison are batched as XLA batches them. A job is
// cancelled through its CancellationToken, checked between stages (the engines finish the stage
// they are in).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "app/pipeline/partition.h"
#include "app/pipeline/propagate.h"
#include "app/pipeline/simulate.h"
#include "core/base/cancellation.h"
#include "core/base/status.h"
#include "core/eval/numeric_verify.h"
#include "core/ir/ir.h"
#include "partitioner/all_reduce_combiner.h"
#include "partitioner/weight_update_sharding/weight_update_sharding.h"
#include "partitioner/while_loop_all_reduce_code_motion.h"

namespace shardscope::pipeline {

enum class Stage {
  kPropagate,
  kPass,
  kPartition,
  kPostPartition,
  kWeightUpdateSharding,
  kAllReduceCombiner,
  kVerify,
  kEstimate,
  kSimulate,
  kStore
};
// "sharding propagation", "strategy pass", "SPMD partitioning", "post-partitioning passes",
// "weight-update sharding", "all-reduce combiner",
// "numerical verification", "collective estimates", "simulation", "storing the run".
std::string_view StageName(Stage stage);

// A strategy pass: rewrites the propagated module in place (shardings, instructions) before it is
// partitioned. Its error stops the pipeline with Stage::kPass.
struct ModulePass {
  std::string name;
  std::function<Status(Module& module, const CancellationToken& cancel)> run;
};

enum class Partitioning {
  kAlways,
  kWhenNeeded,  // only a module that NeedsPartitioning (else it is taken as an SPMD program and
                // neither propagated nor partitioned)
  kNever,
};

struct PipelineOptions {
  // 1. Propagation; nullopt keeps the shardings the module carries. The engine (with the
  //    provenance Explain needs) is released after the stage unless kept.
  std::optional<PropagationOptions> propagation = StandardPropagationOptions();
  bool keep_propagation_engine = false;
  // 2. Strategy passes on the propagated module, in order.
  std::vector<ModulePass> passes;
  // 3. Partitioning. spmd.num_partitions 0: the topology's device count when there is one, else
  //    the module's num_partitions.
  Partitioning partitioning = Partitioning::kAlways;
  SpmdOptions spmd;
  // 3b. Post-partitioning passes on the program partitioned here (its record follows the rewrite).
  bool while_loop_all_reduce_code_motion = true;
  // 3c. Weight-update sharding of the data-parallel SPMD program (the one partitioned here, or the
  //     module given as an SPMD program); nullopt: not run. The partition's record and program
  //     become the pass's (the main program when the step is split); verification checks the
  //     three step programs composed; with a simulation the program before the pass is simulated
  //     too (PipelineResult::simulation_before).
  std::optional<WeightUpdateShardingOptions> weight_update_sharding;
  // Whether the program before the pass is simulated too (a search that only ranks the result
  // turns it off: half the simulation).
  bool simulate_before_weight_update_sharding = true;
  // 3d. XLA's all-reduce combiner on the program partitioned here (after weight-update sharding;
  //     with it, on the program before the pass as well); nullopt: not run. Off by default: with it
  //     on, the reproductions meet one published figure fewer (docs/weight-update-sharding.md, "The
  //     all-reduce combiner", has the measurements).
  std::optional<AllReduceCombinerOptions> all_reduce_combiner;
  // 4. Numerical verification of a program partitioned here; nullopt: not run.
  std::optional<VerifyOptions> verify;
  // 5. The slice the estimates and the simulation are for.
  std::optional<Topology> topology;
  bool estimate_collectives = false;  // needs a topology
  CollectiveOptions estimate_options;
  // 6. One simulated step of the program (needs a topology); nullopt: not run. model_flops 0: the
  //    FLOPs of the module before partitioning when it is partitioned here.
  std::optional<SimulationOptions> simulation;
  // 7. Where the run is stored (needs a simulation); null: not stored.
  std::shared_ptr<RunDatabase> store;
  // Called as each stage starts (may be empty).
  std::function<void(Stage)> on_stage;
};

struct PipelineResult {
  Status status;                // ok, or the failing stage's error (the engine's own message)
  std::optional<Stage> failed;  // the stage that failed or was cancelled
  bool cancelled = false;

  std::unique_ptr<Module> module;             // the input after propagation and passes
  std::optional<PropagationRun> propagation;  // when propagation ran (engine: see keep_propagation_engine)
  std::optional<PartitionResult> partition;   // when partitioned here
  // When WhileLoopAllReduceCodeMotion ran on it: what moved and what stayed in loops.
  std::optional<WhileLoopAllReduceCodeMotionResult> code_motion;
  // When weight-update sharding ran: what it did (its `input` holds the program before it), and the
  // partitioner's collectives before it.
  std::optional<WeightUpdateShardingResult> weight_update_sharding;
  std::vector<InsertedCollective> collectives_before_weight_update_sharding;
  // When the all-reduce combiner ran: what it combined in the program, and in the program before
  // weight-update sharding (weight_update_sharding->input).
  std::optional<AllReduceCombinerResult> all_reduce_combiner;
  std::optional<AllReduceCombinerResult> all_reduce_combiner_before_weight_update_sharding;
  VerificationVerdict verification;
  std::vector<std::optional<CollectiveCost>> estimates;  // per partition->collectives
  std::optional<Simulation> simulation;
  std::optional<Simulation> simulation_before;  // the step before weight-update sharding
  int64_t run_id = 0;  // stored run
  std::map<Stage, double> millis;  // wall time of each stage that ran

  bool ok() const { return status.ok(); }
  // The program every device runs: the partitioned one, else the module as given.
  const Module* program() const;
  // "SPMD partitioning failed: ..." (empty when ok).
  std::string FailureText() const;
};

PipelineResult RunPipeline(std::unique_ptr<Module> module, const PipelineOptions& options,
                           const CancellationToken& cancel = {});

}  // namespace shardscope::pipeline
