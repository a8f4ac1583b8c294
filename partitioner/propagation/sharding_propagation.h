// GSPMD sharding propagation (paper §3.5): completes a sharding for every instruction from a few
// user annotations.
//
// The pass alternates forward (operands -> result) and backward (result -> operands) sweeps over
// each computation until nothing changes, at four priority levels ("aggressiveness"): level 0 lets
// only elementwise and pass-through ops propagate, level 1 adds ops that add or remove dimensions
// (dot, convolution, reduce, ...), level 2 adds broadcast backward, level 3 broadcast forward.
// A sharding only ever gets finer (merging compatible partial shardings, Fig. 3); user annotations
// are kept. Partial annotations (Sharding custom-calls with unspecified dims), manual shardings and
// manual subgroups, shard_as / shard_like groups and while / conditional / call boundaries are
// handled as XLA's ShardingPropagation pass does, so XLA HLO propagates the way XLA propagates it.
//
// Every sharding the pass sets records where it came from (instruction, rule, direction, level and
// sweep), so "why is this tensor sharded like that?" has an answer: Explain() follows the chain back
// to user annotations. Update() re-propagates only what one changed annotation can reach.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/ir/ir.h"
#include "core/sharding/sharding.h"
#include "core/base/status.h"
#include "partitioner/propagation/rules.h"

namespace shardscope {
namespace prop {
class PropagationEngine;
}

struct PropagationOptions {
  // SPMD partitioning follows (partial shardings may combine; reverse/custom-calls shardable).
  bool is_spmd = true;
  // May the pass change the entry computation's output sharding? One flag for all outputs or one
  // per element of a tuple-shaped root (XLA: allow_spmd_sharding_propagation_to_output).
  std::vector<bool> propagate_to_output = {false};
  // Same for entry parameters: one flag or one per parameter.
  std::vector<bool> propagate_to_parameters = {false};
  // Only shard scalar broadcasts (to stop CSE merging them across layers); everything else is
  // reverted afterwards.
  bool cse_prevention_only = false;
  // Priority-ordered propagation (paper §3.5): elementwise ops first, then ops that add or remove
  // dimensions, broadcast last forward. Off: every op propagates from the first sweep (only to
  // compare, e.g. Fig. 4).
  bool use_priorities = true;
  // Check the module first (shapes, attributes, shardings against shapes: core/verifier.h) so bad
  // input is an error, not undefined behaviour. Turn off only for modules known to be valid.
  bool verify = true;
  // Record, for every sharding set, the reason (cheap; on by default).
  bool record_provenance = true;
  // The dot rules' sharding arithmetic memoised by value, kept across runs
  // (hlo_sharding_util::DotShardingMemo): null, each run keeps its own. Not thread-safe: a memo
  // serves one run at a time.
  std::shared_ptr<hlo_sharding_util::DotShardingMemo> dot_memo;
};

struct ShardingOrigin {
  prop::Direction direction = prop::Direction::kAnnotation;
  const Instruction* source = nullptr;         // the instruction the sharding was derived from
  const Instruction* second_source = nullptr;  // merged in from a second operand (dot)
  std::string_view rule;                       // op family / rule ("dot", "elementwise", ...)
  int aggressiveness = -1;                     // priority level 0..3 (-1: before propagation)
  int64_t iteration = -1;                      // sweep number
};

struct ExplainStep {
  const Instruction* instruction = nullptr;
  std::string sharding;  // the instruction's current sharding, as text ("none" when unsharded)
  ShardingOrigin origin;
  std::string text;      // one human-readable line
};

struct PropagationReport {
  int64_t instructions = 0;        // instructions considered (the region, for Update)
  int64_t annotated = 0;           // user annotations among them
  int64_t inferred = 0;            // shardings set by the pass
  int64_t unsharded = 0;           // left without a sharding
  int64_t iterations = 0;          // forward+backward sweeps over the module
  int64_t rule_evaluations = 0;    // forward/backward rule calls
  bool changed = false;
  bool incremental = false;
  double elapsed_ms = 0;
  std::vector<std::string> unsupported_ops;  // op names without a propagation rule (generic ops)
  // Update only: instructions whose sharding differs from before the update (to repaint).
  std::vector<const Instruction*> changed_instructions;
};

class ShardingPropagation {
 public:
  explicit ShardingPropagation(PropagationOptions options = {});
  ~ShardingPropagation();
  ShardingPropagation(const ShardingPropagation&) = delete;
  ShardingPropagation& operator=(const ShardingPropagation&) = delete;

  // Completes the module's shardings in place. The shardings present now are the user annotations
  // (remembered for Update and Explain).
  Result<PropagationReport> Run(Module& module);

  // After the annotations of `changed` were edited in the module (set_sharding / clear_sharding on
  // them), recomputes only the region those annotations can reach: clears the inferred shardings
  // there and re-propagates from the remaining annotations and the region's fixed boundary. Gives
  // the same shardings as a full Run with the new annotations. Falls back to a full run when the
  // module's structure changed since Run.
  Result<PropagationReport> Update(Module& module, const std::vector<Instruction*>& changed);

  // Why `inst` has its sharding: the chain of reasons back to user annotations (first step: inst).
  std::vector<ExplainStep> Explain(const Instruction& inst) const;
  // The chain's first step alone (`inst`'s own reason), nullopt when it has no recorded origin. A
  // step per instruction is all a chain needs: ExplainChain() follows them as Explain() does.
  std::optional<ExplainStep> ExplainOne(const Instruction& inst) const;
  std::string ExplainText(const Instruction& inst) const;
  // The recorded origin of `inst`'s sharding, nullptr if it has none / unknown instruction.
  const ShardingOrigin* OriginOf(const Instruction& inst) const;
  // True when `inst` carried a sharding in the input (a user annotation).
  bool IsUserAnnotation(const Instruction& inst) const;

  const PropagationOptions& options() const { return options_; }


 private:
  PropagationOptions options_;
  std::unique_ptr<prop::PropagationEngine> engine_;  // the last run's state (engine.h)
};

// Each instruction's own step (ExplainOne) by instruction id; a chain is rebuilt from them on
// demand. Keeping one step per instruction instead of every instruction's whole chain keeps the
// reasons of a 100k-instruction module in tens of megabytes instead of half a gigabyte.
using ExplainSteps = std::unordered_map<int64_t, ExplainStep>;
// The chain from `id` back to a user annotation, nearest cause first: what Explain() gives when
// `steps` holds ExplainOne() of every instruction with an origin. It follows each step's source by
// id, stops at an annotation, a step it has seen (a cycle), or an instruction without a step.
std::vector<ExplainStep> ExplainChain(const ExplainSteps& steps, int64_t id);

// Convenience: one full propagation with default bookkeeping.
Result<PropagationReport> PropagateShardings(Module& module, const PropagationOptions& options = {});

}  // namespace shardscope
