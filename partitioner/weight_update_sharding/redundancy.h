// Cross-replica redundancy (weight-update sharding paper, section 3.1): which values of a
// data-parallel program are equal on every replica, so the computation producing them may be
// split between the replicas.
//
// Sources: compile-time constants (and iota), the result of an all-reduce or all-gather whose one
// group spans every device, and the entry parameters the caller names as receiving the same value
// everywhere (the paper's "annotated parameters": in a program from our partitioner, those whose
// sharding is replicated). An all-reduce over subgroups is not a source (the paper skips that
// case too). Propagation visits each computation producer before consumer: an op without side
// effects or randomness whose inputs are all redundant is redundant; partition-id, replica-id,
// rng, infeed/recv, custom-calls and the collectives that leave different data on each device
// (reduce-scatter, all-to-all, collective-permute) are not.
//
// Control flow: a conditional's result is redundant where its predicate is and every branch
// returns a redundant value; a while loop's state is iterated to a fixed point (the body's output
// feeds its next input) and, when the condition is not redundant, nothing in the loop is (the
// replicas would not agree on the trip count). A computation called from several places is
// analysed with what every call site gives it (the meet), so its result holds for all of them.
// Values are tracked per tuple leaf, so one element of a loop state can be redundant (a weight)
// while another is not (the batch).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/base/status.h"
#include "core/ir/ir.h"

namespace shardscope::wus {

class RedundancyAnalysis {
 public:
  // `redundant_parameters[i]`: entry parameter i receives the same value on every replica.
  // Devices = num_replicas x num_partitions of the module.
  static Result<RedundancyAnalysis> Run(const Module& module, const std::vector<bool>& redundant_parameters);

  // Every leaf of `inst`'s value is equal on all devices.
  bool IsRedundant(const Instruction* inst) const;
  // Leaf `leaf` (tuple leaves in order; 0 for an array) is.
  bool IsLeafRedundant(const Instruction* inst, int64_t leaf) const;
  // Whether `inst` is an all-reduce or all-gather over one group of every device.
  bool IsFullCollective(const Instruction* inst) const;
  int64_t num_devices() const { return devices_; }
  int64_t redundant_instructions() const;

 private:
  using Bits = std::vector<uint8_t>;  // one per tuple leaf
  struct CompState {
    Bits params;  // flattened over the parameters' leaves, in parameter order
    std::vector<size_t> param_offset;  // by parameter number: its first leaf in `params`
    Bits root;
    bool analyzed = false;
  };
  Bits Analyze(const Computation* comp, const Bits& params);
  void RunComputation(const Computation* comp);
  Bits Compute(const Instruction* inst);
  // The leaves of a value (tuples: in order).
  Bits Get(const Instruction* inst) const;
  bool AllOf(const Instruction* inst) const;
  // Where element `index` of a tuple-shaped value starts among its leaves (prefix sums of the
  // elements' leaf counts, built once per tuple: a step's output tuple has thousands of elements,
  // each read by a get-tuple-element, and summing per element was quadratic).
  size_t LeafOffset(const Instruction* tuple, int64_t index);
  void Set(const Instruction* inst, Bits bits);

  int64_t replicas_ = 1, partitions_ = 1, devices_ = 1;
  std::vector<bool> entry_params_;
  // Arrays (one leaf) by instruction id: 0 / 1, 2 = not analysed; tuples in a map.
  std::vector<uint8_t> array_bits_;
  std::unordered_map<const Instruction*, Bits> tuple_bits_;
  std::unordered_map<const Computation*, CompState> comps_;
  std::unordered_map<const Instruction*, bool> full_collective_;
  std::unordered_map<const Instruction*, std::vector<size_t>> leaf_offsets_;
  Status status_;
};

}  // namespace shardscope::wus
