// What the analysis of the document gave, as the views show it: the partitioned program (the
// partitioner's result, the simulator's estimate of each collective, the numerical verdict) and the
// last simulated step; whether each is being worked on; and the requests the views make
// (partition, simulate, cancel), which the session (app/gui) serves through the job tracker. Plain
// state of the engines' own types: nothing here runs an engine.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <QObject>
#include <QString>

#include "core/eval/numeric_verify.h"
#include "partitioner/spmd/spmd_partitioner.h"
#include "partitioner/weight_update_sharding/weight_update_sharding.h"
#include "simulator/collectives/cost.h"
#include "simulator/run_result.h"

namespace shardscope::views {

// The simulator's value types (RunResult, CollectiveCost, ...) are used as they are.
using namespace ::shardscope::sim;

// The figures of one simulated step that a before/after comparison shows.
struct StepFigures {
  double step_time_s = 0;
  double weight_update_s = 0;  // compute time of the weight update (optimizer)
  int64_t peak_memory_bytes = 0;
  std::array<int64_t, kNumMemoryCategories> peak_by_category{};  // bytes live at the peak
};

// One step simulated before and after weight-update sharding (paper 000).
struct WeightUpdateComparison {
  StepFigures before, after;
  int64_t all_reduces = 0, sharded = 0;  // gradient all-reduces, how many the pass sharded
  std::string summary;                   // the pass's one-paragraph summary
};

// The partitioned program of the document's shardings.
struct PartitionedProgram {
  std::shared_ptr<const PartitionResult> result;         // null when partitioning failed
  std::vector<std::optional<CollectiveCost>> estimates;  // per result->collectives, on `chip`
  std::string chip;                                      // the estimates' chip
  VerificationVerdict verification;
  // Set when the module was too large to evaluate and `verification` is of its small twin
  // (app/pipeline/small_twin.h): the twin's sizes ("batch 64 -> 8, model 8192 -> 16, ...") and why
  // the module itself was not evaluated.
  std::string verification_twin;
  std::string verification_full_skipped;
  int64_t devices = 0;
  double millis = 0;       // partitioning
  std::string message;     // why there is no result
  quint64 edit_generation = 0;  // the document edit it was made from
  // Weight-update sharding ran on it (the document's option): its reduce-scatters and all-gathers
  // are among the collectives, with their reasons; what it did in one paragraph.
  bool weight_update_sharding = false;
  std::string weight_update_summary;
  std::vector<WeightUpdateDecision> weight_update_decisions;  // per gradient all-reduce

  bool ok() const { return result != nullptr; }
  // The program as HLO text, printed when asked for (the HLO tab shown, an export): kept, a
  // 100k-instruction program's text would hold ~30 MB for a tab the user may never open.
  std::string Text() const;
};

// One simulated step.
struct SimulatedStep {
  std::shared_ptr<const RunResult> run;  // null when the simulation failed
  std::vector<std::string> warnings;
  int64_t collectives = 0;  // in the simulated program
  double millis = 0;
  std::string message;      // why there is no run
  bool slice_failed = false;  // ... because the mesh could not be placed on the (overridden) slice
  bool sizes_failed = false;  // ... because the model could not be built at the simulated sizes
  // Simulated at other sizes than the document's (DocumentModel::simulatedSizes): what changed
  // ("batch 8 -> 1024, ..."); empty at the document's own sizes.
  std::string sizes;
  // With weight-update sharding on: the step before the pass beside `run` (after it).
  std::optional<WeightUpdateComparison> weight_update;
  bool ok() const { return run != nullptr; }
};

class AnalysisModel : public QObject {
  Q_OBJECT

 public:
  explicit AnalysisModel(QObject* parent = nullptr);

  enum class SimulationInput { kShardings, kReplicated };

  // ---- Requests (served by the session) ----
  void requestPartition() { emit partitionRequested(); }
  void cancelPartition() { emit partitionCancelRequested(); }
  // Simulates one step on `chip` ("" : the default chip). kReplicated simulates the module with no
  // shardings at all (every device holds and computes everything): the baseline a sharding is
  // compared with.
  void requestSimulation(const QString& chip = QString(), SimulationInput input = SimulationInput::kShardings) {
    emit simulationRequested(chip, input);
  }
  void cancelSimulation() { emit simulationCancelRequested(); }

  // ---- State ----
  const PartitionedProgram& partition() const { return partition_; }
  bool partitionBusy() const { return partition_busy_; }
  const SimulatedStep& simulation() const { return simulation_; }
  bool simulationBusy() const { return simulation_busy_; }
  // The chips the simulator knows and the one used when none is chosen.
  const std::vector<std::string>& chips() const { return chips_; }
  const std::string& defaultChip() const { return default_chip_; }

  // ---- Set by the session ----
  void setChips(std::vector<std::string> chips, std::string default_chip);
  void setPartitionBusy(bool busy);
  void setPartition(PartitionedProgram program);
  void setPartitionCancelled();
  void setSimulationBusy(bool busy);
  void setSimulation(SimulatedStep step);
  void setSimulationCancelled();
  // A different module: forget what was computed for the old one (analysisReset follows).
  void reset();

 signals:
  void partitionRequested();
  void partitionCancelRequested();
  void simulationRequested(const QString& chip, shardscope::views::AnalysisModel::SimulationInput input);
  void simulationCancelRequested();

  void partitionUpdated();
  void partitionCancelled();
  void simulationUpdated();
  void simulationCancelled();
  void busyChanged();
  void analysisReset();  // nothing is partitioned or simulated any more

 private:
  PartitionedProgram partition_;
  SimulatedStep simulation_;
  bool partition_busy_ = false;
  bool simulation_busy_ = false;
  std::vector<std::string> chips_;
  std::string default_chip_;
};

}  // namespace shardscope::views
