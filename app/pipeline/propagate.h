// The propagation stage of the analysis pipeline: the one place that sets up the options of
// GSPMD sharding propagation (partitioner/propagation/sharding_propagation.h) for the CLI, the GUI and the benchmarks,
// a one-shot run, and an incremental session that is given the whole set of user annotations each
// time and re-propagates only what changed (the GUI's edits).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/base/cancellation.h"
#include "core/base/status.h"
#include "core/ir/ir.h"
#include "core/sharding/sharding.h"
#include "partitioner/propagation/sharding_propagation.h"

namespace shardscope::pipeline {

// May propagation shard the entry computation's parameters and outputs that carry no sharding?
//   kShard: yes (what JAX asks for when no in/out shardings are given; XLA's
//           allow_spmd_sharding_propagation_to_output/parameters). Unannotated optimizer state and
//           updated weights then stay sharded instead of being gathered. The CLI's and the GUI's
//           default.
//   kKeep:  XLA's pass defaults: they keep what they have, unannotated ones stay without one.
enum class EntryIo { kShard, kKeep };

// The propagation options every caller starts from.
PropagationOptions StandardPropagationOptions(EntryIo io = EntryIo::kShard);

// One full propagation; the engine is kept for Explain().
struct PropagationRun {
  PropagationReport report;
  std::unique_ptr<ShardingPropagation> engine;
};
Result<PropagationRun> Propagate(Module& module, const PropagationOptions& options = StandardPropagationOptions(),
                                 const CancellationToken& cancel = {});

// The user's annotations of a module, by instruction id (Module::Clone keeps ids), taken off its
// instructions: a module read from a file or built by the zoo carries them as shardings.
std::map<int64_t, HloSharding> TakeAnnotations(Module& module);
// The module's shardings as annotations, left in place.
std::map<int64_t, HloSharding> AnnotationsOf(const Module& module);

// Every sharding after a propagation, as plain values that outlive the session's next run.
struct PropagatedShardings {
  std::unordered_map<int64_t, HloSharding> shardings;  // by instruction id: every instruction with one
  // Why each sharding is what it is: every instruction's own step (ShardingPropagation::ExplainOne),
  // the annotations' included; ExplainChain(why, id) gives an instruction's chain, nearest cause
  // first. The steps' instruction pointers point into the module given to Snapshot(), not the
  // session's.
  ExplainSteps why;
  PropagationReport report;
  int64_t annotated = 0, inferred = 0, unsharded = 0;
  double millis = 0;  // the propagation itself
};

// An incremental propagation over a private copy of a module. Give it the full set of annotations
// every time; it works out what changed and calls ShardingPropagation::Update when it can (a full
// Run the first time and after an error). One thread at a time.
class PropagationSession {
 public:
  PropagationSession(std::unique_ptr<Module> module, PropagationOptions options = StandardPropagationOptions());
  ~PropagationSession();
  PropagationSession(const PropagationSession&) = delete;
  PropagationSession& operator=(const PropagationSession&) = delete;

  // Sets the annotations (by instruction id; every other instruction loses its sharding unless
  // propagation infers one) and completes the shardings. The report's `incremental` says which
  // way it went; with nothing changed it is an empty incremental report.
  Result<PropagationReport> Run(const std::map<int64_t, HloSharding>& annotations, const CancellationToken& cancel = {});

  // The shardings after the last successful Run, with the why-chains of the inferred ones bound to
  // `display` (a module with the same instruction ids, e.g. the one this session was cloned from).
  PropagatedShardings Snapshot(const Module& display) const;

  const Module& module() const { return *module_; }
  Module& mutable_module() { return *module_; }
  const ShardingPropagation* engine() const { return engine_.get(); }
  const std::map<int64_t, HloSharding>& annotations() const { return annotations_; }

 private:
  std::unique_ptr<Module> module_;
  PropagationOptions options_;
  std::unique_ptr<ShardingPropagation> engine_;
  std::unordered_map<int64_t, Instruction*> by_id_;
  std::map<int64_t, HloSharding> annotations_;
  std::optional<PropagationReport> last_report_;
  double last_millis_ = 0;
  bool ran_ = false;
};

}  // namespace shardscope::pipeline
