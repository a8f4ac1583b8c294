// The step before and after weight-update sharding side by side (paper 000): step time, the time of
// the weight update, peak memory per device and what it holds at the peak by category, each with
// the saving. The simulation panel shows it whenever the simulated step ran the pass
// (SimulatedStep::weight_update); the figures come from the analysis, nothing is computed here.
#pragma once

#include <optional>

#include <QWidget>

#include "views/analysis_model.h"

class QLabel;
class QTableWidget;

namespace shardscope::views {

class WeightUpdatePanel : public QWidget {
  Q_OBJECT
 public:
  explicit WeightUpdatePanel(QWidget* parent = nullptr);

  // Shows a comparison (nullopt: empties the panel).
  void setComparison(const std::optional<WeightUpdateComparison>& comparison);
  const std::optional<WeightUpdateComparison>& comparison() const { return comparison_; }

  // Rows: before, after, saving; columns: kStep, kWeightUpdate, kPeak, then one per memory category.
  enum Row { kBefore = 0, kAfter = 1, kSaving = 2 };
  enum Column { kStep = 0, kWeightUpdate = 1, kPeak = 2, kFirstCategory = 3 };
  QTableWidget* table() const { return table_; }
  QLabel* headline() const { return headline_; }

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  void fitHeight();
  std::optional<WeightUpdateComparison> comparison_;
  QLabel* headline_;
  QTableWidget* table_;
};

}  // namespace shardscope::views
