#include "core/base/units.h"
#include "views/timeline_view.h"

#include <algorithm>
#include <cmath>

#include <QContextMenuEvent>
#include <QHelpEvent>
#include <QImage>
#include <QKeyEvent>
#include <QMenu>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <QWheelEvent>

#include "views/item_models.h"
#include "views/sharding_style.h"

namespace shardscope::views {

using namespace ::shardscope::sim;

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
  setFocusPolicy(Qt::ClickFocus);
  setCursor(Qt::OpenHandCursor);
}

void TimelineWidget::setTitle(const QString& title) {
  title_ = title;
  update();
}

void TimelineWidget::setHighlightedOrigin(const QString& origin) {
  if (origin == highlight_origin_) return;
  highlight_origin_ = origin;
  update();
}

void TimelineWidget::setOriginResolver(std::function<QString(const QString&)> resolver) {
  resolver_ = std::move(resolver);
  origin_cache_.clear();
  update();
}

QString TimelineWidget::originOf(const std::string& instruction) const {
  if (!resolver_) return {};
  auto it = origin_cache_.find(instruction);
  if (it != origin_cache_.end()) return it->second;
  QString o = resolver_(Q(instruction));
  origin_cache_.emplace(instruction, o);
  return o;
}

QSize TimelineWidget::sizeHint() const {
  // The rows, and a line under them for the totals of a selected range.
  return QSize(700, kAxis + 4 + std::max<int>(1, static_cast<int>(rows_.size())) * (2 * kLane + kRowGap) + 22);
}

void TimelineWidget::setRowMarks(std::vector<RowMarks> marks) {
  marks_ = std::move(marks);
  update();
}

void TimelineWidget::setRun(std::shared_ptr<const RunResult> run) {
  run_ = std::move(run);
  rows_.clear();
  marks_.clear();
  selected_ = hovered_ = nullptr;
  origin_cache_.clear();
  sel_t0_ = sel_t1_ = 0;
  sel_row_ = 0;
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

void TimelineWidget::fit() { setRange(0, std::max(total_, min_span_) * 1.02); }

void TimelineWidget::setMinimumSpan(double span_s) {
  min_span_ = std::max(0.0, span_s);
  fit();
}

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
    p.drawText(QRect(x + 3, 2, 100, kAxis - 4), Qt::AlignLeft | Qt::AlignVCenter, Q(FormatSeconds(t)));
  }
  if (!title_.isEmpty()) {
    QFont bold = small;
    bold.setBold(true);
    p.setFont(bold);
    p.setPen(pal.color(QPalette::Text));
    p.drawText(QRect(4, 2, kGutter - 8, kAxis - 4), Qt::AlignLeft | Qt::AlignVCenter,
               QFontMetrics(bold).elidedText(title_, Qt::ElideRight, kGutter - 8));
    p.setFont(small);
  }
  std::vector<QRectF> outlines;  // the selected event, the hovered one and the highlighted origin
  // Rows.
  const int row_h = 2 * kLane + kRowGap;
  for (size_t r = 0; r < rows_.size(); ++r) {
    const int y = kAxis + 4 + static_cast<int>(r) * row_h;
    if (y > area.bottom()) break;
    const Row& row = rows_[r];
    p.setPen(pal.color(QPalette::Text));
    const bool captioned = r < marks_.size() && !marks_[r].caption.isEmpty();
    p.drawText(QRect(4, y, kGutter - 56, captioned ? kLane : 2 * kLane), Qt::AlignLeft | Qt::AlignVCenter,
               QFontMetrics(small).elidedText(row.label, Qt::ElideRight, kGutter - 60));
    if (captioned) {
      p.setPen(QColor(190, 50, 38));
      p.drawText(QRect(4, y + kLane, kGutter - 56, kLane), Qt::AlignLeft | Qt::AlignVCenter,
                 QFontMetrics(small).elidedText(marks_[r].caption, Qt::ElideRight, kGutter - 60));
      p.setPen(pal.color(QPalette::Text));
    }
    for (int s = 0; s < kNumStreams; ++s) {
      const int ly = y + s * kLane;
      QColor lane_bg = pal.color(QPalette::AlternateBase);
      p.fillRect(QRect(plot.left(), ly + 1, plot.width(), kLane - 2), lane_bg);
      QColor tag = pal.color(QPalette::Text);
      tag.setAlpha(150);
      p.setPen(tag);
      p.drawText(QRect(kGutter - 54, ly, 51, kLane), Qt::AlignRight | Qt::AlignVCenter, s == 0 ? "compute" : "comm");
      if (s == 0 && r < marks_.size()) {
        // Marked spans (the bubble) behind the compute events.
        QColor mark(214, 64, 48, 70);
        for (const auto& [m0, m1] : marks_[r].spans) {
          if (m1 < t0_ || m0 > t1_) continue;
          const double x0 = std::max(0.0, toX(m0, w)), x1 = std::min(w, toX(m1, w));
          const QRectF band(plot.left() + x0, ly + 1, std::max(1.0, x1 - x0), kLane - 2);
          p.fillRect(band, mark);
          p.fillRect(band, QBrush(QColor(214, 64, 48, 140), Qt::BDiagPattern));
        }
      }
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
        if (e == selected_ || e == hovered_ || (!highlight_origin_.isEmpty() && originOf(e->instruction) == highlight_origin_)) {
          outlines.push_back(QRectF(plot.left() + x0, ly + 1, std::max(2.0, x1 - x0), kLane - 2));
        }
        if (box.width() > 46) {
          p.setPen(TextColorOn(fill));
          p.drawText(box.adjusted(3, 0, -2, 0), Qt::AlignLeft | Qt::AlignVCenter,
                     QFontMetrics(small).elidedText(Q(e->instruction), Qt::ElideRight, static_cast<int>(box.width()) - 5));
        }
      }
    }
  }
  if (!outlines.empty()) {
    QPen pen(pal.color(QPalette::Text), 1.5);
    p.setPen(pen);
    p.setBrush(Qt::NoBrush);
    for (const QRectF& r : outlines) p.drawRect(r.adjusted(0.5, 0.5, -0.5, -0.5));
  }
  paintSelection(p, area);
}

