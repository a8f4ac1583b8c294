// Per-device timelines of a simulated step: one row per device class (devices whose timelines are
// identical share a row), each with a compute lane and a communication lane. Painting follows
// hotspot's timeline delegate: only the visible time range is visited (binary search over events
// sorted by start) and an event that falls on an already painted pixel is skipped, so a step with
// millions of events paints in time proportional to the widget's width.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <QWidget>

#include "simulator/run_result.h"

namespace shardscope::views {

class TimelineWidget : public QWidget {
  Q_OBJECT
 public:
  explicit TimelineWidget(QWidget* parent = nullptr);
  void setRun(std::shared_ptr<const RunResult> run);
  const RunResult* run() const { return run_.get(); }

  // The visible time window, in seconds.
  void setRange(double start_s, double end_s);
  double rangeStart() const { return t0_; }
  double rangeEnd() const { return t1_; }
  void fit();

  struct PaintStats {
    int64_t considered = 0;  // events visited in the visible range
    int64_t drawn = 0;       // rectangles painted
    int64_t skipped = 0;     // fell on an already painted pixel
  };
  PaintStats lastPaintStats() const { return stats_; }
  int rowCount() const { return static_cast<int>(rows_.size()); }
  // Renders into an image of the widget's size (tests, export).
  QImage render();
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override { return QSize(300, 80); }

 signals:
  void rangeChanged(double start_s, double end_s);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseDoubleClickEvent(QMouseEvent* event) override;
  bool event(QEvent* event) override;

 private:
  struct Lane {
    std::vector<const TimelineEvent*> events;  // sorted by start
    std::vector<double> max_end;               // prefix maximum of end times (monotonic)
  };
  struct Row {
    QString label;
    Lane lanes[kNumStreams];
  };
  void paintInto(QPainter& p, const QRect& area);
  double toX(double t, double width) const;
  double toTime(double x, double width) const;
  const TimelineEvent* eventAt(const QPoint& pos) const;
  QRect plotRect() const;

  std::shared_ptr<const RunResult> run_;
  std::vector<Row> rows_;
  double t0_ = 0, t1_ = 1, total_ = 1;
  PaintStats stats_;
  QPoint drag_start_;
  double drag_t0_ = 0, drag_t1_ = 0;
  static constexpr int kGutter = 190, kAxis = 22, kLane = 17, kRowGap = 8;
};

// A stable colour for an op kind ("dot", "all-gather", ...), readable on the palette.
QColor EventKindColor(const std::string& kind, const QPalette& palette);

}  // namespace shardscope::views
