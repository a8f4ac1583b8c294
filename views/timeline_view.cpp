#include "views/timeline_view.h"

#include <algorithm>
#include <cmath>

#include <QHelpEvent>
#include <QImage>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <QWheelEvent>

#include "views/item_models.h"
#include "views/sharding_style.h"

namespace shardscope::views {

namespace {

QString Q(const std::string& s) { return QString::fromStdString(s); }

// 1-2-5 steps giving about `target` ticks over `span`.
double NiceStep(double span, int target) {
  if (span <= 0) return 1;
  const double raw = span / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * mag) return m * mag;
  }
  return 10 * mag;
}

}  // namespace

QColor EventKindColor(const std::string& kind, const QPalette& palette) {
  const bool dark = IsDarkPalette(palette);
  int hue = -1;
  if (kind.find("all-reduce") != std::string::npos) hue = 0;
  else if (kind.find("all-gather") != std::string::npos) hue = 30;
  else if (kind.find("reduce-scatter") != std::string::npos) hue = 285;
  else if (kind.find("all-to-all") != std::string::npos) hue = 330;
  else if (kind.find("collective-permute") != std::string::npos) hue = 170;
  else if (kind == "dot" || kind == "convolution") hue = 215;
  else if (kind == "fusion") hue = 120;
  if (hue < 0) {  // everything else: muted, hashed
    uint32_t h = 2166136261u;
    for (unsigned char c : kind) h = (h ^ c) * 16777619u;
    const int muted = 60 + static_cast<int>(h % 120);
    return dark ? QColor::fromHsl(muted, 60, 90) : QColor::fromHsl(muted, 90, 185);
  }
  return dark ? QColor::fromHsl(hue, 140, 105) : QColor::fromHsl(hue, 170, 160);
}

TimelineWidget::TimelineWidget(QWidget* parent) : QWidget(parent) {
  setObjectName("timeline");
  setMouseTracking(true);
  setAttribute(Qt::WA_OpaquePaintEvent);
  setCursor(Qt::OpenHandCursor);
}

QSize TimelineWidget::sizeHint() const {
  return QSize(700, kAxis + std::max<int>(1, static_cast<int>(rows_.size())) * (2 * kLane + kRowGap) + 8);
}

void TimelineWidget::setRun(std::shared_ptr<const RunResult> run) {
  run_ = std::move(run);
  rows_.clear();
  total_ = 1e-9;
  if (run_ && run_->has_detail()) {
    const auto reps = run_->RepresentativeDevices();
    for (size_t c = 0; c < run_->classes.size(); ++c) {
      const DeviceClass& cls = run_->classes[c];
      Row row;
      const auto devices = run_->DevicesOfClass(static_cast<int32_t>(c));
      QString who;
      if (devices.size() == 1) who = QString("device %1").arg(devices.front());
      else if (devices.size() > 1 && devices.back() - devices.front() + 1 == static_cast<int64_t>(devices.size()))
        who = QString("devices %1\u2013%2").arg(devices.front()).arg(devices.back());
      else who = QString("%1 devices (from %2)").arg(devices.size()).arg(devices.empty() ? -1 : devices.front());
      row.label = cls.label.empty() ? who : Q(cls.label) + " \u00B7 " + who;
      for (const TimelineEvent& e : cls.events) {
        const int s = static_cast<int>(e.stream);
        if (s < 0 || s >= kNumStreams) continue;
        row.lanes[s].events.push_back(&e);
        total_ = std::max(total_, e.end_s());
      }
      for (Lane& lane : row.lanes) {
        std::stable_sort(lane.events.begin(), lane.events.end(),
                         [](const TimelineEvent* a, const TimelineEvent* b) { return a->start_s < b->start_s; });
        double m = 0;
        lane.max_end.reserve(lane.events.size());
        for (const TimelineEvent* e : lane.events) {
          m = std::max(m, e->end_s());
          lane.max_end.push_back(m);
        }
      }
      rows_.push_back(std::move(row));
    }
    total_ = std::max(total_, run_->summary.step_time_s);
  }
  updateGeometry();
  fit();
}

void TimelineWidget::fit() { setRange(0, total_ * 1.02); }

void TimelineWidget::setRange(double start_s, double end_s) {
  if (!(end_s > start_s)) return;
  const double min_span = 1e-12;
  if (end_s - start_s < min_span) end_s = start_s + min_span;
  t0_ = start_s;
  t1_ = end_s;
  update();
  emit rangeChanged(t0_, t1_);
}

