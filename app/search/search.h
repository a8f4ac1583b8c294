// The strategy search: "how should I shard this model on this pod?"
//
//   1. generate: every strategy family (family.h) on every mesh factorisation of the pod
//      (mesh_space.h) gives candidates;
//   2. prepare (cheap, evaluate.h): build each candidate at its evaluation depths, bound its memory
//      and step time; a candidate whose memory bound exceeds the HBM is pruned, one that
//      over-splits a dimension is invalid;
//   3. evaluate the survivors in order of their step-time bound (propagate, partition, simulate
//      through app/pipeline, K worker threads): before each, a candidate is pruned when an
//      evaluated one that fits is at least as fast as its time bound and at most as large as its
//      memory bound (it cannot be better on either axis, so it can neither win nor join the Pareto
//      front of step time vs memory);
//   4. confirm: the best `confirm` candidates whose figures were extrapolated (the ones that fit
//      first) are simulated at full depth (their stored runs then carry the full timeline); so
//      are up to `confirm` extrapolated ones whose extrapolated peak is over the HBM but that are
//      faster than the best one that fits (the fastest such, when none fits): the shallow depths never reach the memory limit, so
//      their extrapolation has no rematerialisation in it, and at full depth the simulator
//      recomputes values to fit the HBM as XLA does (ConfirmationOrder). A run is stored with its
//      figures only in step 3; the best `confirm` candidates that step 3 simulated at full depth
//      are simulated again here to store their timelines (DetailOrder);
//   5. rank: the candidates that fit by step time, then those that do not fit, then the pruned,
//      invalid and failed ones; the Pareto front over the ones that fit.
// Every simulated candidate is stored as a run (key: Candidate::Key) when a store is given.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/pipeline/simulate.h"
#include "app/search/candidate.h"
#include "app/search/evaluate.h"
#include "app/search/family.h"
#include "core/base/cancellation.h"
#include "core/base/status.h"

namespace shardscope::search {

struct SearchOptions {
  std::string model;
  ZooOverrides settings;          // --set k=v
  std::string chip = "tpu-v4";
  int64_t devices = 0;
  std::string slice;              // "" : MakePod's default shape
  int64_t cores_per_chip = 0;     // 0: the chip's maximum
  std::vector<std::string> families;  // empty: all
  std::vector<std::string> meshes;    // only candidates on these meshes ("X=8,Y=16"); empty: all
  int jobs = 1;                   // worker threads
  bool prune = true;              // the bound pruning of step 3 (memory pruning always applies)
  int confirm = 1;                // step 4
  EvaluationOptions evaluation;
  std::shared_ptr<pipeline::RunDatabase> store;  // null: nothing stored
};

// The search of a published configuration (a `reproduce` case's column, `CASE:COLUMN` as the
// GUI's --paper and Papers menu open it, e.g. "gspmd-table4:(4,16,4) 32x32"): the column's model at
// its sizes, on its pod (its chip, its mesh's device count, its cores per chip and physical slice).
// The settings the strategy families choose per candidate (StrategyChoiceSettings: annotations, mesh
// axes, stages, schedule) are left to the search; the others, the batch and microbatches among
// them, are the paper's. An error names the known cases or columns, or says why a column is not a
// zoo configuration (the weight-update-sharding and book-collective cases).
Result<SearchOptions> SearchOfPaperColumn(std::string_view case_name, std::string_view column);
// "CASE:COLUMN" split at its first colon, then as above.
Result<SearchOptions> SearchOfPaperColumn(std::string_view case_and_column);

struct SearchProgress {
  int64_t done = 0;   // candidates decided (evaluated or pruned)
  int64_t total = 0;
  std::string stage;  // "preparing", "evaluating", "confirming"
  const CandidateResult* last = nullptr;  // the one just decided (valid during the call only)
};

struct SearchStats {
  int64_t generated = 0, invalid = 0, pruned_memory = 0, pruned_bound = 0, simulated = 0, failed = 0, confirmed = 0;
  double wall_s = 0;
  double cpu_s = 0;  // CPU time of the whole process during the search (all threads)
  double prepare_s = 0, evaluate_s = 0, confirm_s = 0;  // wall time per step
};

// When no candidate on the pod is valid (the model's dimensions are too small to split that many
// ways), the largest device count below it, halving, at which some candidate is: prepared only
// (ms), nothing simulated. RunSearch adds it to the result's notes in that case.
struct ValidAtFewerDevices {
  int64_t devices = 0;
  int64_t valid = 0;  // candidates that build and split every dimension evenly
  int64_t generated = 0;
};
struct SearchResult {
  Pod pod;
  std::vector<CandidateResult> ranked;
  std::vector<size_t> pareto;  // indices into `ranked`, by ascending peak memory
  std::vector<std::string> notes;  // what the families left out
  std::optional<ValidAtFewerDevices> valid_at_fewer_devices;  // set when every candidate is invalid
  SearchStats stats;
  bool cancelled = false;
};

// The candidates of `space` from the named families (all when empty); unknown names are an error.
Result<std::vector<Candidate>> GenerateCandidates(const SearchSpace& space, const std::vector<std::string>& families,
                                                  std::vector<std::string>* notes = nullptr);

// Steps 1 and 2 only, for a sweep: the candidates worth evaluating (in generation order) and the
// results of those left out (invalid, pruned by memory). Each planned candidate then becomes one
// independent task (EvaluateAndStore).
struct SearchPlan {
  Pod pod;
  std::vector<Candidate> candidates;
  std::vector<CandidateResult> left_out;
  std::vector<std::string> notes;
  int64_t generated = 0;
};
Result<SearchPlan> PlanSearch(const SearchOptions& options, const CancellationToken& cancel = {});

// When no candidate on the pod is valid: see ValidAtFewerDevices above.
std::optional<ValidAtFewerDevices> LargestValidDeviceCount(const SearchOptions& options,
                                                          const CancellationToken& cancel = {});
std::string ValidAtFewerDevicesNote(const SearchOptions& options, const ValidAtFewerDevices& v);

// `on_progress` is called from the worker threads (one call at a time).
Result<SearchResult> RunSearch(const SearchOptions& options, const std::function<void(const SearchProgress&)>& on_progress = {},
                               const CancellationToken& cancel = {});

// Ranks results (the order described above) and returns the Pareto front of step time vs peak
// memory over those that fit, as indices into the ranked vector, by ascending memory.
std::vector<size_t> RankResults(std::vector<CandidateResult>& results);

// Step 4's choice: the indices of `results` to simulate again at full depth (see above).
std::vector<size_t> ConfirmationOrder(const std::vector<CandidateResult>& results, int confirm);
// The candidates among the best `count` (at least one; the ones that fit first, by step time) that
// were simulated at full depth in step 3 and not confirmed in step 4 (`confirmed`): their stored
// runs carry figures only until step 4 stores their detail.
std::vector<size_t> DetailOrder(const std::vector<CandidateResult>& results, int count, const std::vector<size_t>& confirmed);

// Evaluates one candidate (a sweep task): prepare, evaluate, store with its key. The result says
// what happened (pruned by memory, invalid, failed, simulated).
CandidateResult EvaluateAndStore(const Candidate& candidate, const EvaluationOptions& options,
                                 const std::shared_ptr<pipeline::RunDatabase>& store, const CancellationToken& cancel = {});

}  // namespace shardscope::search
