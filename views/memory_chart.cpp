// The Qt Charts backend of MemoryChart.
#include "views/memory_chart.h"

#include <algorithm>

#include <QChart>
#include <QChartView>
#include <QContextMenuEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QLineSeries>
#include <QMenu>
#include <QPainter>
#include <QSvgGenerator>
#include <QValueAxis>
#include <QVBoxLayout>

#include "core/base/units.h"
#include "views/sharding_style.h"

namespace shardscope::views {


namespace {

class QtChartsMemoryChart : public MemoryChart {
 public:
  explicit QtChartsMemoryChart(QWidget* parent) : MemoryChart(parent), chart_(new QChart), view_(new QChartView(chart_, this)) {
    setObjectName("memoryChart");
    view_->setRenderHint(QPainter::Antialiasing);
    chart_->legend()->setAlignment(Qt::AlignRight);
    chart_->setMargins(QMargins(4, 4, 4, 4));
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(view_);
    applyPalette();
  }

  using MemoryChart::setSeries;
  void setSeries(const QString& title, std::vector<Series> series, std::vector<Marker> markers) override {
    clear();
    chart_->setTitle(title);
    double max_v = 0, max_t = 0;
    for (const auto& s : series) {
      for (const auto& p : s.points) {
        max_v = std::max(max_v, p.v);
        max_t = std::max(max_t, p.t);
      }
    }
    // Units chosen once for each axis (core/base/units.h: SI bytes, ms / µs).
    const AxisUnit bytes = BytesAxisUnit(max_v);
    const double vscale = bytes.divisor;
    const QString vunit = QString::fromStdString(bytes.unit);
    const AxisUnit seconds = SecondsAxisUnit(std::max(max_t, 1e-6));
    const double tscale = 1.0 / seconds.divisor;
    const QString tunit = QString::fromStdString(seconds.unit);
    auto* x = new QValueAxis;
    x->setTitleText(QString("time (%1)").arg(tunit));
    x->setRange(0, std::max(1e-9, max_t) * tscale);
    auto* y = new QValueAxis;
    y->setTitleText(QString("%1 / device").arg(vunit));
    y->setRange(0, std::max(1e-9, max_v * 1.08) / vscale);
    chart_->addAxis(x, Qt::AlignBottom);
    chart_->addAxis(y, Qt::AlignLeft);
    for (auto& s : series) {
      auto* line = new QLineSeries;
      line->setName(s.name);
      QPen pen(s.color, s.emphasise ? 2.5 : 1.5);
      line->setPen(pen);
      const auto points = DownsampleKeepingMaxima(s.points, kPointsPerSeries);
      QList<QPointF> qpoints;
      qpoints.reserve(static_cast<qsizetype>(points.size()));
      for (const auto& p : points) qpoints.append(QPointF(p.t * tscale, p.v / vscale));
      points_ += static_cast<int>(qpoints.size());
      line->replace(qpoints);
      chart_->addSeries(line);
      line->attachAxis(x);
      line->attachAxis(y);
    }
    for (const Marker& m : markers) {
      auto* marker = new QLineSeries;
      marker->setName(m.name);
      QPen pen(m.color.isValid() ? m.color : palette().color(QPalette::Text), 1, Qt::DashLine);
      marker->setPen(pen);
      marker->append(m.time_s * tscale, 0);
      marker->append(m.time_s * tscale, max_v / vscale);
      chart_->addSeries(marker);
      marker->attachAxis(x);
      marker->attachAxis(y);
    }
    applyPalette();
  }

  QStringList seriesNames() const override {
    QStringList names;
    for (QAbstractSeries* s : chart_->series()) names << s->name();
    return names;
  }

  QString title() const override { return chart_->title(); }

  void clear() override {
    chart_->setTitle(QString());
    chart_->removeAllSeries();
    for (QAbstractAxis* a : chart_->axes()) {
      chart_->removeAxis(a);
      delete a;
    }
    points_ = 0;
  }

  bool exportImage(const QString& path) override {
    const QSize size = view_->size();
    if (QFileInfo(path).suffix().toLower() == "svg") {
      QSvgGenerator gen;
      gen.setFileName(path);
      gen.setSize(size);
      gen.setViewBox(QRect(QPoint(0, 0), size));
      gen.setTitle("ShardScope memory over time");
      QPainter p(&gen);
      view_->render(&p);
      return p.end();
    }
    return view_->grab().save(path);
  }

  int pointCount() const override { return points_; }

 protected:
  void changeEvent(QEvent* e) override {
    MemoryChart::changeEvent(e);
    if (e->type() == QEvent::PaletteChange || e->type() == QEvent::ApplicationPaletteChange) applyPalette();
  }
  void contextMenuEvent(QContextMenuEvent* e) override {
    QMenu menu(this);
    QAction* save = menu.addAction("Export chart as PNG or SVG\u2026");
    if (menu.exec(e->globalPos()) != save) return;
    const QString path = QFileDialog::getSaveFileName(this, "Export chart", "memory.svg", "SVG (*.svg);;PNG (*.png)");
    if (!path.isEmpty()) exportImage(path);
  }

 private:
  void applyPalette() {
    const QPalette pal = palette();
    chart_->setBackgroundBrush(pal.color(QPalette::Base));
    chart_->setTitleBrush(pal.color(QPalette::Text));
    chart_->legend()->setLabelColor(pal.color(QPalette::Text));
    for (QAbstractAxis* a : chart_->axes()) {
      a->setLabelsColor(pal.color(QPalette::Text));
      a->setTitleBrush(pal.color(QPalette::Text));
    }
  }

  QChart* chart_;
  QChartView* view_;
  int points_ = 0;
};

}  // namespace

void MemoryChart::setSeries(const QString& title, std::vector<Series> series, double peak_time_s) {
  std::vector<Marker> markers;
  if (peak_time_s >= 0) markers.push_back({peak_time_s, "peak", QColor()});
  setSeries(title, std::move(series), std::move(markers));
}

MemoryChart* MemoryChart::Create(QWidget* parent) { return new QtChartsMemoryChart(parent); }

}  // namespace shardscope::views