void TimelineWidget::paintSelection(QPainter& p, const QRect& area) {
  if (!hasSelection()) return;
  const QRect plot = plotRect();
  const double w = plot.width();
  const double x0 = plot.left() + std::clamp(toX(sel_t0_, w), -1.0, w + 1);
  const double x1 = plot.left() + std::clamp(toX(sel_t1_, w), -1.0, w + 1);
  QColor hl = palette().color(QPalette::Highlight);
  hl.setAlpha(55);
  p.fillRect(QRectF(x0, kAxis, std::max(1.0, x1 - x0), area.bottom() - kAxis), hl);
  hl.setAlpha(200);
  p.setPen(QPen(hl, 1));
  p.drawLine(QPointF(x0, kAxis), QPointF(x0, area.bottom()));
  p.drawLine(QPointF(x1, kAxis), QPointF(x1, area.bottom()));
  // Totals of the selected row, in a box under the rows (over the last one when there is no room).
  const RangeTotals t = rangeTotals(sel_row_, sel_t0_, sel_t1_);
  auto pct = [&](double v) { return t.span_s > 0 ? QString("%1%").arg(v / t.span_s * 100, 0, 'f', 0) : QString("-"); };
  const QString text = QString("%1 selected%2 \u00B7 compute %3 (%4) \u00B7 comm %5 (%6) \u00B7 overlap %7 \u00B7 idle %8 \u00B7 %9 events")
                           .arg(Q(FormatSeconds(t.span_s)),
                                rows_.size() > 1 ? QString(" (row %1)").arg(sel_row_ + 1) : QString(),
                                Q(FormatSeconds(t.compute_s)), pct(t.compute_s), Q(FormatSeconds(t.communication_s)),
                                pct(t.communication_s), Q(FormatSeconds(t.overlapped_s)), Q(FormatSeconds(t.idle_s)))
                           .arg(t.events);
  QFont small = font();
  small.setPointSizeF(std::max(6.5, font().pointSizeF() * 0.85));
  p.setFont(small);
  const QFontMetrics fm(small);
  const int tw = std::min(plot.width() - 4, fm.horizontalAdvance(text) + 12);
  const int h = fm.height() + 4;
  const int below_rows = kAxis + 4 + static_cast<int>(rows_.size()) * (2 * kLane + kRowGap);
  const QRect box(plot.left() + 2, std::max(kAxis, std::min(below_rows, area.bottom() - h)), tw, h);
  QColor bg = palette().color(QPalette::ToolTipBase);
  bg.setAlpha(235);
  p.fillRect(box, bg);
  p.setPen(palette().color(QPalette::ToolTipText));
  p.drawText(box.adjusted(6, 0, -6, 0), Qt::AlignLeft | Qt::AlignVCenter, fm.elidedText(text, Qt::ElideRight, tw - 12));
}

