// Per-op sharding propagation rules (GSPMD paper §3.5), one small place per op family, keyed by
// opcode. Each family has a forward rule (result sharding from operand shardings) and a backward
// rule (operand sharding from a user's sharding). The engine (engine.h) decides when a rule
// runs (priorities / aggressiveness levels, manual shardings, spatial-partitioning support); the
// rules only compute shardings.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/ir/ir.h"
#include "core/sharding/sharding.h"
#include "partitioner/hlo_sharding_util.h"

namespace shardscope::prop {

// Where a sharding came from (recorded for every sharding the pass sets).
enum class Direction : uint8_t {
  kAnnotation,   // given by the user (or the module) and kept
  kPreprocess,   // derived before propagation (Sharding custom-call operand, loop consistency)
  kForward,      // from operands to the result
  kBackward,     // from a user to its operand
  kShardGroup,   // shard_as / shard_like group member
  kComputation,  // while / conditional / call: loop-carried or call-boundary consistency
  kPostProcess,  // output/parameter fix-ups after the fixed point (e.g. uneven split replicated)
};
std::string_view DirectionName(Direction d);

// The environment a rule runs in. Implemented by the propagation engine (engine.h).
class RuleContext {
 public:
  virtual ~RuleContext() = default;

  int aggressiveness = 0;         // 0..3: which op families may propagate (paper: priorities)
  bool is_spmd = true;
  bool may_combine_partial = false;  // is_spmd && aggressiveness > 0
  bool replace_sharding_with_copy = true;  // Sharding custom-calls behave as copies
  // The dot rules' sharding arithmetic, memoised (set by the engine; never null while rules run).
  hlo_sharding_util::DotShardingMemo* dot_memo = nullptr;

  // Current sharding of an instruction (honours temporary overrides used by lookahead).
  const HloSharding* ShardingOf(const Instruction* inst) const {
    if (!overrides_.empty()) {
      auto it = overrides_.find(inst);
      if (it != overrides_.end()) return it->second ? &*it->second : nullptr;
    }
    return inst->has_sharding() ? &*inst->sharding() : nullptr;
  }
  bool HasSharding(const Instruction* inst) const { return ShardingOf(inst) != nullptr; }
  bool IsSpatiallyPartitioned(const Instruction* inst) const;

  // Refines `inst` with `candidate` if it is an improvement (XLA MaybeImproveInstructionSharding);
  // records `source` and `rule` as the reason. Returns true when the sharding changed.
  virtual bool Improve(Instruction* inst, const HloSharding& candidate, bool allow_aggressive_resharding,
                       const Instruction* source, std::string_view rule) = 0;
  // Same for element `index` of a tuple-shaped instruction (index 0 of an array means the array).
  virtual bool ImproveElement(Instruction* inst, const HloSharding& candidate, int64_t index,
                              bool allow_aggressive_resharding, const Instruction* source,
                              std::string_view rule) = 0;
  // Sets a sharding unconditionally (manual propagation, tuples), recording the reason.
  virtual void Set(Instruction* inst, HloSharding sharding, const Instruction* source, std::string_view rule) = 0;
  // The instruction calling `computation` for partitionable sub-computations (while body and
  // condition, conditional branches, call targets); nullptr otherwise.
  virtual const Instruction* CallerOf(const Computation* computation) const = 0;
  // The user sharding a single-user chain ends in, mapped back to `inst` (dot lookahead).
  virtual std::optional<HloSharding> LookaheadUserSharding(const Instruction* inst) = 0;
  // Memoised dimension analysis of a dot or convolution, and the output sharding one operand's
  // current sharding implies (contracting dims replicated).
  virtual const hlo_sharding_util::DotDims& DotDimsOf(const Instruction& dot) = 0;
  virtual const HloSharding& OutputShardingFromDotOperand(const Instruction& dot, int operand_index) = 0;
  // Records that the instruction's current sharding also drew on `other` (merges from two sides).
  virtual void NoteSecondSource(const Instruction* inst, const Instruction* other) = 0;

 protected:
  std::unordered_map<const Instruction*, std::optional<HloSharding>> overrides_;
};

using ForwardRule = bool (*)(Instruction& inst, RuleContext& ctx);
using BackwardRule = std::optional<HloSharding> (*)(const Instruction& operand, const Instruction& user,
                                                    const HloSharding& user_sharding, RuleContext& ctx);

// What a backward rule reads besides the structure (lets the engine memoise its results).
enum class BackwardInputs : uint8_t {
  kAny,                  // anything (not memoised)
  kUser,                 // only the user's sharding
  kUserAndOtherOperand,  // the user's sharding and its other operand's (dot, convolution)
};

struct OpRule {
  std::string_view family;         // "elementwise", "dot", "broadcast", ...
  ForwardRule forward = nullptr;    // nullptr: no sharding from operands
  BackwardRule backward = nullptr;  // nullptr: users of this kind don't inform operands
  BackwardInputs backward_inputs = BackwardInputs::kAny;
};

// The rule for an instruction's opcode (custom-calls and generic ops resolved by name).
const OpRule& RuleFor(const Instruction& inst);

// ---- Op classification shared by the engine and the rules ----------------------------------------

inline bool IsCustomCall(const Instruction& inst, std::string_view target) {
  return inst.opcode() == Opcode::kCustomCall && inst.custom_call_target == target;
}
// XLA's IsElementwise: unary/binary elementwise, select, clamp, map, rng, copy, converts.
bool IsElementwiseOp(const Instruction& inst);
// Sharding custom-call, X64Combine, LayoutConstraint and shape-preserving custom-calls that pass a
// sharding through (resize, Cholesky, memory placement).
bool IsPassthroughCustomCall(const Instruction& inst);
bool HasSideEffect(const Instruction& inst);
// SPMDFullToShardShape / SPMDShardToFullShape: the boundaries of a manual region.
bool IsConversionCustomCall(const Instruction& inst);
// The unspecified dims of a partial annotation (Sharding custom-call), ascending.
std::vector<int64_t> SortedUnspecifiedDims(const Instruction& inst);
// The generic op named `name` (rng-bit-generator, topk, fft, ...).
bool IsGeneric(const Instruction& inst, std::string_view name);
// Number of users that are not the root of the computation.
int64_t NonRootUsers(const Instruction& inst);
// Operand best suited to give its sharding to `inst` (XLA PickRepresentativeOperand), or nullptr.
const Instruction* PickRepresentativeOperand(const Instruction& inst, const RuleContext& ctx);

// Dimension sizes of compatible shapes, ignoring the element type.
using hlo_sharding_util::CompatibleIgnoringElementType;

// Registration of the op families (called once by RuleFor's table).
struct RuleTable;
void RegisterElementwiseRules(RuleTable& table);
void RegisterShapeRules(RuleTable& table);
void RegisterDotConvRules(RuleTable& table);
void RegisterReductionRules(RuleTable& table);
void RegisterGatherScatterRules(RuleTable& table);
void RegisterControlFlowRules(RuleTable& table);

struct RuleTable {
  std::unordered_map<int, OpRule> by_opcode;                 // Opcode -> rule
  std::unordered_map<std::string, OpRule> by_name;           // generic ops and custom-call targets
  OpRule fallback;
  void Add(Opcode op, OpRule rule) { by_opcode[static_cast<int>(op)] = rule; }
  void AddNamed(std::string name, OpRule rule) { by_name[std::move(name)] = rule; }
};

}  // namespace shardscope::prop
