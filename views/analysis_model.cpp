#include "views/analysis_model.h"

#include "core/ir/hlo_text.h"

namespace shardscope::views {

using namespace ::shardscope::sim;

AnalysisModel::AnalysisModel(QObject* parent) : QObject(parent) {}

void AnalysisModel::setChips(std::vector<std::string> chips, std::string default_chip) {
  chips_ = std::move(chips);
  default_chip_ = std::move(default_chip);
}

void AnalysisModel::setPartitionBusy(bool busy) {
  if (partition_busy_ == busy) return;
  partition_busy_ = busy;
  emit busyChanged();
}

std::string PartitionedProgram::Text() const { return result ? PrintHloModule(*result->module) : std::string(); }

void AnalysisModel::setPartition(PartitionedProgram program) {
  partition_ = std::move(program);
  partition_busy_ = false;
  emit partitionUpdated();
  emit busyChanged();
}

void AnalysisModel::setPartitionCancelled() {
  partition_busy_ = false;
  emit partitionCancelled();
  emit busyChanged();
}

void AnalysisModel::setSimulationBusy(bool busy) {
  if (simulation_busy_ == busy) return;
  simulation_busy_ = busy;
  emit busyChanged();
}

void AnalysisModel::setSimulation(SimulatedStep step) {
  simulation_ = std::move(step);
  simulation_busy_ = false;
  emit simulationUpdated();
  emit busyChanged();
}

void AnalysisModel::setSimulationCancelled() {
  simulation_busy_ = false;
  emit simulationCancelled();
  emit busyChanged();
}

void AnalysisModel::reset() {
  partition_ = PartitionedProgram{};
  simulation_ = SimulatedStep{};
  partition_busy_ = simulation_busy_ = false;
  emit analysisReset();
  emit busyChanged();
}

}  // namespace shardscope::views
