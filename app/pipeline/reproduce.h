// The reproduction registry: published whole-model configurations (GSPMD Table 2, ...) that the
// simulator is checked against. Each case names its columns as zoo models with settings, the
// chip, the mesh and the figures the paper publishes; RunReproduceCase builds each column from the
// zoo, partitions and simulates it (RunPipeline) and sets the simulated figure beside the
// published one. One chip calibration (simulator/calibration/) serves every case; the cases and
// the residual differences are in docs/reproduce.md. The CLI's `reproduce NAME` prints the table.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "app/pipeline/small_twin.h"
#include "core/base/cancellation.h"
#include "core/base/status.h"
#include "core/zoo/zoo.h"
#include "partitioner/all_reduce_combiner.h"
#include "simulator/run_result.h"

namespace shardscope::pipeline {

// What a published figure measures.
enum class ReproduceMetric : uint8_t {
  kStepTime,        // seconds per training step
  kMfu,             // model FLOP utilisation, percent
  kPeakMemory,      // peak bytes per device
  kAllToAllShare,   // all-to-all time, percent of the step
  // Weight-update sharding (a column naming a section 6.1 case): the step without and with the pass.
  kStepBeforePass,  // seconds per step without the pass
  kStepAfterPass,   // seconds per step with it
  kSpeedup,         // before / after; with ReproduceColumn::baseline: the baseline's step / step
  kStepReduction,   // 1 - after / before, percent; with ReproduceColumn::baseline: 1 - step / baseline's step
  // Pipelining (GSPMD Tables 4 and 5; RunSummary's bubble and recompute accounting).
  kBubbleShare,     // compute on padded microbatches, percent of the step
  kRecomputeShare,  // rematerialised forward compute, percent of the step
  kRawUtilization,  // executed FLOPs over the peak, bubbles and recompute counted as useful, percent
  // One collective (a book-collectives column).
  kCollectiveTime,  // seconds
  kTimeRatio,       // one collective's time over another's
};
std::string_view ReproduceMetricName(ReproduceMetric m);  // "step time", "MFU", ...

struct PublishedFigure {
  ReproduceMetric metric = ReproduceMetric::kStepTime;
  double value = 0;       // seconds, percent or bytes
  double tolerance = 0;   // the bound: relative (0.15 = 15%) for times and bytes, points for percentages
};

// One published column: a zoo model at the paper's sizes on a slice.
struct ReproduceColumn {
  std::string label;  // "64B, 128 devices"
  std::string model;  // zoo name
  ZooOverrides settings;
  std::string chip = "tpu-v3";  // preset name or chip .json file
  int64_t cores_per_chip = 2;   // the papers count TPU v3 cores as devices
  std::string mesh;             // "X=8,Y=16"
  // The physical slice in chips per axis when the paper's differs from the one ForMesh picks for
  // the mesh (empty: Topology::ForMesh's choice, the mesh's own shape when it is a slice of the pod).
  std::vector<int64_t> slice;
  std::vector<PublishedFigure> published;
  bool small = false;  // simulates in a few seconds (the test runs these)
  // When set, a weight-update-sharding paper case (WeightUpdateShardingPaperCases, e.g.
  // "wus-6.1-transformer-1024") simulated before and after the pass replaces the zoo configuration
  // above (model, settings and mesh then only describe it).
  std::string weight_update_sharding_case;
  // When set, a collective of BookCollectiveCases (app/pipeline/book_collectives.h, e.g. "C3") costed
  // by the simulator's collective model replaces the zoo configuration.
  std::string book_collective_case;
  // When set, the label of another column of the case: kStepReduction is this column's step-time
  // gain over that one's (the circular schedule against GPipe at the same batch), kSpeedup that
  // column's step over this one's (GSPMD Table 8: 16 spatial partitions against one device).
  std::string baseline;
};

struct ReproduceCase {
  std::string name;    // "gspmd-table2"
  std::string title;   // one line
  std::string source;  // paper, table, validation.md case id
  std::vector<ReproduceColumn> columns;
  // A published observation about the whole table: the fastest column is one of these labels
  // (empty: none). Checked over the columns that ran, when they include one of them.
  std::vector<std::string> fastest;
  std::string fastest_text;  // the observation as the paper states it
};

// Every registered case, in a stable order.
const std::vector<ReproduceCase>& ReproduceCases();
// A case by name; the error lists the names.
Result<const ReproduceCase*> FindReproduceCase(std::string_view name);

// A published figure beside the simulated one.
struct ReproducedValue {
  PublishedFigure published;
  double simulated = 0;
  double difference_percent = 0;  // (simulated - published) / published x 100
  double difference_points = 0;   // simulated - published (percentages)
  bool within_tolerance = false;
};

struct ReproducedColumn {
  const ReproduceColumn* column = nullptr;
  Status status;  // the pipeline's error when the column could not be simulated
  std::vector<ReproducedValue> values;
  double step_time_s = 0;         // with weight-update sharding: the step after the pass
  double step_before_pass_s = 0;  // weight-update-sharding columns: the step without the pass
  double mfu_percent = 0;
  double raw_utilization_percent = 0;
  double bubble_percent = 0;     // of the step
  double recompute_percent = 0;  // of the step
  int64_t peak_memory_bytes = 0;
  double device_hbm_bytes = 0;  // the chip's HBM per device
  bool fits = true;             // peak_memory_bytes <= device_hbm_bytes
};

// A zoo configuration's step simulated elsewhere (the GUI's simulation of a paper configuration it
// opened) beside the column's published figures, as RunReproduceCase compares them. Only the
// figures a simulated step gives (step time, MFU, peak memory, all-to-all share, bubbles,
// recompute, raw utilisation); `configuration` must outlive the result (ReproducedColumn::column).
ReproducedColumn CompareWithPublished(const ReproduceColumn& configuration, const sim::RunResult& run);
// A figure in the unit the tables use ("5.74 s", "62.7%", "15.30 GB").
std::string ReproduceFigureText(ReproduceMetric metric, double value);
// The difference as the tables print it: "+5.3%" (times, bytes) or "-4.1 pts" (percentages).
std::string ReproduceDifferenceText(const ReproducedValue& v);
struct ReproducedCase {
  const ReproduceCase* spec = nullptr;
  std::vector<ReproducedColumn> columns;
  double worst_percent = 0;  // the largest |difference_percent| over the values checked
  int64_t checked = 0, within = 0;
  // ReproduceCase::fastest: the simulated fastest column and whether it is one the paper names
  // (checked only when a named column ran; then it counts in checked / within).
  std::string fastest_label;
  bool fastest_checked = false, fastest_as_published = false;
};

struct ReproduceOptions {
  bool small_only = false;       // only the columns marked small
  std::string only_column;       // when set, only the column with this label
  std::function<void(const ReproduceColumn&)> on_column;  // called as each column starts
  // The pipeline's all-reduce combiner for every simulated program (nullopt: the pipeline's
  // default, off).
  std::optional<AllReduceCombinerOptions> all_reduce_combiner;
};

ReproducedCase RunReproduceCase(const ReproduceCase& spec, const ReproduceOptions& options = {},
                                const CancellationToken& cancel = {});

// One zoo configuration simulated on its slice, as each column runs: the zoo build, propagation
// (entry inputs and outputs may take inferred shardings), partitioning and one simulated step.
// `combiner`: the pipeline's all-reduce combiner (nullopt: off, the pipeline's default).
Result<sim::RunResult> SimulateZooConfiguration(const ReproduceColumn& configuration, const CancellationToken& cancel = {},
                                                const std::optional<AllReduceCombinerOptions>& combiner = std::nullopt);

// The numerical check of a zoo column at its sizes: the column's module propagated as the CLI and
// the GUI propagate it, then verified on its small twin (app/pipeline/small_twin.h) on the column's
// devices. An error for a column the zoo does not build (the weight-update-sharding and book cases).
Result<TwinVerification> VerifyColumnOnSmallTwin(const ReproduceColumn& column, const CancellationToken& cancel = {});

struct MaxBatchResult {
  int64_t batch = 0;              // the largest global batch that fits (0: not even one step)
  int64_t peak_memory_bytes = 0;  // its simulated peak per device
  int64_t next_batch = 0;         // the smallest batch tried that does not fit (0: none)
  int64_t next_peak_bytes = 0;
  int64_t device_hbm_bytes = 0;
  bool reached_limit = false;     // every multiple up to the limit fits
  int64_t simulations = 0;
  // The setting searched: "batch", or "microbatch" for a pipelined model, whose global batch is
  // microbatches x microbatch (`per_setting` = microbatches; 1 for "batch").
  std::string setting = "batch";
  int64_t per_setting = 1;
  std::string error;  // internal: why the search stopped
};
// The largest global batch, a multiple of `step` (the data-parallel axis, so every device gets
// whole rows) and at most `limit`, whose simulated peak fits the device's HBM: the zoo setting
// "batch" (a pipelined model's "microbatch", at its number of microbatches) doubles from `step`
// until a peak exceeds the HBM, then bisects; `step` and `limit` count that setting. Each try is a
// full simulation at real size.
Result<MaxBatchResult> FindMaxBatch(ReproduceColumn configuration, int64_t step, int64_t limit,
                                    const CancellationToken& cancel = {});

// The same for a module the zoo did not build: the class of the entry-parameter dimension `dim`
// ("x:0": x's batch and every dimension that must equal it, core/ir/scale_dims.h) grows by whole
// multiples of its size (doubling, then bisection), up to `limit`; each try is the module scaled,
// partitioned and simulated on `pod`'s chip, mesh and cores per chip. `setting` is `dim`.
Result<MaxBatchResult> FindMaxBatchOfModule(const Module& module, const std::string& dim, const ReproduceColumn& pod,
                                            int64_t limit, const CancellationToken& cancel = {});

// The table people read: one line per published figure (published, simulated, difference,
// within the tolerance or not), "does not fit" where a peak exceeds the chip's HBM, and the last
// line "worst: P%".
std::string ReproduceTableText(const ReproducedCase& r);
// The same as CSV: case,column,metric,published,simulated,difference_percent,tolerance,within,fits.
std::string ReproduceCsv(const ReproducedCase& r);

}  // namespace shardscope::pipeline
