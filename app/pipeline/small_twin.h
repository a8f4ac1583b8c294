// Numerical verification at real sizes, on a small twin (the whole-model issue's "real sizes in the
// GUI": the simulation runs the model at its real sizes while the badge proves the sharding on a
// small instance of the same model).
//
// A zoo model at the sizes of a paper (GSPMD Table 2's 64B Transformer: M=8192, H=65536, batch 64)
// is far beyond what the evaluator can run on every virtual device, so Verify() skips it. Its twin
// is the same zoo model with every size setting shrunk as far as the sharding allows, built with
// the same names, and given the full module's sharding instruction by instruction; the twin's
// partitioned program then runs on the same devices against the twin's original. What it proves
// is that this sharding, partitioned, computes the model — at sizes where the check runs.
//
// How the sizes are chosen (no per-model rule): each integer setting is doubled once in a probe
// build, and the instructions' dimensions that change show what it sizes (each kept at a minimum
// length, `min_dim`, where it was longer). A setting that changes
// the model's mesh (mesh_x, stages) stays. One that changes the number of instructions (layers) is
// a depth: it takes its smallest divisor of at least 2 with which the model builds. Any other is a
// size: it takes the smallest value that keeps every dimension it sizes whole on the tiles the full
// module's sharding splits that dimension into (a dimension of c x setting split t ways needs
// t / gcd(t, c) to divide the setting), when that divides the setting; otherwise it stays.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "app/pipeline/partition.h"
#include "core/base/cancellation.h"
#include "core/base/status.h"
#include "core/eval/numeric_verify.h"
#include "core/ir/ir.h"
#include "core/zoo/zoo.h"

namespace shardscope::pipeline {

// The zoo model `model` at `settings`, given `sharded`'s sharding instruction by instruction (by
// name, where the opcode and rank match; the zoo's names do not depend on the sizes), the rest as
// propagation infers: the same model sharded the same way at other sizes — smaller (the twin
// below) or the ones the user simulates at (app/pipeline/simulated_sizes.h). An instruction
// without a counterpart in `sharded` (a layer beyond its depth) keeps the zoo's own annotation.
struct ShardedAs {
  std::unique_ptr<Module> module;
  int64_t shardings_copied = 0;
};
Result<ShardedAs> BuildShardedAs(std::string_view model, const ZooOverrides& settings, const Module& sharded,
                                 const CancellationToken& cancel = {});

struct SmallTwin {
  ZooOverrides settings;          // the twin's settings (the given ones, shrunk)
  std::string changes;            // "batch 64 -> 8, model 8192 -> 16, ..." (only the changed ones)
  std::unique_ptr<Module> module;  // built and carrying the full module's shardings (complete)
  int64_t shardings_copied = 0;    // instructions that took the full module's sharding by name
};

// The twin of zoo model `model` at `settings`, sharded as `full` is (`full`: that model at those
// settings with complete shardings, as partitioning takes it). Instructions of the twin without a
// counterpart of the same name, opcode and rank in `full` take what propagation infers.
// No dimension of the twin is shorter than `min_dim` where the full one was at least as long.
Result<SmallTwin> BuildSmallTwin(std::string_view model, const ZooOverrides& settings, const Module& full,
                                 int64_t min_dim = 8, const CancellationToken& cancel = {});

struct TwinVerification {
  VerificationVerdict verdict;  // of the twin's partitioned program against the twin
  std::string changes;          // SmallTwin::changes
  int64_t instructions = 0;     // the twin's
};

// The twin's limits: it runs in the background (the GUI's partition job), already as small as its
// sharding allows, and the evaluator's throughput is far above what the interactive check's limits
// (4e8 FLOPs, 4e7 elements over the devices) assume: GSPMD Table 2's 2048-core twin (4e9 elements
// over the devices by their bound) verifies in about 1.4 s.
inline VerifyOptions TwinVerifyLimits() {
  VerifyOptions o;
  o.max_flops = 4e9;
  o.max_elements = 1e10;
  return o;
}

// BuildSmallTwin, then the twin partitioned on `devices` and verified within `limits`: with
// dimensions of at least 8, or 4, or 2, the first the limits take (still above them: kSkipped, as
// Verify() says).
Result<TwinVerification> VerifySmallTwin(std::string_view model, const ZooOverrides& settings, const Module& full,
                                         int64_t devices, const VerifyOptions& limits = TwinVerifyLimits(),
                                         const CancellationToken& cancel = {});

// Any module's twin (one the zoo did not build: a file, a real dump): `full` with its dimensions
// shrunk (core/ir/scale_dims.h, ScaleDimsOptions::shrink: each class of dimensions that must stay
// equal to its smallest size that divides it, keeps every tiled sharding even and is at least
// `min_dim`), carrying `full`'s shardings (complete, as partitioning takes them), partitioned on
// `devices` and verified within `limits`: with dimensions of at least 8, or 4, or 2, the first the
// limits take. `changes` lists the entry parameters' shapes that changed. The depth stays (a
// module's layers are not a setting it names).
Result<TwinVerification> VerifyShrunkTwin(const Module& full, int64_t devices, const VerifyOptions& limits = TwinVerifyLimits(),
                                          const CancellationToken& cancel = {});

}  // namespace shardscope::pipeline
