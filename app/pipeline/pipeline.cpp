#include "app/pipeline/pipeline.h"

#include <chrono>

#include "simulator/schedule.h"

namespace shardscope::pipeline {

std::string_view StageName(Stage stage) {
  switch (stage) {
    case Stage::kPropagate: return "sharding propagation";
    case Stage::kPass: return "strategy pass";
    case Stage::kPartition: return "SPMD partitioning";
    case Stage::kPostPartition: return "post-partitioning passes";
    case Stage::kWeightUpdateSharding: return "weight-update sharding";
    case Stage::kAllReduceCombiner: return "all-reduce combiner";
    case Stage::kVerify: return "numerical verification";
    case Stage::kEstimate: return "collective estimates";
    case Stage::kSimulate: return "simulation";
    case Stage::kStore: return "storing the run";
  }
  return "stage";
}

const Module* PipelineResult::program() const {
  if (partition && partition->module) return partition->module.get();
  return module.get();
}

std::string PipelineResult::FailureText() const {
  if (ok()) return {};
  return std::string(StageName(failed.value_or(Stage::kPropagate))) + " failed: " + status.error().message;
}

namespace {

class StageClock {
 public:
  StageClock(PipelineResult& result, Stage stage, const PipelineOptions& options)
      : result_(result), stage_(stage), t0_(std::chrono::steady_clock::now()) {
    if (options.on_stage) options.on_stage(stage);
  }
  ~StageClock() {
    result_.millis[stage_] +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  PipelineResult& result_;
  Stage stage_;
  std::chrono::steady_clock::time_point t0_;
};

// Records a failure of `stage` (a stage that stopped for its token counts as cancelled).
PipelineResult& Fail(PipelineResult& r, Stage stage, const Error& error, const CancellationToken& cancel) {
  r.status = error;
  r.failed = stage;
  r.cancelled = cancel.cancelled();
  return r;
}

// True (and the result marked cancelled) when the token says stop before `stage`.
bool Stopped(PipelineResult& r, Stage stage, const CancellationToken& cancel) {
  if (!cancel.cancelled()) return false;
  Fail(r, stage, CancelledError(std::string(StageName(stage))), cancel);
  return true;
}

}  // namespace

PipelineResult RunPipeline(std::unique_ptr<Module> module, const PipelineOptions& options, const CancellationToken& cancel) {
  PipelineResult r;
  r.module = std::move(module);
  if (!r.module) return std::move(Fail(r, Stage::kPropagate, Error("no module"), cancel));
  const bool partition = options.partitioning == Partitioning::kAlways ||
                         (options.partitioning == Partitioning::kWhenNeeded && NeedsPartitioning(*r.module));
  // The FLOPs that count as useful are those of the module as given (they do not depend on its
  // shardings), counted before the module is rewritten.
  double model_flops = 0;
  if (options.simulation && partition && options.simulation->model_flops == 0) model_flops = CountModuleFlops(*r.module);

  // 1. Propagation (an SPMD program given as such is not propagated).
  if (options.propagation && (partition || options.partitioning == Partitioning::kNever)) {
    if (Stopped(r, Stage::kPropagate, cancel)) return r;
    StageClock clock(r, Stage::kPropagate, options);
    auto p = Propagate(*r.module, *options.propagation, cancel);
    if (!p.ok()) return std::move(Fail(r, Stage::kPropagate, p.error(), cancel));
    r.propagation = std::move(p).value();
    if (!options.keep_propagation_engine) r.propagation->engine.reset();
  }
  // 2. Strategy passes.
  for (const ModulePass& pass : options.passes) {
    if (Stopped(r, Stage::kPass, cancel)) return r;
    StageClock clock(r, Stage::kPass, options);
    if (Status st = pass.run(*r.module, cancel); !st.ok()) {
      return std::move(Fail(r, Stage::kPass, Error(pass.name + ": " + st.error().message), cancel));
    }
  }
  // 3. Partitioning.
  if (partition) {
    if (Stopped(r, Stage::kPartition, cancel)) return r;
    StageClock clock(r, Stage::kPartition, options);
    SpmdOptions spmd = options.spmd;
    if (spmd.num_partitions == 0 && options.topology) spmd.num_partitions = options.topology->num_devices();
    auto p = Partition(*r.module, spmd, cancel);
    if (!p.ok()) return std::move(Fail(r, Stage::kPartition, p.error(), cancel));
    r.partition = std::move(p).value();
  }
  // 3b. Post-partitioning passes.
  if (r.partition && options.while_loop_all_reduce_code_motion) {
    if (Stopped(r, Stage::kPostPartition, cancel)) return r;
    StageClock clock(r, Stage::kPostPartition, options);
    auto moved = WhileLoopAllReduceCodeMotionOf(*r.partition);
    if (!moved.ok()) return std::move(Fail(r, Stage::kPostPartition, moved.error(), cancel));
    r.code_motion = std::move(moved).value();
  }
  // 3c. Weight-update sharding.
  if (options.weight_update_sharding) {
    if (Stopped(r, Stage::kWeightUpdateSharding, cancel)) return r;
    StageClock clock(r, Stage::kWeightUpdateSharding, options);
    if (r.partition) {
      r.collectives_before_weight_update_sharding = r.partition->collectives;
      auto w = ShardWeightUpdatesOf(*r.partition, *options.weight_update_sharding);
      if (!w.ok()) return std::move(Fail(r, Stage::kWeightUpdateSharding, w.error(), cancel));
      r.weight_update_sharding = std::move(w).value();
    } else {
      auto w = ShardWeightUpdates(*r.module, *options.weight_update_sharding);
      if (!w.ok()) return std::move(Fail(r, Stage::kWeightUpdateSharding, w.error(), cancel));
      r.weight_update_sharding = std::move(w).value();
      r.weight_update_sharding->input = std::move(r.module);
      r.module = std::move(r.weight_update_sharding->module);
    }
  }
  // 3d. The all-reduce combiner (after weight-update sharding, whose clusters start at single
  //     all-reduces), on the program and on the program before the pass.
  if (r.partition && options.all_reduce_combiner) {
    if (Stopped(r, Stage::kAllReduceCombiner, cancel)) return r;
    StageClock clock(r, Stage::kAllReduceCombiner, options);
    auto c = CombineAllReducesOf(*r.partition, *options.all_reduce_combiner);
    if (!c.ok()) return std::move(Fail(r, Stage::kAllReduceCombiner, c.error(), cancel));
    r.all_reduce_combiner = std::move(c).value();
    if (r.weight_update_sharding && r.weight_update_sharding->input) {
      auto b = CombineAllReduces(*r.weight_update_sharding->input, *options.all_reduce_combiner);
      if (!b.ok()) return std::move(Fail(r, Stage::kAllReduceCombiner, b.error(), cancel));
      const int64_t threshold = options.all_reduce_combiner->threshold_bytes;
      RecordCombinedCollectives(
          b->combined,
          [&](const CombinedCollective& x, const std::vector<const InsertedCollective*>&) {
            return CombinedAllReduceReason(x, threshold);
          },
          &r.collectives_before_weight_update_sharding);
      r.all_reduce_combiner_before_weight_update_sharding = std::move(b).value();
    }
  }
  // 4. Verification (of the step programs composed, when weight-update sharding split the step).
  if (r.partition && options.verify) {
    if (Stopped(r, Stage::kVerify, cancel)) return r;
    StageClock clock(r, Stage::kVerify, options);
    std::unique_ptr<Module> composed;
    if (r.weight_update_sharding && r.weight_update_sharding->split) {
      auto c = ComposeStepPrograms(*r.weight_update_sharding, *r.partition->module);
      if (!c.ok()) return std::move(Fail(r, Stage::kVerify, c.error(), cancel));
      composed = std::move(c).value();
    }
    r.verification = Verify(*r.module, composed ? *composed : *r.partition->module, r.partition->module->num_partitions,
                            *options.verify, cancel);
  }
  // 5. Estimates.
  if (r.partition && options.estimate_collectives && options.topology) {
    if (Stopped(r, Stage::kEstimate, cancel)) return r;
    StageClock clock(r, Stage::kEstimate, options);
    r.estimates = EstimateCollectives(*r.partition, *options.topology, options.estimate_options);
  }
  // 6. Simulation.
  if (options.simulation && options.topology) {
    if (Stopped(r, Stage::kSimulate, cancel)) return r;
    StageClock clock(r, Stage::kSimulate, options);
    SimulationOptions so = *options.simulation;
    if (model_flops > 0) so.model_flops = model_flops;
    // Which original instruction each SPMD one came from: what a timeline event is traced back
    // to, so a run without timelines keeps none.
    const auto origins =
        r.partition && so.timelines ? SpmdOrigins(*r.partition) : std::map<std::string, std::string>{};
    if (r.weight_update_sharding && r.weight_update_sharding->input && options.simulate_before_weight_update_sharding) {
      auto before = SimulateStep(*r.weight_update_sharding->input, *options.topology, so, origins, cancel);
      if (!before.ok()) return std::move(Fail(r, Stage::kSimulate, before.error(), cancel));
      r.simulation_before = std::move(before).value();
    }
    auto sim = SimulateStep(*r.program(), *options.topology, so, origins, cancel);
    if (!sim.ok()) return std::move(Fail(r, Stage::kSimulate, sim.error(), cancel));
    r.simulation = std::move(sim).value();
  }
  // 7. Store.
  if (r.simulation && options.store) {
    if (Stopped(r, Stage::kStore, cancel)) return r;
    StageClock clock(r, Stage::kStore, options);
    auto id = options.store->Save(r.simulation->run, cancel);
    if (!id.ok()) return std::move(Fail(r, Stage::kStore, id.error(), cancel));
    r.run_id = id.value();
    r.simulation->run.id = r.run_id;
  }
  return r;
}

}  // namespace shardscope::pipeline
