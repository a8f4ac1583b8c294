// Memory over time. Qt Charts is deprecated in newer Qt (Qt Graphs replaces it), so views use only
// this small interface; MemoryChart::Create() returns the Qt Charts backend today.
#pragma once

#include <vector>

#include <QColor>
#include <QString>
#include <QStringList>
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
  // A vertical dashed line at a time (the peak of a series).
  struct Marker {
    double time_s = 0;
    QString name;  // legend entry
    QColor color;  // invalid: the palette's text colour
  };
  using QWidget::QWidget;
  ~MemoryChart() override = default;

  // Replaces the chart's contents. `peak_time_s` < 0: no peak marker.
  void setSeries(const QString& title, std::vector<Series> series, double peak_time_s);
  // Replaces the chart's contents: the series (several runs overlaid) and their markers.
  virtual void setSeries(const QString& title, std::vector<Series> series, std::vector<Marker> markers) = 0;
  // The names of the series shown (markers included), in legend order.
  virtual QStringList seriesNames() const = 0;
  virtual QString title() const = 0;
  virtual void clear() = 0;
  // PNG or SVG by the file's extension.
  virtual bool exportImage(const QString& path) = 0;
  // Points actually handed to the backend (after downsampling), over all series.
  virtual int pointCount() const = 0;

  static constexpr size_t kPointsPerSeries = 400;
  static MemoryChart* Create(QWidget* parent = nullptr);
};

}  // namespace shardscope::views