namespace {

// Busy intervals of a lane clipped to [a, b), merged (events of one lane may overlap: several
// collectives in flight).
std::vector<std::pair<double, double>> BusyIntervals(const std::vector<const TimelineEvent*>& events,
                                                     const std::vector<double>& max_end, double a, double b) {
  std::vector<std::pair<double, double>> out;
  auto first = std::lower_bound(max_end.begin(), max_end.end(), a);
  for (size_t i = static_cast<size_t>(first - max_end.begin()); i < events.size(); ++i) {
    const TimelineEvent* e = events[i];
    if (e->start_s >= b) break;
    const double s = std::max(a, e->start_s), t = std::min(b, e->end_s());
    if (t <= s) continue;
    if (!out.empty() && s <= out.back().second) out.back().second = std::max(out.back().second, t);
    else out.emplace_back(s, t);
  }
  return out;
}

double Length(const std::vector<std::pair<double, double>>& v) {
  double n = 0;
  for (const auto& [s, t] : v) n += t - s;
  return n;
}

double IntersectionLength(const std::vector<std::pair<double, double>>& x, const std::vector<std::pair<double, double>>& y) {
  double n = 0;
  size_t i = 0, j = 0;
  while (i < x.size() && j < y.size()) {
    const double s = std::max(x[i].first, y[j].first), t = std::min(x[i].second, y[j].second);
    if (t > s) n += t - s;
    if (x[i].second < y[j].second) ++i;
    else ++j;
  }
  return n;
}

}  // namespace

TimelineWidget::RangeTotals TimelineWidget::rangeTotals(int row, double start_s, double end_s) const {
  RangeTotals t;
  if (row < 0 || row >= static_cast<int>(rows_.size()) || !(end_s > start_s)) return t;
  t.span_s = end_s - start_s;
  const Row& r = rows_[static_cast<size_t>(row)];
  std::vector<std::pair<double, double>> busy[kNumStreams];
  for (int s = 0; s < kNumStreams; ++s) {
    const Lane& lane = r.lanes[s];
    busy[s] = BusyIntervals(lane.events, lane.max_end, start_s, end_s);
    auto first = std::lower_bound(lane.max_end.begin(), lane.max_end.end(), start_s);
    for (size_t i = static_cast<size_t>(first - lane.max_end.begin()); i < lane.events.size(); ++i) {
      const TimelineEvent* e = lane.events[i];
      if (e->start_s >= end_s) break;
      if (e->end_s() <= start_s && !(e->duration_s == 0 && e->start_s >= start_s)) continue;
      ++t.events;
      if (s == static_cast<int>(Stream::kCommunication)) t.bytes += e->bytes;
      else t.flops += e->flops;
    }
  }
  t.compute_s = Length(busy[0]);
  t.communication_s = Length(busy[1]);
  t.overlapped_s = IntersectionLength(busy[0], busy[1]);
  t.idle_s = std::max(0.0, t.span_s - (t.compute_s + t.communication_s - t.overlapped_s));
  return t;
}