QRect TimelineWidget::plotRect() const { return QRect(kGutter, kAxis, std::max(1, width() - kGutter - 4), height() - kAxis); }

double TimelineWidget::toX(double t, double width) const { return (t - t0_) / (t1_ - t0_) * width; }
double TimelineWidget::toTime(double x, double width) const { return t0_ + x / std::max(1.0, width) * (t1_ - t0_); }

void TimelineWidget::paintEvent(QPaintEvent*) {
  QPainter p(this);
  paintInto(p, rect());
}

QImage TimelineWidget::render() {
  QImage image(size(), QImage::Format_ARGB32);
  QPainter p(&image);
  paintInto(p, rect());
  return image;
}

void TimelineWidget::paintInto(QPainter& p, const QRect& area) {
  const QPalette pal = palette();
  p.fillRect(area, pal.color(QPalette::Base));
  stats_ = PaintStats{};
  if (rows_.empty()) {
    p.setPen(pal.color(QPalette::PlaceholderText));
    p.drawText(area, Qt::AlignCenter, run_ ? "This run has no per-device detail." : "No simulation yet: press Simulate.");
    return;
  }
  const QRect plot = plotRect();
  const double w = plot.width();
  // Time axis.
  QFont small = font();
  small.setPointSizeF(std::max(6.5, font().pointSizeF() * 0.85));
  p.setFont(small);
  const double step = NiceStep(t1_ - t0_, std::max(2, plot.width() / 110));
  QColor grid = pal.color(QPalette::Mid);
  grid.setAlpha(90);
  for (double t = std::ceil(t0_ / step) * step; t <= t1_; t += step) {
    const int x = plot.left() + static_cast<int>(std::round(toX(t, w)));
    p.setPen(grid);
    p.drawLine(x, kAxis - 4, x, area.bottom());
    p.setPen(pal.color(QPalette::Text));
    p.drawText(QRect(x + 3, 2, 100, kAxis - 4), Qt::AlignLeft | Qt::AlignVCenter, FormatSeconds(t));
  }
  // Rows.
  const int row_h = 2 * kLane + kRowGap;
  for (size_t r = 0; r < rows_.size(); ++r) {
    const int y = kAxis + 4 + static_cast<int>(r) * row_h;
    if (y > area.bottom()) break;
    const Row& row = rows_[r];
    p.setPen(pal.color(QPalette::Text));
    p.drawText(QRect(4, y, kGutter - 56, 2 * kLane), Qt::AlignLeft | Qt::AlignVCenter,
               QFontMetrics(small).elidedText(row.label, Qt::ElideRight, kGutter - 60));
    for (int s = 0; s < kNumStreams; ++s) {
      const int ly = y + s * kLane;
      QColor lane_bg = pal.color(QPalette::AlternateBase);
      p.fillRect(QRect(plot.left(), ly + 1, plot.width(), kLane - 2), lane_bg);
      QColor tag = pal.color(QPalette::Text);
      tag.setAlpha(150);
      p.setPen(tag);
      p.drawText(QRect(kGutter - 54, ly, 51, kLane), Qt::AlignRight | Qt::AlignVCenter, s == 0 ? "compute" : "comm");
      const Lane& lane = row.lanes[s];
      if (lane.events.empty()) continue;
      // First event that may reach into the window: prefix max of ends >= t0.
      auto first = std::lower_bound(lane.max_end.begin(), lane.max_end.end(), t0_);
      int painted_until = -1;  // rightmost pixel column already filled in this lane
      for (size_t i = static_cast<size_t>(first - lane.max_end.begin()); i < lane.events.size(); ++i) {
        const TimelineEvent* e = lane.events[i];
        if (e->start_s > t1_) break;
        ++stats_.considered;
        if (e->end_s() < t0_) continue;
        const double x0 = std::max(0.0, toX(e->start_s, w));
        const double x1 = std::min(w, toX(e->end_s(), w));
        const int px_last = std::max(static_cast<int>(std::floor(x0)), static_cast<int>(std::ceil(x1)) - 1);
        if (px_last <= painted_until) {
          ++stats_.skipped;
          continue;
        }
        const double left = std::max(x0, static_cast<double>(painted_until + 1));
        const double right = std::max(x1, std::floor(left) + 1.0);
        const QRectF box(plot.left() + left, ly + 2, right - left, kLane - 4);
        const QColor fill = EventKindColor(e->kind, pal);
        p.fillRect(box, fill);
        ++stats_.drawn;
        painted_until = px_last;
        if (box.width() > 46) {
          p.setPen(TextColorOn(fill));
          p.drawText(box.adjusted(3, 0, -2, 0), Qt::AlignLeft | Qt::AlignVCenter,
                     QFontMetrics(small).elidedText(Q(e->instruction), Qt::ElideRight, static_cast<int>(box.width()) - 5));
        }
      }
    }
  }
}

