// Numerical verification of a partitioning: run the original module on one device and the SPMD
// program on N virtual devices with the same (seeded random) inputs, reassemble the shards and
// compare (DESIGN.md, "The data, as it flows", step 5).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/ir/ir.h"
#include "core/sharding/sharding.h"
#include "core/base/status.h"
#include "core/eval/tensor.h"

namespace shardscope {

struct VerifyReport {
  bool match = false;
  double max_abs_error = 0;  // over all output leaves (inf when NaN/inf placement differs)
  double tolerance = 0;      // the tolerance of the leaf closest to (or furthest over) its limit
  std::string detail;        // one line per output leaf; the first mismatch with its index and values
  // Float output elements the comparison could not judge: where the unpartitioned program itself
  // moves by more than a quarter of the tolerance when its sums are rounded in another order (in
  // either of two draws, each sum moved by up to an ulp of its terms' magnitudes,
  // EvalOptions::probe_sums: the square root
  // of a random second moment near zero, a LayerNorm of a tiny variance, chaotic growth through
  // many layers), the partitioned program's order of partial sums may move it over. So are the
  // elements NaN on one side only in a leaf whose reference holds NaN elsewhere (the edge of an
  // op's domain, which random inputs reach). Counted only when the plain comparison found
  // differences (NumericVerifyOptions::judge_conditioning); those elements are then left out of
  // `match`.
  int64_t ill_conditioned = 0;
  int64_t float_elements = 0;  // float output elements compared
  int64_t over_tolerance = 0;  // elements judged and over their tolerance (every type)
  // Some leaf over its tolerance in more than two elements, more than 1% of them and more than a
  // tenth of its ill-conditioned ones (or in an integer, or in its shape): the way a wrong
  // partitioning differs.
  bool dense_difference = false;
  // Too many ill-conditioned elements for the rest to prove much (more than 2 and more than 1% of
  // the float elements) and no dense difference, or more than a tenth of them (chaotic growth:
  // then no difference is evidence either): `match` is false and nothing is claimed either way
  // (stray elements over the tolerance there are what ill-conditioning leaks past the probe).
  bool inconclusive = false;
};

// What a tool shows of a numerical check: its outcome, or why there is none (the check was not
// asked for, the two programs could not be run, or they are too large to evaluate here).
struct VerificationVerdict {
  enum class State { kNotRun, kMatch, kMismatch, kError, kSkipped };
  State state = State::kNotRun;
  VerifyReport report;  // kMatch / kMismatch
  std::string reason;   // kError: the error; kSkipped: why it was not run
  double millis = 0;    // the check itself
};

struct NumericVerifyOptions {
  // Relative tolerances (times max(1, max |reference|) of the leaf, times max(1, log2 of the
  // largest reduction size in the original module)).
  double f64_rtol = 1e-9;
  double f32_rtol = 1e-4;
  double f16_rtol = 2e-3;
  double bf16_rtol = 1e-2;
  double f8_rtol = 1.5e-1;
  // Random inputs, so that wrong reduction identities, overflow and cancellation cannot hide:
  // floats are float_range x 2^k x (a uniform value in [-1, 1]), k an integer uniform in
  // [-float_exponent_spread, float_exponent_spread] (mixed magnitudes and signs). Integers: with
  // probability int_full_range_share a tensor is drawn from the type's extremes — in equal parts
  // uniform over the full range, just below the type's maximum, just above its minimum (a wrong
  // min/max identity or an overflow shows only when every value of a shard lies there) — else
  // uniform in [int_min, int_max] (small values, as indices and counts usually are). Pred: a fair
  // coin.
  double float_range = 1.0;
  int float_exponent_spread = 4;
  int64_t int_min = 0, int_max = 7;
  double int_full_range_share = 0.5;
  uint64_t rng_seed = 0x5eedULL;  // for the rng op on both sides
  // When the comparison finds differences, run the unpartitioned program again with its sums
  // rounded in another order and leave out the elements that this moves too far
  // (VerifyReport::ill_conditioned). A wrong partitioning differs on well-conditioned elements too.
  bool judge_conditioning = true;
};

// Why `module` cannot be checked numerically whatever its size, or nullopt when it can: it reads
// data by infeed (streamed from the host at run time: the evaluator has no host to read it from)
// or sends data by outfeed (what a partitioned program sends its host is not compared, so a match
// of the outputs alone would say too much). VerifyPartitioned refuses such a module with this
// reason; callers that report a skipped check ask first.
std::optional<std::string> WhyNotNumericallyVerifiable(const Module& module);

// Original vs SPMD: random inputs from `seed` for the original's entry parameters; the original
// runs on one device; each input is sharded per its parameter's sharding in the ORIGINAL module
// (tiled: the device's shard, zero-padded to the padded shard shape; replicated / maximal /
// manual: whole; partially replicated: the tile of the device's tile index) and passed to the
// SPMD program on `num_devices` devices; the output is reassembled per the original root's
// sharding and compared with a tolerance suited to each leaf's type (ints / pred exact).
// An original that is already partly manual (collectives, SPMDFullToShardShape/ShardToFullShape
// regions) runs on the virtual cluster with every device holding the full inputs; device 0's
// output is the reference.
// An Error means the two modules could not be run or do not fit together (the message says why);
// a numeric difference is a report with match == false.
Result<VerifyReport> VerifyPartitioned(const Module& original, const Module& spmd, int64_t num_devices, uint64_t seed,
                                       const NumericVerifyOptions& options = {});

// ---- Building blocks (also used by the CLI / GUI) ----

// A random tensor of `shape` (tuples recursively) drawn as described in NumericVerifyOptions.
Tensor RandomTensor(const Shape& shape, std::mt19937_64& rng, const NumericVerifyOptions& options = {});
// Random arguments for the parameters of `c`, deterministic in `seed`.
std::vector<Tensor> MakeRandomArguments(const Computation& c, uint64_t seed, const NumericVerifyOptions& options = {});

// Device `device`'s piece of `full` under `sharding` (tuple shardings per leaf; a non-tuple
// sharding on a tuple applies to every leaf). Unreduced: device 0 holds the full value and the
// others zeros (the devices' values sum to it).
Result<Tensor> ShardForDevice(const Tensor& full, const HloSharding& sharding, int64_t device);
// The full tensor of shape `full_shape` reassembled from per-device pieces under `sharding` (each
// tile taken from the lowest-numbered device holding it, padding dropped). A device piece that
// already has the full shape is accepted as-is for a replicated result; an unreduced result is the
// sum over the devices.
Result<Tensor> AssembleFromDevices(const std::vector<Tensor>& per_device, const HloSharding& sharding, const Shape& full_shape);

// Compares `actual` with `expected` leaf by leaf; `reduction_size` scales float tolerances.
VerifyReport CompareTensors(const Tensor& expected, const Tensor& actual, int64_t reduction_size = 1,
                            const NumericVerifyOptions& options = {});

// The largest number of terms any one output element of a reduction sums in `module` (dot
// contracting size, convolution window x input features, reduce / reduce-window extent).
int64_t MaxReductionSize(const Module& module);

}  // namespace shardscope
