// Evaluating one candidate, in two steps of increasing cost.
//
// Prepare (cheap, no propagation): builds the candidate's model at its evaluation depths (two small
// depths when the model repeats identical layers, depth.h; else its own) and computes two bounds at
// full depth:
//   * memory: the bytes every device must hold for the step's entry parameters — each annotated
//     one's shard (HloSharding::BytesPerDevice), each unannotated one at best split over every
//     device. Above the chip's HBM the candidate cannot fit, whatever propagation infers.
//   * step time: the module's FLOPs (dots and convolutions, loops by their trip counts: a pipelined
//     module counts its bubbles and recomputation) over every device at the chip's peak rate.
// It also rejects a candidate whose annotations split a dimension into more shards than it has
// elements.
// Evaluate (the full pipeline): propagation, partitioning and one simulated step per depth through
// app/pipeline, then the full-depth figures (exact, or extrapolated linearly from the two depths).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "app/search/candidate.h"
#include "app/search/depth.h"
#include "app/search/mesh_space.h"
#include "core/base/cancellation.h"
#include "core/base/status.h"
#include "simulator/engine.h"
#include "simulator/run_result.h"

namespace shardscope::spmd {
class PartitionMemo;
}
namespace shardscope::hlo_sharding_util {
class DotShardingMemo;
}

namespace shardscope::pipeline {
class RunDatabase;
}


namespace shardscope::search {

struct Bounds {
  int64_t memory_bytes = 0;  // per device, full depth
  double step_time_s = 0;    // full depth
  double flops = 0;          // the module's FLOPs at full depth, all devices
};

enum class Outcome : uint8_t {
  kSimulated,     // partitioned and simulated
  kPrunedMemory,  // the memory bound exceeds the HBM
  kPrunedBound,   // a simulated candidate is at least as fast and as small as this one's bounds
  kInvalid,       // the candidate does not build or over-splits a dimension
  kFailed,        // propagation, partitioning or simulation failed
  kCancelled,
};
std::string_view OutcomeName(Outcome o);  // "simulated", "pruned: memory", "pruned: bound", ...

// The collectives of one kind in a step.
struct CollectiveTotal {
  std::string kind;  // "all-gather", ...
  double count = 0;  // per step (extrapolated counts may be fractional only if the depths differ oddly)
  double bytes = 0;  // payload per device, summed
  double time_s = 0; // summed durations
};

struct CandidateResult {
  Candidate candidate;
  Outcome outcome = Outcome::kSimulated;
  std::string message;  // the error, or why it was pruned
  Bounds bounds;
  double hbm_bytes = 0;        // per device
  RunSummary summary;          // full depth
  bool extrapolated = false;
  std::string evaluation;      // "exact (layers=4)" | "extrapolated from layers=1,2 to 32"
  std::vector<CollectiveTotal> collectives;  // by kind, largest time first
  int64_t run_id = 0;
  double millis = 0;           // wall time of the evaluation
  std::map<std::string, double> stage_millis;  // pipeline stage name -> wall time, summed over depths

