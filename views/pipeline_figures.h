// The pipelining figures of one simulated step, beside the run summary (GSPMD Tables 4 and 5):
// bubble time and its share of the step, recompute time, and the "raw" FLOP utilisation that
// counts both as useful, next to the true MFU. The figures are the simulator's accounting
// (RunSummary; simulator/pipeline_accounting.h) as the run store keeps them: this widget only
// shows them. A run without pipeline loops but with rematerialised work (an unpipelined model with
// remat, e.g. GSPMD Table 6's MoE) shows the same table titled "Rematerialisation", without the
// bubble row; a run with neither hides it (absent, not zero).
#pragma once

#include <QWidget>

class QLabel;

namespace shardscope::sim {
struct RunSummary;
}

namespace shardscope::views {

class PipelineFigures : public QWidget {
  Q_OBJECT
 public:
  explicit PipelineFigures(QWidget* parent = nullptr);
  // Shows `summary`'s figures, or hides the panel when it is null or has neither pipeline loops nor
  // recompute.
  void setSummary(const sim::RunSummary* summary);

  QLabel* bubble() const { return bubble_; }              // "1.20 ms (12.5 %)"
  QLabel* recompute() const { return recompute_; }        // "2.40 ms (25.0 %)"
  QLabel* rawUtilization() const { return raw_; }         // "61.3 %"
  QLabel* mfu() const { return mfu_; }                    // "40.2 %"
  QString title() const;                                  // "Pipeline (4 stages)" or "Rematerialisation"
  // A share as shown: FormatPercent ("40.2%"), with two significant digits below 0.1% ("0.012%")
  // so a small model's utilisation does not read as zero.
  static QString Percent(double fraction);

 private:
  QLabel* title_;
  QLabel* bubble_key_ = nullptr;
  QLabel* bubble_;
  QLabel* recompute_;
  QLabel* raw_;
  QLabel* mfu_;
};

}  // namespace shardscope::views