void TimelineWidget::selectRange(double start_s, double end_s, int row) {
  if (end_s < start_s) std::swap(start_s, end_s);
  sel_t0_ = start_s;
  sel_t1_ = end_s;
  sel_row_ = std::clamp(row, 0, std::max(0, static_cast<int>(rows_.size()) - 1));
  update();
  emit rangeSelected(sel_t0_, sel_t1_);
}

void TimelineWidget::clearSelection() {
  if (!hasSelection()) return;
  sel_t0_ = sel_t1_ = 0;
  update();
  emit rangeSelected(0, 0);
}

void TimelineWidget::zoomToSelection() {
  if (hasSelection()) setRange(sel_t0_, sel_t1_);
}

int TimelineWidget::rowAt(int y) const {
  const int row_h = 2 * kLane + kRowGap;
  if (y < kAxis + 4) return -1;
  const int r = (y - kAxis - 4) / row_h;
  return r >= 0 && r < static_cast<int>(rows_.size()) ? r : -1;
}

QPoint TimelineWidget::eventCenter(int row, Stream stream, const std::string& instruction) const {
  if (row < 0 || row >= static_cast<int>(rows_.size())) return {-1, -1};
  const QRect plot = plotRect();
  const Lane& lane = rows_[static_cast<size_t>(row)].lanes[static_cast<int>(stream)];
  for (const TimelineEvent* e : lane.events) {
    if (e->instruction != instruction || e->end_s() < t0_ || e->start_s > t1_) continue;
    const double a = std::max(t0_, e->start_s), b = std::min(t1_, e->end_s());
    const int x = plot.left() + static_cast<int>(std::floor(toX((a + b) / 2, plot.width())));
    const int y = kAxis + 4 + row * (2 * kLane + kRowGap) + static_cast<int>(stream) * kLane + kLane / 2;
    return {x, y};
  }
  return {-1, -1};
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
  if (event->button() != Qt::LeftButton) return;
  drag_start_ = event->pos();
  drag_moved_ = false;
  drag_t0_ = t0_;
  drag_t1_ = t1_;
  if (event->modifiers() & Qt::ShiftModifier) {
    drag_ = Drag::kSelect;
    setCursor(Qt::IBeamCursor);
  } else {
    drag_ = Drag::kPan;
    setCursor(Qt::ClosedHandCursor);
  }
}

void TimelineWidget::mouseMoveEvent(QMouseEvent* event) {
  if (drag_ == Drag::kNone || !(event->buttons() & Qt::LeftButton)) {
    const TimelineEvent* h = eventAt(event->pos());
    if (h != hovered_) {
      hovered_ = h;
      update();
    }
    return;
  }
  if ((event->pos() - drag_start_).manhattanLength() >= 4) drag_moved_ = true;
  if (!drag_moved_) return;
  const QRect plot = plotRect();
  if (drag_ == Drag::kSelect) {
    const double a = toTime(drag_start_.x() - plot.left(), plot.width());
    const double b = toTime(event->pos().x() - plot.left(), plot.width());
    const int row = rowAt(drag_start_.y());
    selectRange(std::max(0.0, std::min(a, b)), std::max(a, b), row < 0 ? 0 : row);
    return;
  }
  const double dt = (event->pos().x() - drag_start_.x()) / std::max(1.0, static_cast<double>(plot.width())) *
                    (drag_t1_ - drag_t0_);
  setRange(drag_t0_ - dt, drag_t1_ - dt);
}

void TimelineWidget::mouseReleaseEvent(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton) return;
  const Drag was = drag_;
  drag_ = Drag::kNone;
  setCursor(Qt::OpenHandCursor);
  if (was == Drag::kNone || drag_moved_) return;
  // A click (no drag): select the event under the pointer, if any.
  const TimelineEvent* e = eventAt(event->pos());
  if (was == Drag::kSelect && !e) {
    clearSelection();
    return;
  }
  if (e != selected_) {
    selected_ = e;
    update();
  }
  if (e) emit eventClicked(Q(e->instruction), rowAt(event->pos().y()));
}