  bool simulated() const { return outcome == Outcome::kSimulated; }
  bool fits() const { return simulated() && static_cast<double>(summary.peak_memory_bytes) <= hbm_bytes; }
  double communication_share() const;  // communication stream busy time / step time
  double exposed_share() const;        // communication not overlapped / step time
  // "all-gather 41% (64 x 96 MiB), reduce-scatter 22% (...)": the kinds taking most of the step.
  std::string DominantCollectives(size_t max_kinds = 2) const;
};

struct EvaluationOptions {
  bool extrapolate = true;       // two small depths instead of the full one, when the model allows
  // An exact candidate's stored run carries its per-device detail (timeline, memory curve,
  // collectives). Off: its figures only, as an extrapolated one's (the search stores the detail of
  // its best candidates only: the timelines of every exact candidate were a fifth of its time).
  bool store_detail = true;
  SimulationOptions simulation;  // mesh_text, label and model_flops are set per candidate
};

// A candidate after the cheap step.
struct PreparedCandidate {
  Candidate candidate;
  Pod pod;
  MeshChoice mesh;
  std::optional<DepthRule> depth;
  int64_t full_depth = 0;
  std::vector<int64_t> depths;                   // evaluation depths; one: exact
  // Annotated, per depth. May be dropped once the bounds are known: EvaluateCandidate builds
  // them again from the candidate (not when the module was given: PrepareGivenModule).
  std::vector<std::unique_ptr<Module>> modules;
  bool given_module = false;
  Bounds bounds;
  double hbm_bytes = 0;
  // The partitioner's memo for this candidate's runs: one the search shares between candidates
  // on the same mesh that one thread evaluates one after another (their shardings recur), or none
  // (EvaluateCandidate makes one for the candidate's depths). Not thread-safe.
  std::shared_ptr<spmd::PartitionMemo> partition_memo;
  // Likewise the propagation's memo of the dot rules' sharding arithmetic
  // (hlo_sharding_util::DotShardingMemo), or none (one for the candidate's depths).
  std::shared_ptr<hlo_sharding_util::DotShardingMemo> dot_memo;
  bool exact() const { return depths.size() <= 1; }
};

// What PrepareCandidate keeps: the modules at the evaluation depths (EvaluateCandidate uses them),
// or the bounds only (the search, which drops the modules anyway: an extrapolated candidate's
// bounds then come from depths of one and two units, whatever the model's first linear depth
// (depth.h): the entry parameters and FLOPs follow them exactly, every unit adds the same weights
// and work).
enum class PrepareFor : uint8_t { kEvaluation, kBoundsOnly };

// Error: the candidate is invalid (it does not build, its mesh does not place, it over-splits).
Result<PreparedCandidate> PrepareCandidate(const Candidate& candidate, const EvaluationOptions& options,
                                           PrepareFor use = PrepareFor::kEvaluation);

// A candidate whose annotated module is given (method 2's solution, auto_sharding.h) on a placed
// mesh: evaluated exactly (no extrapolation), with the same bounds as PrepareCandidate's.
Result<PreparedCandidate> PrepareGivenModule(const Candidate& candidate, const Pod& pod, const MeshChoice& mesh,
                                             std::unique_ptr<Module> module);

struct Evaluation {
  CandidateResult result;
  std::optional<RunResult> run;  // what to store (key, settings, annotations); none unless simulated
};
// Consumes the prepared modules (building them again when they were dropped). The depths of an extrapolated candidate are partitioned with one
// memo (partitioner/spmd/partition_memo.h): they carry the same shardings, so the second run reuses
// the first one's tile maps, reshard plans and dot decisions.
Evaluation EvaluateCandidate(PreparedCandidate& prepared, const EvaluationOptions& options, const CancellationToken& cancel = {});
// Stores the evaluation's run in `store` (when both exist): its id goes to the result, or the
// result becomes a failure saying why it was not stored.
void StoreEvaluation(Evaluation& evaluation, pipeline::RunDatabase* store, const CancellationToken& cancel = {});

// The evaluation's outcome as run settings ("result.*": evaluation, bounds, HBM, bubble share,
// collectives by kind) and back from a stored run's overview: how a merged sweep is reported
// without re-running anything. Error for a run that no search made.
// The full-depth summary extrapolated from two shallow runs `a` and `b` (b the deeper), `k` =
// (full depth - a's) / (b's - a's): every figure on the line through them, but the step time and
// the peak never below the larger of the two samples'.
sim::RunSummary ExtrapolateSummary(const sim::RunSummary& a, const sim::RunSummary& b, double k);
Settings ResultSettings(const CandidateResult& result);
Result<CandidateResult> ResultFromRun(const RunOverview& run);

}  // namespace shardscope::search
