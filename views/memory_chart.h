// Memory over time. Qt Charts is deprecated in newer Qt (Qt Graphs replaces it), so views use only
// this small interface; MemoryChart::Create() returns the Qt Charts backend today.
#pragma once

#include <vector>

#include <QColor>
#include <QString>
#include <QWidget>

#include "views/downsample.h"

namespace shardscope::views {

class MemoryChart : public QWidget {
  Q_OBJECT
 public:
  struct Series {
    QString name;
    QColor color;
    std::vector<SeriesPoint> points;  // t in seconds, v in bytes; downsampled by the chart
    bool emphasise = false;           // drawn thicker (the total)
  };
  using QWidget::QWidget;
  ~MemoryChart() override = default;

  // Replaces the chart's contents. `peak_time_s` < 0: no peak marker.
  virtual void setSeries(const QString& title, std::vector<Series> series, double peak_time_s) = 0;
  virtual void clear() = 0;
  // PNG or SVG by the file's extension.
  virtual bool exportImage(const QString& path) = 0;
  // Points actually handed to the backend (after downsampling), over all series.
  virtual int pointCount() const = 0;

  static constexpr size_t kPointsPerSeries = 400;
  static MemoryChart* Create(QWidget* parent = nullptr);
};

}  // namespace shardscope::views