void TimelineWidget::mouseDoubleClickEvent(QMouseEvent* event) {
  const QRect plot = plotRect();
  const double t = toTime(event->pos().x() - plot.left(), plot.width());
  if (hasSelection() && t >= sel_t0_ && t <= sel_t1_ && (sel_t1_ - sel_t0_) < (t1_ - t0_) * 0.999) {
    zoomToSelection();
  } else {
    fit();
  }
}

void TimelineWidget::keyPressEvent(QKeyEvent* event) {
  const double mid = (t0_ + t1_) / 2, half = (t1_ - t0_) / 2;
  switch (event->key()) {
    case Qt::Key_Escape: clearSelection(); break;
    case Qt::Key_Z: zoomToSelection(); break;
    case Qt::Key_F:
    case Qt::Key_Home: fit(); break;
    case Qt::Key_Plus:
    case Qt::Key_Equal: setRange(mid - half * 0.6, mid + half * 0.6); break;
    case Qt::Key_Minus: setRange(std::max(-total_ * 0.05, mid - half / 0.6), mid + half / 0.6); break;
    default: QWidget::keyPressEvent(event); return;
  }
  event->accept();
}

void TimelineWidget::contextMenuEvent(QContextMenuEvent* event) {
  if (rows_.empty()) return;
  QMenu menu(this);
  QAction* zoom = menu.addAction("Zoom to selection");
  zoom->setEnabled(hasSelection());
  QAction* clear = menu.addAction("Clear selection");
  clear->setEnabled(hasSelection());
  QAction* fit_all = menu.addAction("Fit the whole step");
  menu.addSeparator();
  menu.addAction("Shift+drag selects a time range")->setEnabled(false);
  QAction* chosen = menu.exec(event->globalPos());
  if (chosen == zoom) zoomToSelection();
  else if (chosen == clear) clearSelection();
  else if (chosen == fit_all) fit();
}

void TimelineWidget::leaveEvent(QEvent* event) {
  if (hovered_) {
    hovered_ = nullptr;
    update();
  }
  QWidget::leaveEvent(event);
}

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

QString TimelineWidget::toolTipAt(const QPoint& pos) const {
  const TimelineEvent* ev = eventAt(pos);
  if (!ev) return {};
  QString tip = QString("<b>%1</b> (%2)<br>start %3, duration %4")
                    .arg(Q(ev->instruction).toHtmlEscaped(), Q(ev->kind).toHtmlEscaped(), Q(FormatSeconds(ev->start_s)),
                         Q(FormatSeconds(ev->duration_s)));
  if (ev->bytes > 0) tip += QString("<br>%1 %2").arg(Q(FormatBytes(ev->bytes)), ev->stream == Stream::kCompute ? "accessed" : "moved");
  if (ev->flops > 0) tip += QString("<br>%1 GFLOP").arg(ev->flops / 1e9, 0, 'g', 3);
  const QString origin = originOf(ev->instruction);
  if (!origin.isEmpty() && origin != Q(ev->instruction)) tip += QString("<br>from <i>%1</i>").arg(origin.toHtmlEscaped());
  if (!origin.isEmpty()) tip += "<br><small>click to select the instruction</small>";
  return tip;
}

bool TimelineWidget::event(QEvent* e) {
  if (e->type() == QEvent::ShortcutOverride) {
    // Escape clears a selection here before it reaches a window-wide shortcut (Cancel).
    auto* ke = static_cast<QKeyEvent*>(e);
    if (ke->key() == Qt::Key_Escape && hasSelection()) {
      e->accept();
      return true;
    }
  }
  if (e->type() == QEvent::ToolTip) {
    auto* he = static_cast<QHelpEvent*>(e);
    const QString tip = toolTipAt(he->pos());
    if (tip.isEmpty()) {
      QToolTip::hideText();
      return true;
    }
    QToolTip::showText(he->globalPos(), tip, this);
    return true;
  }
  return QWidget::event(e);
}

}  // namespace shardscope::views
