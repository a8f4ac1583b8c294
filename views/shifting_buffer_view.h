// Teaching: step one iteration at a time through the shifting buffer of a pipelined module (GSPMD
// §3.3). A table with one row per stage — its devices, the microbatch it holds before the shift,
// where the shift's collective-permute sends it, and what it holds after (and computes on) —
// with the stages holding padding in that iteration marked as the bubble; Previous / Next and the
// keys ← → Home End step. The schedule is the simulator's (simulator/pipeline_shifting_buffer.h):
// this widget only draws it.
#pragma once

#include <optional>

#include <QWidget>

#include "simulator/pipeline_shifting_buffer.h"

class QLabel;
class QPushButton;
class QTableWidget;

namespace shardscope::views {

class ShiftingBufferView : public QWidget {
  Q_OBJECT
 public:
  enum Column { kStage = 0, kDevices, kBefore, kSendsTo, kAfter, kColumns };

  explicit ShiftingBufferView(QWidget* parent = nullptr);
  // Shows `schedule` from its first iteration; nullopt clears (and hides) the view.
  void setSchedule(std::optional<sim::ShiftingBufferSchedule> schedule);
  bool hasSchedule() const { return schedule_.has_value(); }
  const std::optional<sim::ShiftingBufferSchedule>& schedule() const { return schedule_; }

  int iterationCount() const;
  int currentIteration() const { return iteration_; }
  void setIteration(int iteration);  // clamped

  QTableWidget* table() const { return table_; }
  QString titleText() const;
  QString captionText() const;
  QString cellText(int stage, Column column) const;
  bool isBubble(int stage) const;  // the stage computes on padding in the current iteration
  QPushButton* nextButton() const { return next_; }
  QPushButton* previousButton() const { return prev_; }

 public slots:
  void next();
  void previous();

 signals:
  void iterationChanged(int iteration);

 private:
  void refresh();

  std::optional<sim::ShiftingBufferSchedule> schedule_;
  int iteration_ = 0;
  QLabel* title_;
  QLabel* caption_;
  QLabel* position_;
  QPushButton* prev_;
  QPushButton* next_;
  QTableWidget* table_;
};

}  // namespace shardscope::views
