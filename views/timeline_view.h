// Per-device timelines of a simulated step: one row per device class (devices whose timelines are
// identical share a row), each with a compute lane and a communication lane. Painting follows
// hotspot's timeline delegate: only the visible time range is visited (binary search over events
// sorted by start) and an event that falls on an already painted pixel is skipped, so a step with
// millions of events paints in time proportional to the widget's width.
//
// Mouse: the wheel zooms around the pointer, dragging pans, a click on an event selects it
// (eventClicked), Shift+drag selects a time range and shows its totals (busy compute and
// communication, overlap, idle, events), a double-click zooms into the selection (or fits the
// step), hovering shows the event's details. Keys: Escape clears the selection, Z zooms to it,
// F or Home fits, + and - zoom. Right-click: zoom to selection, clear selection, fit.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <QWidget>

#include "simulator/run_result.h"

namespace shardscope::views {

using namespace ::shardscope::sim;  // RunResult, TimelineEvent, Stream

class TimelineWidget : public QWidget {
  Q_OBJECT
 public:
  explicit TimelineWidget(QWidget* parent = nullptr);
  void setRun(std::shared_ptr<const RunResult> run);
  const RunResult* run() const { return run_.get(); }
  std::shared_ptr<const RunResult> sharedRun() const { return run_; }
  // A short title drawn in the axis gutter ("run 3"); empty: none.
  void setTitle(const QString& title);

  // The visible time window, in seconds.
  void setRange(double start_s, double end_s);
  double rangeStart() const { return t0_; }
  double rangeEnd() const { return t1_; }
  // The whole step (or `span_s` when larger: two timelines compared on one scale).
  void fit();
  void setMinimumSpan(double span_s);

  // Time-range selection (Shift+drag). Totals are for one row (device class).
  struct RangeTotals {
    double span_s = 0;
    double compute_s = 0;         // compute lane busy inside the range
    double communication_s = 0;   // communication lane busy inside the range
    double overlapped_s = 0;      // both busy
    double idle_s = 0;            // neither busy
    int64_t events = 0;           // events overlapping the range (both lanes)
    int64_t bytes = 0;            // bytes of the communication events overlapping the range
    double flops = 0;             // FLOPs of the compute events overlapping the range
  };
  void selectRange(double start_s, double end_s, int row = 0);
  void clearSelection();
  bool hasSelection() const { return sel_t1_ > sel_t0_; }
  double selectionStart() const { return sel_t0_; }
  double selectionEnd() const { return sel_t1_; }
  int selectionRow() const { return sel_row_; }
  RangeTotals rangeTotals(int row, double start_s, double end_s) const;
  void zoomToSelection();

  // The event a click selected (outlined), or nullptr.
  const TimelineEvent* selectedEvent() const { return selected_; }
  // Spans marked behind a row's compute lane (the pipeline bubble, pipeline_stages.h), hatched,
  // with a caption under the row's label ("bubble 14.8%"); per row (device class, in row order).
  // Cleared by setRun.
  struct RowMarks {
    QString caption;
    std::vector<std::pair<double, double>> spans;  // [start_s, end_s)
  };
  void setRowMarks(std::vector<RowMarks> marks);
  const std::vector<RowMarks>& rowMarks() const { return marks_; }
  // Outlines every event whose instruction maps (through the resolver) to `origin`; "" for none.
  void setHighlightedOrigin(const QString& origin);
  // Maps an event's (SPMD) instruction name to the original instruction's name for tooltips and
  // highlighting; "" when there is none.
  void setOriginResolver(std::function<QString(const QString&)> resolver);

  // Geometry (tests, automation): the centre of the first event named `instruction` in row `row`,
  // lane `stream`, inside the visible range; (-1, -1) when there is none.
  QPoint eventCenter(int row, Stream stream, const std::string& instruction) const;
  // The event under `pos` (widget coordinates), or nullptr.
  const TimelineEvent* eventAt(const QPoint& pos) const;
  // The tooltip text for the event under `pos` ("" when none).
  QString toolTipAt(const QPoint& pos) const;

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

  static constexpr int kGutter = 190, kAxis = 22, kLane = 17, kRowGap = 8;

 signals:
  void rangeChanged(double start_s, double end_s);
  // A click on an event: its instruction name (as in the SPMD program) and the row it is in.
  void eventClicked(const QString& instruction, int row);
  // The selection changed (start == end: cleared).
  void rangeSelected(double start_s, double end_s);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void mouseDoubleClickEvent(QMouseEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;
  void contextMenuEvent(QContextMenuEvent* event) override;
  void leaveEvent(QEvent* event) override;
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
  void paintSelection(QPainter& p, const QRect& area);
  double toX(double t, double width) const;
  double toTime(double x, double width) const;
  int rowAt(int y) const;
  QRect plotRect() const;
  QString originOf(const std::string& instruction) const;

  std::shared_ptr<const RunResult> run_;
  std::vector<Row> rows_;
  std::vector<RowMarks> marks_;
  QString title_;
  double t0_ = 0, t1_ = 1, total_ = 1, min_span_ = 0;
  double sel_t0_ = 0, sel_t1_ = 0;
  int sel_row_ = 0;
  PaintStats stats_;
  enum class Drag { kNone, kPan, kSelect } drag_ = Drag::kNone;
  QPoint drag_start_;
  bool drag_moved_ = false;
  double drag_t0_ = 0, drag_t1_ = 0;
  const TimelineEvent* selected_ = nullptr;
  const TimelineEvent* hovered_ = nullptr;
  QString highlight_origin_;
  std::function<QString(const QString&)> resolver_;
  mutable std::unordered_map<std::string, QString> origin_cache_;
};

// A stable colour for an op kind ("dot", "all-gather", ...), readable on the palette.
QColor EventKindColor(const std::string& kind, const QPalette& palette);

}  // namespace shardscope::views
