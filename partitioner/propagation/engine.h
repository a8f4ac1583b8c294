// The engine behind ShardingPropagation (sharding_propagation.h): it indexes a module, turns the
// annotations into the starting state (XLA's ProcessShardingInstruction, loop and call
// consistency, shard groups), runs the priority-ordered fixed point over per-computation worklists,
// keeps computation boundaries consistent, post-processes outputs and parameters, records where
// every sharding came from and re-propagates incrementally.
//
// It is the RuleContext every per-op rule (rules.h, rules/*.cpp) runs in: rules compute shardings,
// the engine decides when they run and whether what they offer is an improvement.
//
//   engine.cpp            indexing, preprocessing of annotations, the incremental region, Run/Update
//   engine_inference.cpp  the RuleContext, priorities and support, forward / backward / shard-group
//                         inference, partial annotations, computation-boundary consistency
//   engine_fixpoint.cpp   worklists and the fixed-point iteration, shard_as alignment, post-processing
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/base/status.h"
#include "core/ir/ir.h"
#include "core/sharding/sharding.h"
#include "partitioner/hlo_sharding_util.h"
#include "partitioner/propagation/pending_set.h"
#include "partitioner/propagation/rules.h"
#include "partitioner/propagation/sharding_propagation.h"

namespace shardscope::prop {

// An optional sharding held on the heap: 8 bytes when empty where std::optional<HloSharding> takes
// 288. The engine keeps two per instruction (the user's annotations and the setup's initial
// shardings), nearly all empty: for a 100k-instruction module 1.6 MB instead of 58 MB. A value
// type (copies copy the sharding), read like a std::optional.
class ShardingSlot {
 public:
  ShardingSlot() = default;
  ShardingSlot(std::nullopt_t) {}  // NOLINT: converts like std::optional
  ShardingSlot(const HloSharding& s) : p_(std::make_unique<HloSharding>(s)) {}  // NOLINT
  ShardingSlot(HloSharding&& s) : p_(std::make_unique<HloSharding>(std::move(s))) {}  // NOLINT
  ShardingSlot(const std::optional<HloSharding>& s) : p_(s ? std::make_unique<HloSharding>(*s) : nullptr) {}  // NOLINT
  ShardingSlot(const ShardingSlot& o) : p_(o.p_ ? std::make_unique<HloSharding>(*o.p_) : nullptr) {}
  ShardingSlot(ShardingSlot&&) noexcept = default;
  ShardingSlot& operator=(const ShardingSlot& o) {
    if (this != &o) p_ = o.p_ ? std::make_unique<HloSharding>(*o.p_) : nullptr;
    return *this;
  }
  ShardingSlot& operator=(ShardingSlot&&) noexcept = default;
  ~ShardingSlot() = default;

  bool has_value() const { return p_ != nullptr; }
  explicit operator bool() const { return p_ != nullptr; }
  HloSharding& operator*() { return *p_; }
  const HloSharding& operator*() const { return *p_; }
  HloSharding* operator->() { return p_.get(); }
  const HloSharding* operator->() const { return p_.get(); }
  void reset() { p_.reset(); }
  operator std::optional<HloSharding>() const {  // NOLINT: where a std::optional is wanted
    return p_ ? std::optional<HloSharding>(*p_) : std::nullopt;
  }

 private:
  std::unique_ptr<HloSharding> p_;
};

class PropagationEngine final : public RuleContext {
 public:
  explicit PropagationEngine(PropagationOptions options);

  // Full propagation over `module`: its current shardings are the annotations. Sets *changed when
  // any sharding changed.
  Status Run(Module& module, bool* changed);
  // After the annotations of `edited` were changed in place (same module, same structure: see
  // SameStructure), re-propagates the region they can reach. *repaint receives the instructions
  // whose sharding differs from before.
  Status Update(const std::vector<Instruction*>& edited, bool* changed,
                std::vector<const Instruction*>* repaint);
  // The module is the one last run on, with the same instructions.
  bool SameStructure(Module& m) const;
  // The annotations of the last run (user input), by instruction.
  std::unordered_map<const Instruction*, std::optional<HloSharding>> Annotations() const;

  const ShardingOrigin* OriginOf(const Instruction& inst) const;
  bool IsUserAnnotation(const Instruction& inst) const;
  PropagationReport Report(double ms, bool incremental, bool changed) const;