void TimelineWidget::wheelEvent(QWheelEvent* event) {
  const double steps = event->angleDelta().y() / 120.0;
  if (steps == 0 || rows_.empty()) return;
  const QRect plot = plotRect();
  const double pivot = toTime(event->position().x() - plot.left(), plot.width());
  const double factor = std::pow(0.8, steps);
  double a = pivot - (pivot - t0_) * factor, b = pivot + (t1_ - pivot) * factor;
  if (b - a > total_ * 1.5) {
    a = 0;
    b = total_ * 1.02;
  }
  setRange(std::max(-total_ * 0.05, a), b);
  event->accept();
}

void TimelineWidget::mousePressEvent(QMouseEvent* event) {
  drag_start_ = event->pos();
  drag_t0_ = t0_;
  drag_t1_ = t1_;
  setCursor(Qt::ClosedHandCursor);
}

void TimelineWidget::mouseMoveEvent(QMouseEvent* event) {
  if (!(event->buttons() & Qt::LeftButton)) return;
  const double dt = (event->pos().x() - drag_start_.x()) / std::max(1.0, static_cast<double>(plotRect().width())) *
                    (drag_t1_ - drag_t0_);
  setRange(drag_t0_ - dt, drag_t1_ - dt);
}

void TimelineWidget::mouseDoubleClickEvent(QMouseEvent*) { fit(); }

const TimelineEvent* TimelineWidget::eventAt(const QPoint& pos) const {
  const QRect plot = plotRect();
  if (pos.x() < plot.left()) return nullptr;
  const int row_h = 2 * kLane + kRowGap;
  const int r = (pos.y() - kAxis - 4) / row_h;
  if (pos.y() < kAxis + 4 || r < 0 || r >= static_cast<int>(rows_.size())) return nullptr;
  const int s = (pos.y() - kAxis - 4 - r * row_h) / kLane;
  if (s < 0 || s >= kNumStreams) return nullptr;
  const double t = toTime(pos.x() - plot.left(), plot.width());
  const double slack = (t1_ - t0_) / std::max(1, plot.width()) * 2;  // two pixels
  const Lane& lane = rows_[static_cast<size_t>(r)].lanes[s];
  auto first = std::lower_bound(lane.max_end.begin(), lane.max_end.end(), t - slack);
  const TimelineEvent* best = nullptr;
  for (size_t i = static_cast<size_t>(first - lane.max_end.begin()); i < lane.events.size(); ++i) {
    const TimelineEvent* e = lane.events[i];
    if (e->start_s > t + slack) break;
    if (e->end_s() >= t - slack && (!best || e->duration_s > best->duration_s)) best = e;
  }
  return best;
}

bool TimelineWidget::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* he = static_cast<QHelpEvent*>(e);
    const TimelineEvent* ev = eventAt(he->pos());
    if (!ev) {
      QToolTip::hideText();
      return true;
    }
    QString tip = QString("<b>%1</b> (%2)<br>start %3, duration %4")
                      .arg(Q(ev->instruction).toHtmlEscaped(), Q(ev->kind).toHtmlEscaped(), FormatSeconds(ev->start_s),
                           FormatSeconds(ev->duration_s));
    if (ev->bytes > 0) tip += QString("<br>%1 %2").arg(FormatBytes(ev->bytes), ev->stream == Stream::kCompute ? "accessed" : "moved");
    if (ev->flops > 0) tip += QString("<br>%1 GFLOP").arg(ev->flops / 1e9, 0, 'g', 3);
    QToolTip::showText(he->globalPos(), tip, this);
    return true;
  }
  return QWidget::event(e);
}

}  // namespace shardscope::views
