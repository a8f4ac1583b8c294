// The reference evaluator: runs an HLO module on one device with dense tensors (Eigen for dot).
//
// Semantics follow XLA's HloEvaluator where XLA leaves a choice open:
//  - dynamic-slice / dynamic-update-slice / gather clamp start indices into range;
//  - scatter skips an update whose window does not fit into the operand;
//  - reductions (reduce, dot, convolution, all-reduce) accumulate in double and round the result to
//    the output type once (XLA accumulates bf16 in f32 on TPU; element-by-element bf16 rounding of
//    a long sum would make every reordering look like a bug);
//  - every write rounds to the element type (bf16 values are always bf16-representable);
//  - integer division by zero gives -1 (unsigned: all ones), x % 0 gives x;
//  - float -> int conversion truncates and saturates, NaN -> 0.
// Collectives need the other devices: Evaluate() runs a module that contains any on a one-device
// virtual cluster (core/virtual_cluster.h); Evaluator::EvaluateInstruction refuses them.
// Custom-calls: Sharding, LayoutConstraint, SPMDFullToShardShape (the device's block of the
// operand), SPMDShardToFullShape (shape-preserving here; the cluster assembles the blocks), TopK,
// _SPMDInternalOp_RotateRight. Not supported (an Error naming the op and the instruction, never a
// crash): complex types, infeed/outfeed/send/recv, fft, cholesky, triangular-solve, ragged-dot,
// rng-bit-generator and other custom-call targets.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <unordered_map>
#include <vector>

#include "core/ir/ir.h"
#include "core/base/status.h"
#include "core/eval/tensor.h"

namespace shardscope {

class ScalarProgram;  // a scalar computation compiled to a flat op list (evaluator.cpp)

struct EvalOptions {
  uint64_t rng_seed = 0x5eedULL;       // rng op
  int64_t partition_id = 0;            // partition-id op
  int64_t replica_id = 0;              // replica-id op
  int64_t max_while_iterations = 10'000'000;  // a while loop running longer is reported as an Error
  // A probe of the conditioning (numeric_verify.h, VerifyReport::ill_conditioned): when true,
  // every float element a sum makes (dot, convolution, an adding reduce or reduce-window) is moved
  // by up to one unit in the last place of the sum of its terms' magnitudes, as rounding partial
  // sums in another order — a partitioned program's — moves it (a maximum or minimum is exact in
  // any order). Drawn from its own stream (probe_seed); the rng op's is untouched.
  bool probe_sums = false;
  uint64_t probe_seed = 0;
};

class Evaluator {
 public:
  explicit Evaluator(EvalOptions options = {});
  ~Evaluator();
  Evaluator(Evaluator&&) noexcept;
  Evaluator& operator=(Evaluator&&) noexcept;

  const EvalOptions& options() const { return options_; }
  void set_partition_id(int64_t id) { options_.partition_id = id; }
  void set_replica_id(int64_t id) { options_.replica_id = id; }

  // Runs the entry computation. `args` must match the entry parameters (shape checked).
  Result<Tensor> EvaluateModule(const Module& module, const std::vector<Tensor>& args);
  Result<Tensor> EvaluateComputation(const Computation& computation, const std::vector<Tensor>& args);
  // One instruction given its operand values (in operand order). Called computations (while,
  // call, conditional, to_apply, comparators) run on this device. Collectives give an Error.
  Result<Tensor> EvaluateInstruction(const Instruction& inst, const std::vector<const Tensor*>& operands);

  // The instructions of `c` in evaluation order (cached).
  const std::vector<const Instruction*>& Order(const Computation& c);
  // `c` compiled for fast per-element calls (reducers, comparators, combiners) when it is made of
  // scalar elementwise ops, compare, select, clamp, convert, bitcast-convert and constants (with an
  // optional tuple root); nullptr otherwise. Cached.
  const ScalarProgram* ScalarProgramFor(const Computation& c);

 private:
  Result<Tensor> Dispatch(const Instruction& inst, const std::vector<const Tensor*>& ops);
  // EvalOptions::probe_sums on the result of `inst`.
  void ProbeSum(const Instruction& inst, const std::vector<const Tensor*>& operands, Tensor& result);

  EvalOptions options_;
  std::mt19937_64 rng_;
  std::mt19937_64 probe_rng_;
  std::unordered_map<const Computation*, std::vector<const Instruction*>> order_cache_;
  std::unordered_map<const Computation*, std::unique_ptr<ScalarProgram>> scalar_programs_;
  int64_t depth_ = 0;
};

// Runs `module` on one device. A module containing collectives runs on a one-device virtual
// cluster (every group is that device alone).
Result<Tensor> Evaluate(const Module& module, const std::vector<Tensor>& args, const EvalOptions& options = {});

// Checks that `args` fit the parameters of `c` (count and shapes); the Error names the parameter.
Status CheckArguments(const Computation& c, const std::vector<Tensor>& args);

// Combines equally shaped arrays elementwise with the binary computation `fn` (the all-reduce
// reduction): fn(...fn(fn(v0, v1), v2)..., vn). A simple reducer (add/multiply/maximum/minimum/and/
// or/xor of its two parameters) accumulates in double (int64 for integers) and rounds once; any
// other computation is called per element.
Result<Tensor> CombineElementwise(Evaluator& ev, const Computation& fn, const std::vector<const Tensor*>& values);

// Manual regions (SPMDFullToShardShape / SPMDShardToFullShape): a `full`-shaped array is cut into
// `piece`-shaped blocks (ceil(full / piece) per dim); returns which block `device` holds, reading
// the data tiling of `sharding` (its tile count per dim must be a multiple of the block count; a
// finer tiling leaves several devices on one block).
Result<std::vector<int64_t>> ManualBlockIndex(const HloSharding& sharding, const std::vector<int64_t>& full,
                                              const std::vector<int64_t>& piece, int64_t device);
// The index of `device` along the manual subgroup dims of `sharding` (empty when it has none):
// devices with equal keys are in the same manual group.
std::vector<int64_t> ManualGroupKey(const HloSharding& sharding, int64_t device);

// "%name (opcode) in computation" for messages.
std::string DescribeInstruction(const Instruction& inst);

}  // namespace shardscope