  // ---- RuleContext ----
  bool Improve(Instruction* inst, const HloSharding& candidate, bool allow_aggressive_resharding,
               const Instruction* source, std::string_view rule) override;
  bool ImproveElement(Instruction* inst, const HloSharding& candidate, int64_t index, bool allow_aggressive_resharding,
                      const Instruction* source, std::string_view rule) override;
  void Set(Instruction* inst, HloSharding sharding, const Instruction* source, std::string_view rule) override;
  const Instruction* CallerOf(const Computation* computation) const override;
  std::optional<HloSharding> LookaheadUserSharding(const Instruction* inst) override;
  const hlo_sharding_util::DotDims& DotDimsOf(const Instruction& dot) override;
  const HloSharding& OutputShardingFromDotOperand(const Instruction& dot, int operand_index) override;
  void NoteSecondSource(const Instruction* inst, const Instruction* other) override;

 private:
  // ---- structure (rebuilt when the module changes shape) ----
  struct CompInfo {
    Computation* comp = nullptr;
    std::vector<Instruction*> post;  // XLA post order
    PendingSet fwd, bwd, group;      // worklists: positions in `post`
  };
  Module* module = nullptr;
  int64_t instruction_count = 0;
  std::vector<Instruction*> by_id;
  std::vector<CompInfo> comps;
  std::vector<int32_t> comp_of, pos_of;
  std::vector<const OpRule*> rule_of;
  std::unordered_map<const Computation*, Instruction*> caller;  // partitionable sub-computations
  std::vector<std::string> unsupported;

  // ---- annotations and preprocessing ----
  struct Group {
    int64_t id = 0;
    bool shard_as = true;
    std::vector<Instruction*> members;
  };
  struct Setup {
    std::vector<ShardingSlot> initial;
    std::vector<ShardingOrigin> origin;
    std::vector<uint8_t> provided;
    std::unordered_map<int64_t, std::vector<int64_t>> unspecified;
    std::vector<int32_t> group_of;
    std::vector<Group> groups;
    std::vector<HloSharding> saved_root;
    std::unordered_map<int64_t, HloSharding> saved_params;
    bool root_is_while = false;
  };
  std::vector<ShardingSlot> annotation;  // by id: user input
  Setup setup;

  // ---- propagation state ----
  PropagationOptions options;
  std::vector<ShardingOrigin> origin;
  std::vector<uint8_t> in_region;
  Direction direction = Direction::kForward;
  int64_t iteration = 0;
  int64_t rule_evaluations = 0;
  int64_t inferred = 0;
  bool allow_output = false, allow_params = false;

  // Every change of an instruction's sharding bumps its version; memoised rule results are keyed
  // by the versions they read.
  std::vector<uint32_t> version;
  std::vector<std::unique_ptr<hlo_sharding_util::DotDims>> dot_dims;
  struct ForwardMemo {
    uint32_t operand_version = 0;
    HloSharding result;
  };
  std::unordered_map<uint64_t, ForwardMemo> dot_forward_memo;  // key: dot id * 2 + operand
  struct BackwardMemo {
    uint32_t user_version = 0, other_version = 0;
    bool combine = false, early = false;
    std::optional<HloSharding> result;
  };
  std::unordered_map<uint64_t, BackwardMemo> backward_memo;  // key: user id << 24 | operand index

  // ---- skipping evaluations that cannot change anything ----
  // An evaluation is a pure function of the shardings it reads and of the priority level's
  // settings; refinement is idempotent. So when an op was last evaluated at an equivalent level
  // and none of its inputs changed since, evaluating again would change nothing.
  uint64_t clock = 1;
  std::vector<uint64_t> change_time, fwd_time, bwd_time;
  std::vector<int8_t> fwd_class, bwd_class;

  size_t Id(const Instruction* inst) const { return static_cast<size_t>(inst->id()); }
  bool Known(const Instruction* inst) const {
    return inst->id() >= 0 && inst->id() < static_cast<int64_t>(by_id.size()) && by_id[Id(inst)] == inst;
  }
  void Bump(const Instruction* inst) {
    if (!Known(inst)) return;
    ++version[Id(inst)];
    change_time[Id(inst)] = ++clock;
  }

  // ---- engine.cpp: indexing, preprocessing, the incremental region ----
  static void PostOrder(const Computation& comp, std::vector<Instruction*>* out);
  Status Index(Module& m);
  // Related instructions across computation boundaries (XLA GetRelatedInstructions).
  std::vector<Instruction*> Related(Instruction* inst) const;
  // XLA ProcessShardingInstruction + loop consistency + the provided (kept) set.
  Setup BuildSetup(const std::vector<ShardingSlot>& ann) const;
  // Nodes whose sharding cannot change during propagation: they bound an incremental region.
  bool IsFixed(const Setup& s, const Instruction* inst) const;
  // Instructions whose shardings can depend on the seeds: connected through operands, users,
  // co-operands of a user, computation boundaries and shard groups, stopping at fixed shardings.
  std::vector<uint8_t> Region(const std::vector<size_t>& seeds, const Setup& old_setup) const;
  void ApplySetupToRegion();
  void Configure();

  // ---- engine_inference.cpp: what a rule may offer and where it lands ----
  void Assign(Instruction* inst, HloSharding sharding, Direction dir, const Instruction* source, std::string_view rule);
  // XLA CanPropagateThroughAtAggressiveLevel / SupportSpatialPartitioning.
  bool IsElementwiseLike(const Instruction& inst) const;
  bool CanPropagateThrough(const Instruction& inst, int aggr) const;
  bool SupportsSpatialPartitioning(const Instruction& inst, bool allow_output_here, bool allow_params_here) const;
  // XLA InferShardingFromOperands / InferShardingFromUsers / InferShardingFromShardGroup.
  bool InferFromOperands(Instruction& inst);
  // The sharding `user` offers its operand `inst` (XLA GetShardingFromUser). Points into a memo or
  // into *scratch; nullptr when the user offers nothing.
  const HloSharding* CandidateFromUser(const Instruction& inst, const Instruction& user,
                                       std::optional<HloSharding>* scratch);
  std::optional<HloSharding> ShardingFromUser(const Instruction& inst, const Instruction& user);
  bool InferFromUsers(Instruction& inst);
  bool InferFromShardGroup(Instruction& inst, const Group& group);
  // Partial annotations (Sharding custom-call with unspecified dims) and manual conversions.
  bool RefineFromAuto(const HloSharding& to_merge, const std::vector<int64_t>& unspec, HloSharding* auto_s,
                      HloSharding* manual_s);
  bool RefineFromManual(const HloSharding& to_merge, const std::vector<int64_t>& unspec, HloSharding* auto_s,
                        HloSharding* manual_s);
  // The manual-conversion custom-call right after a partial annotation, when it agrees on the
  // unspecified dims. Returns false when there is one that disagrees.
  bool ConversionAfter(Instruction& annotate, const std::vector<int64_t>& unspec, Instruction** conv);
  bool InferUnspecifiedFromOperand(Instruction& annotate, const std::vector<int64_t>& unspec, Instruction** conv_after);
  bool InferUnspecifiedFromUsers(Instruction& annotate, const std::vector<int64_t>& unspec, Instruction** conv_after);
  bool InferUnspecifiedFromShardGroup(Instruction& annotate, const std::vector<int64_t>& unspec, const Group& group);
  // Computation-boundary consistency (XLA MaybeComputationPropagation).
  void ComputationPropagation(Instruction* inst, std::vector<Instruction*>* changed);

  // ---- engine_fixpoint.cpp: worklists, the fixed point and the passes around it ----
  static int ForwardClass(const Instruction& inst, int aggr);
  static int BackwardClass(int aggr) { return std::min(aggr, 2); }
  bool ForwardInputsUnchanged(const Instruction& inst) const;
  bool BackwardInputsUnchanged(const Instruction& inst) const;
  // Ops whose forward rule reads more than their operands (dot lookahead, parameters of called
  // computations) are always evaluated.
  static bool ForwardReadsOnlyOperands(const Instruction& inst);
  void MarkFwd(const Instruction* i);
  void MarkBwd(const Instruction* i);
  void MarkGroup(const Instruction* i);
  void ClearCache(const Instruction* hlo, const Instruction* hlo_for_users = nullptr);
  void AfterChange(Instruction* inst);
  const std::vector<int64_t>* Unspecified(const Instruction* inst) const;
  bool RunToFixPoint(int aggr, bool propagate_shard_group);
  void AlignShardAsGroups();
  void PostProcess();
  // The whole pass over the region: every level to its fixed point, shard_as alignment,
  // post-processing, iota forms.
  bool Propagate();
};

}  // namespace shardscope::prop
