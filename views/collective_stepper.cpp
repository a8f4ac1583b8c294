#include "views/collective_stepper.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <QCheckBox>
#include <QComboBox>
#include <QFontDatabase>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHelpEvent>
#include <QLabel>
#include <QPainter>
#include <QPainterPath>
#include <QPushButton>
#include <QScrollArea>
#include <QShortcut>
#include <QSlider>
#include <QSplitter>
#include <QStyle>
#include <QTimer>
#include <QToolTip>
#include <QVBoxLayout>

#include "core/base/units.h"
#include "views/sharding_style.h"

namespace shardscope::views {

using namespace ::shardscope::sim;

namespace {

QString Q(const std::string& s) { return QString::fromStdString(s); }

const std::vector<DeviceHolding> kNoDevices;
const std::vector<StepTransfer> kNoTransfers;

// A point on a quadratic Bezier and its tangent.
QPointF Bezier(const QPointF& a, const QPointF& c, const QPointF& b, double t) {
  return (1 - t) * (1 - t) * a + 2 * (1 - t) * t * c + t * t * b;
}
QPointF BezierTangent(const QPointF& a, const QPointF& c, const QPointF& b, double t) {
  return 2 * (1 - t) * (c - a) + 2 * t * (b - c);
}

QPointF Unit(const QPointF& v) {
  const double len = std::hypot(v.x(), v.y());
  return len > 1e-9 ? v / len : QPointF(1, 0);
}

}  // namespace

// ---- TeachingCanvas ------------------------------------------------------------------------------

TeachingCanvas::TeachingCanvas(QWidget* parent) : QWidget(parent) {
  setObjectName("teachingCanvas");
  setMouseTracking(true);
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding);
}

void TeachingCanvas::setPlan(const TeachingPlan* plan) {
  plan_ = plan;
  step_ = 0;
  tile_of_device_.clear();
  device_at_tile_.clear();
  coords_.clear();
  if (plan_ && plan_->ok) {
    const DeviceMesh& mesh = plan_->request.mesh;
    const int64_t n = mesh.num_devices();
    const int64_t k = mesh.num_axes();
    tile_of_device_.assign(static_cast<size_t>(std::max<int64_t>(n, 0)), -1);
    for (int64_t i = 0; i < n; ++i) {
      std::vector<int64_t> c(static_cast<size_t>(k), 0);
      int64_t rest = i;
      for (int64_t a = k - 1; a >= 0; --a) {
        c[static_cast<size_t>(a)] = rest % mesh.axis_size(a);
        rest /= mesh.axis_size(a);
      }
      const int64_t d = k ? mesh.DeviceAt(c) : i;
      device_at_tile_.push_back(d);
      coords_.push_back(c);
      if (d >= 0 && d < n) tile_of_device_[static_cast<size_t>(d)] = i;
    }
  }
  update();
}

void TeachingCanvas::setStep(int step) {
  step_ = step;
  update();
}

const std::vector<DeviceHolding>& TeachingCanvas::devices() const {
  if (!plan_ || !plan_->ok) return kNoDevices;
  if (step_ <= 0 || step_ > static_cast<int>(plan_->walk.steps.size())) return plan_->walk.initial;
  return plan_->walk.steps[static_cast<size_t>(step_ - 1)].after;
}

const std::vector<StepTransfer>& TeachingCanvas::transfers() const {
  if (!plan_ || !plan_->ok || step_ <= 0 || step_ > static_cast<int>(plan_->walk.steps.size())) return kNoTransfers;
  return plan_->walk.steps[static_cast<size_t>(step_ - 1)].transfers;
}

TeachingCanvas::Geometry TeachingCanvas::geometry() const {
  Geometry g;
  g.gap = 6;
  g.slice_gap = 24;
  g.label_h = 0;
  g.left = 34;
  g.top = 26;
  if (!plan_ || !plan_->ok) return g;
  const DeviceMesh& mesh = plan_->request.mesh;
  const int64_t k = mesh.num_axes();
  const MeshGrid shape = MeshGrid::Shape(mesh, 8);
  g.rows = shape.rows;
  g.cols = shape.cols;
  g.slices = shape.slices;
  // Wraparound (and other long) arrows run in lanes between the rows and columns.
  for (const auto& s : plan_->walk.steps) {
    for (const auto& t : s.transfers) g.lanes = g.lanes || t.wraparound;
  }
  g.label_h = g.slices > 1 ? 18 : 0;
  g.top = 26;
  g.left = k >= 2 ? 34 : 14;
  const double ratio = g.lanes ? 0.34 : 0.08;
  const double right = 10, bottom = 8;
  double best = -1;
  int best_sc = 1;
  for (int sc = 1; sc <= g.slices; ++sc) {
    const int sr = (g.slices + sc - 1) / sc;
    const double w_avail = width() - g.left - right - (sc - 1) * g.slice_gap;
    const double h_avail = height() - g.top - bottom - sr * g.label_h - (sr - 1) * g.slice_gap;
    const double tw = w_avail / (sc * g.cols * (1 + ratio) + (g.lanes ? ratio : 0));
    const double th = h_avail / (sr * g.rows * (1 + ratio) + (g.lanes ? ratio : 0));
    const double t = std::min(tw, th);
    if (t > best + 0.5) {
      best = t;
      best_sc = sc;
    }
  }
  g.slice_cols = best_sc;
  g.tile = std::clamp(best, 18.0, 150.0);
  g.gap = std::max(g.lanes ? 12.0 : 4.0, ratio * g.tile);
  // Centre the grid horizontally.
  const double used = g.Width();
  g.left += std::max(0.0, (width() - g.left - right - used) / 2);
  return g;
}

QRectF TeachingCanvas::tileRect(int64_t device) const {
  if (device < 0 || device >= static_cast<int64_t>(tile_of_device_.size())) return {};
  const int64_t i = tile_of_device_[static_cast<size_t>(device)];
  if (i < 0) return {};
  return geometry().TileRect(static_cast<size_t>(i));
}

int TeachingCanvas::tileAt(const QPointF& p) const {
  return geometry().TileAt(p, device_at_tile_.size());
}

QColor TeachingCanvas::groupColor(int64_t group) const {
  const bool dark = IsDarkPalette(palette());
  if (group < 0) return palette().color(QPalette::Mid);
  // Golden-angle hues starting at blue: neighbouring groups look different.
  const double hue = std::fmod(0.6 + 0.381966 * static_cast<double>(group), 1.0);
  return QColor::fromHsvF(static_cast<float>(hue), dark ? 0.55f : 0.85f, dark ? 1.0f : 0.72f);
}

void TeachingCanvas::paintEvent(QPaintEvent*) {
  stats_ = {};
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  const QPalette pal = palette();
  const QColor text = pal.color(QPalette::WindowText);
  QFont small = font();
  small.setPointSizeF(std::max(6.5, font().pointSizeF() * 0.82));
  QFont bold = font();
  bold.setBold(true);
  if (!plan_ || !plan_->ok) {
    p.setPen(text);
    p.drawText(rect().adjusted(12, 12, -12, -12), Qt::AlignCenter | Qt::TextWordWrap,
               plan_ ? Q(plan_->message) : QString("Choose an example above, or double-click a collective in the partitioned program."));
    return;
  }
  const Geometry g = geometry();
  const DeviceMesh& mesh = plan_->request.mesh;
  const auto& holdings = devices();

  g.PaintCaptions(p, mesh, width(), small, bold, text);

  // Tiles: the device id, the shard it owns, and a cell per member of its group.
  const int colours = static_cast<int>(std::max<int64_t>(1, plan_->walk.colour_count));
  for (size_t i = 0; i < device_at_tile_.size(); ++i) {
    const int64_t device = device_at_tile_[i];
    const QRectF r = g.TileRect(i);
    const DeviceHolding* h = device >= 0 && device < static_cast<int64_t>(holdings.size()) ? &holdings[static_cast<size_t>(device)] : nullptr;
    const bool member = h && h->group >= 0;
    ++stats_.tiles;
    QColor bg = member ? pal.color(QPalette::Base) : pal.color(QPalette::Button);
    QPen border(member ? groupColor(h->group) : pal.color(QPalette::Mid), member ? 2.0 : 1.0);
    if (!member) border.setStyle(Qt::DashLine);
    p.setPen(border);
    p.setBrush(bg);
    p.drawRoundedRect(r, 5, 5);
    p.setFont(small);
    p.setPen(member ? text : pal.color(QPalette::Disabled, QPalette::WindowText));
    const double header = g.tile >= 34 ? std::max(13.0, g.tile * 0.2) : 0;
    p.drawText(QRectF(r.left() + 4, r.top() + 1, r.width() - 8, std::max(header, 12.0)), Qt::AlignLeft | Qt::AlignVCenter,
               QString::number(device));
    if (!member || h->cells.empty()) continue;
    // The shard / chunk this device owns: a dot in that colour, top right.
    if (header > 0 && plan_->walk.kind != CollectiveKind::kCollectivePermute) {
      const double dot = std::min(header - 3, 11.0);
      const QRectF dr(r.right() - dot - 4, r.top() + (header - dot) / 2 + 1, dot, dot);
      p.setPen(QPen(pal.color(QPalette::Mid), 1));
      p.setBrush(ShardTileColor(static_cast<int>(h->position % colours), colours, pal));
      p.drawEllipse(dr);
    }
    // Cells.
    const int n = static_cast<int>(h->cells.size());
    const int ccols = n <= 8 ? n : static_cast<int>(std::ceil(std::sqrt(static_cast<double>(n))));
    const int crows = (n + ccols - 1) / ccols;
    const QRectF body = r.adjusted(4, header + 2, -4, -4);
    const double cgap = body.width() / ccols > 10 ? 2 : 1;
    const double cw = (body.width() - (ccols - 1) * cgap) / ccols;
    const double ch = (body.height() - (crows - 1) * cgap) / crows;
    const bool permute = plan_->walk.kind == CollectiveKind::kCollectivePermute;
    for (int c = 0; c < n; ++c) {
      QRectF cr(body.left() + (c % ccols) * (cw + cgap), body.top() + (c / ccols) * (ch + cgap), cw, ch);
      if (permute && n == 2) {
        // Its own block, and the (smaller) piece it received beside it.
        const double own_w = (body.width() - cgap) * 0.68;
        cr = c == 0 ? QRectF(body.left(), body.top(), own_w, body.height())
                    : QRectF(body.left() + own_w + cgap, body.top(), body.width() - own_w - cgap, body.height());
      }
      const HeldCell& cell = h->cells[static_cast<size_t>(c)];
      p.setPen(Qt::NoPen);
      p.setBrush(pal.color(QPalette::AlternateBase));
      p.drawRect(cr);
      if (cell.colour >= 0 && cell.fill > 0) {
        const double f = std::clamp(cell.fill, 0.0, 1.0);
        const QRectF fr(cr.left(), cr.bottom() - cr.height() * f, cr.width(), cr.height() * f);
        p.setBrush(ShardTileColor(static_cast<int>(cell.colour % colours), colours, pal));
        p.drawRect(fr);
      }
      const bool own = plan_->walk.kind != CollectiveKind::kCollectivePermute && plan_->walk.kind != CollectiveKind::kAllToAll && c == h->position;
      p.setPen(QPen(own ? text : pal.color(QPalette::Mid), own ? 1.5 : 0.8));
      p.setBrush(Qt::NoBrush);
      p.drawRect(cr);
    }
  }

  // Arrows: transfers between the same two devices in this step are one arrow.
  struct Arrow {
    int64_t src = -1, dst = -1, group = 0;
    bool wraparound = false, reduce = false, all_half = true;
    double bytes = 0;
    QStringList labels;
  };
  std::map<std::tuple<int64_t, int64_t, bool>, Arrow> arrows;
  for (const auto& t : transfers()) {
    if (t.on_chip || t.src_device == t.dst_device) continue;
    Arrow& a = arrows[{t.src_device, t.dst_device, t.wraparound}];
    a.src = t.src_device;
    a.dst = t.dst_device;
    a.group = t.group;
    a.wraparound = t.wraparound;
    a.reduce = a.reduce || t.reduce_on_arrival;
    a.all_half = a.all_half && t.half;
    a.bytes += t.bytes;
    a.labels << Q(t.piece);
  }
  double max_bytes = 0;
  for (const auto& [key, a] : arrows) max_bytes = std::max(max_bytes, a.bytes);
  // Labels where they fit: on every arrow, or (several groups doing the same) on the first group's.
  int first_group_arrows = 0;
  for (const auto& [key, a] : arrows) first_group_arrows += a.group == 0;
  const bool label_all = arrows.size() <= 24 && g.tile >= 56;
  const bool label_first = !label_all && first_group_arrows <= 24 && g.tile >= 84;
  const QColor halo = pal.color(QPalette::Base);
  struct Label {
    QStringList labels;
    QPointF mid, side;
    double width;
    QColor colour;
  };
  std::vector<Label> labels;
  for (const auto& [key, a] : arrows) {
    const QRectF ra = tileRect(a.src), rb = tileRect(a.dst);
    if (ra.isEmpty() || rb.isEmpty()) continue;
    const int64_t ia = tile_of_device_[static_cast<size_t>(a.src)], ib = tile_of_device_[static_cast<size_t>(a.dst)];
    const int per_slice = std::max(1, g.rows * g.cols);
    const bool same_slice = ia / per_slice == ib / per_slice;
    const int64_t dr = (ib % per_slice) / g.cols - (ia % per_slice) / g.cols;
    const int64_t dc = (ib % per_slice) % g.cols - (ia % per_slice) % g.cols;
    QPointF start, control, end;
    QPointF label_side;  // where the label goes, away from the arrow
    const double t = g.tile;
    if (a.wraparound && same_slice && dr == 0) {
      // Round the outside of the row: through the lane under it.
      const int dir = dc > 0 ? +1 : -1;
      const double depth = g.gap * (dir > 0 ? 0.55 : 0.95);
      start = QPointF(ra.center().x() + dir * t * 0.18, ra.bottom());
      end = QPointF(rb.center().x() - dir * t * 0.18, rb.bottom());
      control = QPointF((start.x() + end.x()) / 2, ra.bottom() + 2 * depth);
      label_side = QPointF(0, 1);
    } else if (a.wraparound && same_slice && dc == 0) {
      // Round the outside of the column: through the lane to its right.
      const int dir = dr > 0 ? +1 : -1;
      const double depth = g.gap * (dir > 0 ? 0.55 : 0.95);
      start = QPointF(ra.right(), ra.center().y() + dir * t * 0.18);
      end = QPointF(rb.right(), rb.center().y() - dir * t * 0.18);
      control = QPointF(ra.right() + 2 * depth, (start.y() + end.y()) / 2);
      label_side = QPointF(1, 0);
    } else {
      const QPointF ca = ra.center(), cb = rb.center();
      const QPointF u = Unit(cb - ca);
      const QPointF right(-u.y(), u.x());  // traffic keeps to the right: the two ways never overlap
      const bool adjacent = same_slice && std::abs(dr) + std::abs(dc) == 1;
      const double offset = t * 0.14;
      start = ca + u * (t * 0.22) + right * offset;
      end = cb - u * (t * 0.22) + right * offset;
      const double len = std::hypot(end.x() - start.x(), end.y() - start.y());
      control = (start + end) / 2 + right * (adjacent ? 0.0 : std::min(0.22 * len, 2.0 * t));
      label_side = right;
    }
    QPainterPath path(start);
    path.quadTo(control, end);
    const QColor colour = groupColor(a.group);
    const double width = 1.4 + 2.6 * (max_bytes > 0 ? a.bytes / max_bytes : 1.0);
    p.setBrush(Qt::NoBrush);
    p.setPen(QPen(halo, width + 2.5, Qt::SolidLine, Qt::RoundCap));
    p.drawPath(path);
    QPen pen(colour, width, a.all_half ? Qt::DashLine : Qt::SolidLine, Qt::RoundCap);
    p.setPen(pen);
    p.drawPath(path);
    // Arrow head.
    const QPointF tangent = Unit(BezierTangent(start, control, end, 1.0));
    const QPointF normal(-tangent.y(), tangent.x());
    const double head = 5 + 1.6 * width;
    QPolygonF tri;
    tri << end << end - tangent * head + normal * head * 0.55 << end - tangent * head - normal * head * 0.55;
    p.setPen(QPen(halo, 1));
    p.setBrush(colour);
    p.drawPolygon(tri);
    if (a.reduce) {
      // ⊕: added to the receiver's copy on arrival.
      const QPointF c = end - tangent * (head + 6);
      const double rad = 5;
      p.setPen(QPen(colour, 1.4));
      p.setBrush(halo);
      p.drawEllipse(c, rad, rad);
      p.drawLine(c - QPointF(rad * 0.6, 0), c + QPointF(rad * 0.6, 0));
      p.drawLine(c - QPointF(0, rad * 0.6), c + QPointF(0, rad * 0.6));
      ++stats_.reduce;
    }
    if (label_all || (label_first && a.group == 0)) {
      labels.push_back({a.labels, Bezier(start, control, end, 0.5), label_side, width, colour});
    }
    ++stats_.arrows;
    if (a.wraparound) ++stats_.wraparound;
    if (a.all_half) ++stats_.dashed;
  }
  // Labels last, so no arrow covers them.
  p.setFont(small);
  const QFontMetricsF fm(small);
  const bool named = !plan_->request.piece_names.empty();
  for (const Label& l : labels) {
    QString label = l.labels.front();
    if (named) {
      // Named all-to-all pieces ("tokens of group 3 for expert 5") on two lines, each elided.
      QStringList lines = label.split(" for ");
      if (lines.size() == 2) lines[1] = "for " + lines[1];
      if (l.labels.size() > 1) lines.back() += QString(" +%1").arg(l.labels.size() - 1);
      for (QString& line : lines) line = fm.elidedText(line, Qt::ElideRight, std::max(60.0, g.tile * 1.3));
      label = lines.join('\n');
    } else {
      if (l.labels.size() > 1) label += QString(" +%1").arg(l.labels.size() - 1);
      label = fm.elidedText(label, Qt::ElideRight, std::max(60.0, g.tile * 1.6));
    }
    QRectF box = fm.boundingRect(QRectF(0, 0, 4000, 4000), Qt::AlignCenter, label);
    box = QRectF(0, 0, box.width(), box.height()).adjusted(-3, -1, 3, 1);
    // Beside the arrow, on its own side, so the two directions' labels do not cover each other.
    const double away = std::fabs(l.side.x()) * box.width() / 2 + std::fabs(l.side.y()) * box.height() / 2 + l.width / 2 + 2;
    box.moveCenter(l.mid + l.side * away);
    QColor back = halo;
    back.setAlpha(215);
    p.setPen(Qt::NoPen);
    p.setBrush(back);
    p.drawRoundedRect(box, 3, 3);
    p.setPen(l.colour.darker(IsDarkPalette(pal) ? 100 : 115));
    p.drawText(box, Qt::AlignCenter, label);
  }
}

bool TeachingCanvas::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip && plan_ && plan_->ok) {
    auto* he = static_cast<QHelpEvent*>(e);
    const int i = tileAt(he->pos());
    if (i < 0) {
      QToolTip::hideText();
      e->ignore();
      return true;
    }
    const int64_t device = device_at_tile_[static_cast<size_t>(i)];
    const DeviceMesh& mesh = plan_->request.mesh;
    QStringList coords;
    for (int64_t a = 0; a < mesh.num_axes(); ++a) {
      coords << QString("%1=%2").arg(Q(mesh.axes()[static_cast<size_t>(a)].name)).arg(coords_[static_cast<size_t>(i)][static_cast<size_t>(a)]);
    }
    QString tip = QString("<b>device %1</b> (%2)").arg(device).arg(coords.join(", "));
    const auto& holdings = devices();
    if (device >= 0 && device < static_cast<int64_t>(holdings.size())) {
      const DeviceHolding& h = holdings[static_cast<size_t>(device)];
      if (h.group >= 0 && plan_->walk.kind != CollectiveKind::kCollectivePermute) tip += QString("<br>replica group %1, member %2").arg(h.group).arg(h.position);
      tip += "<br>" + Q(h.text).toHtmlEscaped();
    }
    QStringList sends, receives;
    for (const auto& t : transfers()) {
      if (t.src_device == device && t.dst_device != device) sends << QString("%1 \u2192 %2 (%3)").arg(Q(t.piece).toHtmlEscaped()).arg(t.dst_device).arg(Q(FormatBytes(t.bytes)));
      if (t.dst_device == device && t.src_device != device) receives << QString("%1 \u2190 %2 (%3)").arg(Q(t.piece).toHtmlEscaped()).arg(t.src_device).arg(Q(FormatBytes(t.bytes)));
    }
    auto shorten = [](QStringList l) {
      if (l.size() > 8) {
        const int more = static_cast<int>(l.size()) - 6;
        l = l.mid(0, 6);
        l << QString("\u2026 and %1 more").arg(more);
      }
      return l.join("<br>&nbsp;&nbsp;");
    };
    if (!sends.isEmpty()) tip += "<br><b>sends</b> " + shorten(sends);
    if (!receives.isEmpty()) tip += "<br><b>receives</b> " + shorten(receives);
    QToolTip::showText(he->globalPos(), tip, this);
    return true;
  }
  return QWidget::event(e);
}

// ---- CollectiveStepper ------------------------------------------------------------------------------

CollectiveStepper::CollectiveStepper(QWidget* parent)
    : QWidget(parent),
      examples_(new QComboBox(this)),
      chip_(new QComboBox(this)),
      wrap_(new QComboBox(this)),
      bidirectional_(new QCheckBox("Both ways", this)),
      title_(new QLabel(this)),
      summary_(new QLabel(this)),
      canvas_(new TeachingCanvas(this)),
      legend_(new QLabel(this)),
      prev_(new QPushButton(this)),
      play_(new QPushButton(this)),
      next_(new QPushButton(this)),
      slider_(new QSlider(Qt::Horizontal, this)),
      step_label_(new QLabel(this)),
      caption_(new QLabel(this)),
      pieces_(new QLabel(this)),
      formula_(new QLabel(this)),
      timer_(new QTimer(this)) {
  setObjectName("collectiveStepper");
  examples_->setObjectName("teachingExamples");
  examples_->addItem("Examples\u2026", QString());
  for (const auto& e : TeachingExamples()) examples_->addItem(Q(e.title), Q(e.name));
  examples_->setToolTip("Collectives to explore without partitioning anything");
  examples_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  examples_->setMinimumContentsLength(10);
  // Narrow enough to share the bottom row with the inspector: the combos shrink, their lists do not.
  chip_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  chip_->setMinimumContentsLength(7);
  wrap_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  wrap_->setMinimumContentsLength(8);
  chip_->setToolTip("The simulated chip (link bandwidth, hop latency, which axes have wraparound links)");
  wrap_->addItem("Chip's wrap rule", static_cast<int>(TopologyOptions::Wraparound::kGenerationRule));
  wrap_->addItem("Wrap every axis", static_cast<int>(TopologyOptions::Wraparound::kAll));
  wrap_->addItem("No wraparound", static_cast<int>(TopologyOptions::Wraparound::kNone));
  wrap_->setToolTip("Wraparound links close each axis into a ring (a torus); without them an axis is a line");
  bidirectional_->setChecked(true);
  bidirectional_->setToolTip("Rings send both ways at once (TPU ICI links are bidirectional); off: one direction only");

  QFont title_font = title_->font();
  title_font.setBold(true);
  title_->setFont(title_font);
  title_->setWordWrap(true);
  title_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  legend_->setWordWrap(true);
  QFont small = legend_->font();
  small.setPointSizeF(std::max(7.0, small.pointSizeF() * 0.9));
  legend_->setFont(small);
  legend_->setText(QString::fromUtf8(
      "Tiles are devices. Cells: one per group member \u2014 colour: whose data; filled: how much has arrived (or been "
      "summed); outlined: the cell the device owns. Arrows: colour = replica group, dashed = half, \u2295 = added on "
      "arrival, curved = wraparound link."));
  legend_->setForegroundRole(QPalette::PlaceholderText);
  legend_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  legend_->setMinimumHeight(legend_->fontMetrics().lineSpacing() * 2 + 4);

  prev_->setText("\u25C0 Previous");
  next_->setText("Next \u25B6");
  play_->setText("Play");
  prev_->setToolTip("Previous step (Left)");
  next_->setToolTip("Next step (Right)");
  play_->setToolTip("Play the steps one after another (Space)");
  slider_->setMinimum(0);
  slider_->setPageStep(1);
  slider_->setTickPosition(QSlider::TicksBelow);
  slider_->setTickInterval(1);
  step_label_->setMinimumWidth(70);
  slider_->setMinimumWidth(40);
  caption_->setWordWrap(true);
  caption_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  caption_->setObjectName("teachingCaption");
  QFont caption_font = caption_->font();
  caption_font.setPointSizeF(caption_font.pointSizeF() * 1.05);
  caption_->setFont(caption_font);
  pieces_->setWordWrap(true);
  pieces_->setTextFormat(Qt::RichText);
  pieces_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  pieces_->setObjectName("teachingPieces");
  pieces_->hide();
  formula_->setWordWrap(true);
  formula_->setTextFormat(Qt::RichText);
  formula_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  formula_->setObjectName("teachingFormula");
  formula_->setAlignment(Qt::AlignTop | Qt::AlignLeft);

  // Layout: settings on top; the mesh on the left; the caption and the formula on the right.
  auto* settings = new QHBoxLayout;
  settings->addWidget(examples_, 4);
  settings->addWidget(chip_, 1);
  settings->addWidget(wrap_, 2);
  settings->addWidget(bidirectional_);

  auto* left = new QWidget;
  auto* lcol = new QVBoxLayout(left);
  lcol->setContentsMargins(0, 0, 0, 0);
  lcol->addWidget(title_);
  lcol->addWidget(canvas_, 1);
  lcol->addWidget(legend_);
  auto* controls = new QHBoxLayout;
  controls->addWidget(prev_);
  controls->addWidget(play_);
  controls->addWidget(next_);
  controls->addWidget(slider_, 1);
  controls->addWidget(step_label_);
  lcol->addLayout(controls);

  auto* right = new QWidget;
  auto* rcol = new QVBoxLayout(right);
  rcol->setContentsMargins(6, 0, 6, 0);
  rcol->addWidget(caption_);
  rcol->addWidget(pieces_);
  auto* cost = new QGroupBox("Cost of the whole collective");
  auto* ccol = new QVBoxLayout(cost);
  ccol->addWidget(formula_);
  rcol->addWidget(cost);
  rcol->addWidget(summary_);
  rcol->addStretch(1);
  auto* scroll = new QScrollArea;
  scroll->setWidget(right);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);

  auto* split = new QSplitter(Qt::Horizontal);
  split->addWidget(left);
  split->addWidget(scroll);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  split->setChildrenCollapsible(false);
  split->setSizes({620, 380});

  auto* col = new QVBoxLayout(this);
  col->setContentsMargins(6, 4, 6, 4);
  col->addLayout(settings);
  col->addWidget(split, 1);

  timer_->setInterval(1400);
  connect(timer_, &QTimer::timeout, this, [this] {
    if (step_ >= stepCount()) {
      pause();
      return;
    }
    setStep(step_ + 1);
    if (step_ >= stepCount()) pause();
  });
  connect(prev_, &QPushButton::clicked, this, &CollectiveStepper::previous);
  connect(next_, &QPushButton::clicked, this, &CollectiveStepper::next);
  connect(play_, &QPushButton::clicked, this, &CollectiveStepper::togglePlay);
  connect(slider_, &QSlider::valueChanged, this, [this](int v) {
    if (!updating_) setStep(v);
  });
  connect(examples_, &QComboBox::activated, this, [this](int index) {
    const QString name = examples_->itemData(index).toString();
    if (!name.isEmpty()) showExample(name);
  });
  auto settings_changed = [this] {
    if (updating_ || !plan_.request.mesh.num_devices()) return;
    replan();
  };
  connect(chip_, &QComboBox::activated, this, settings_changed);
  connect(wrap_, &QComboBox::activated, this, settings_changed);
  connect(bidirectional_, &QCheckBox::toggled, this, settings_changed);
  for (auto [key, fn] : {std::pair<QKeySequence, void (CollectiveStepper::*)()>{QKeySequence(Qt::Key_Right), &CollectiveStepper::next},
                         {QKeySequence(Qt::Key_Left), &CollectiveStepper::previous},
                         {QKeySequence(Qt::Key_Space), &CollectiveStepper::togglePlay}}) {
    auto* sc = new QShortcut(key, this);
    sc->setContext(Qt::WidgetWithChildrenShortcut);
    connect(sc, &QShortcut::activated, this, fn);
  }
  canvas_->setPlan(&plan_);
  refresh();
}

bool CollectiveStepper::setRequest(const TeachingRequest& request) {
  pause();
  request_ = request;
  updating_ = true;
  // Reflect the request's settings in the controls.
  const int chip_index = chip_->findData(Q(request.chip.empty() ? default_chip_ : request.chip));
  if (chip_index >= 0) chip_->setCurrentIndex(chip_index);
  const int wrap_index = wrap_->findData(static_cast<int>(request.wraparound));
  wrap_->setCurrentIndex(std::max(0, wrap_index));
  bidirectional_->setChecked(request.bidirectional);
  updating_ = false;
  plan_ = PlanTeaching(request_, default_chip_);
  step_ = 0;
  canvas_->setPlan(&plan_);
  refresh();
  emit planChanged();
  return plan_.ok;
}

void CollectiveStepper::clear() {
  pause();
  request_ = TeachingRequest{};
  plan_ = TeachingPlan{};
  step_ = 0;
  canvas_->setPlan(&plan_);
  refresh();
  emit planChanged();
}

void CollectiveStepper::replan() {
  TeachingRequest r = request_;
  r.chip = chip_->currentData().toString().toStdString();
  r.wraparound = static_cast<TopologyOptions::Wraparound>(wrap_->currentData().toInt());
  r.bidirectional = bidirectional_->isChecked();
  const int keep = step_;
  pause();
  request_ = r;
  plan_ = PlanTeaching(request_, default_chip_);
  canvas_->setPlan(&plan_);
  step_ = std::clamp(keep, 0, stepCount());
  canvas_->setStep(step_);
  refresh();
  emit planChanged();
}

void CollectiveStepper::setChips(const std::vector<std::string>& chips, const std::string& default_chip) {
  chip_->clear();
  for (const auto& c : chips) chip_->addItem(Q(c), Q(c));
  default_chip_ = default_chip;
  const int index = chip_->findData(Q(default_chip_));
  if (index >= 0) chip_->setCurrentIndex(index);
}

bool CollectiveStepper::showCollective(const InsertedCollective& collective,
                                       const std::vector<std::vector<int64_t>>& participants, const DeviceMesh& mesh,
                                       const Module* original, const ShardingLookup& sharding_of) {
  examples_->setCurrentIndex(0);
  return setRequest(TeachingRequestFor(collective, participants, mesh, original, sharding_of));
}

bool CollectiveStepper::showExample(const QString& name) {
  auto r = TeachingExampleRequest(name.toStdString());
  if (!r) return false;
  const int index = examples_->findData(name);
  if (index >= 0) examples_->setCurrentIndex(index);
  return setRequest(*r);
}

void CollectiveStepper::setStep(int step) {
  step = std::clamp(step, 0, stepCount());
  if (step == step_ && canvas_->step() == step) {
    syncControls();
    return;
  }
  step_ = step;
  canvas_->setStep(step_);
  refresh();
  emit stepChanged(step_);
}

void CollectiveStepper::next() { setStep(step_ + 1); }
void CollectiveStepper::previous() { setStep(step_ - 1); }

void CollectiveStepper::play() {
  if (!plan_.ok || stepCount() == 0) return;
  if (step_ >= stepCount()) setStep(0);
  timer_->start();
  syncControls();
}

void CollectiveStepper::pause() {
  timer_->stop();
  syncControls();
}

void CollectiveStepper::togglePlay() {
  if (timer_->isActive()) pause();
  else play();
}

bool CollectiveStepper::isPlaying() const { return timer_->isActive(); }
void CollectiveStepper::setPlayInterval(int ms) { timer_->setInterval(std::max(10, ms)); }

const std::vector<StepTransfer>& CollectiveStepper::currentTransfers() const {
  if (!plan_.ok || step_ <= 0 || step_ > stepCount()) return kNoTransfers;
  return plan_.walk.steps[static_cast<size_t>(step_ - 1)].transfers;
}

const std::vector<DeviceHolding>& CollectiveStepper::currentDevices() const {
  if (!plan_.ok) return kNoDevices;
  if (step_ <= 0) return plan_.walk.initial;
  return plan_.walk.steps[static_cast<size_t>(step_ - 1)].after;
}

QString CollectiveStepper::captionText() const { return caption_->text(); }
QString CollectiveStepper::piecesText() const { return pieces_->isHidden() ? QString() : pieces_->text(); }
QString CollectiveStepper::titleText() const { return title_->text(); }

QString CollectiveStepper::formulaText() const {
  if (!plan_.ok) return QString();
  QStringList lines;
  lines << Q(plan_.walk.formula.text);
  for (const auto& l : plan_.walk.formula.legend) lines << Q(l);
  if (!plan_.walk.formula.book.empty()) lines << Q(plan_.walk.formula.book);
  return lines.join("\n");
}

void CollectiveStepper::syncControls() {
  updating_ = true;
  const int n = stepCount();
  slider_->setMaximum(n);
  slider_->setValue(step_);
  slider_->setEnabled(plan_.ok && n > 0);
  prev_->setEnabled(plan_.ok && step_ > 0);
  next_->setEnabled(plan_.ok && step_ < n);
  play_->setEnabled(plan_.ok && n > 0);
  play_->setText(timer_->isActive() ? "Pause" : (step_ >= n && n > 0 ? "Replay" : "Play"));
  step_label_->setText(plan_.ok ? (step_ == 0 ? QString("Start / %1").arg(n) : QString("Step %1 / %2").arg(step_).arg(n)) : QString());
  updating_ = false;
}

void CollectiveStepper::refresh() {
  syncControls();
  if (!plan_.ok) {
    title_->setText(request_.title.empty() ? QString("Teaching: step through a collective") : Q(request_.title));
    summary_->clear();
    caption_->setText(plan_.message.empty()
                          ? QString("Pick an example above, or double-click a collective in the partitioned program's "
                                    "Collectives list to step through it here.")
                          : QString::fromUtf8("\u26A0 Cannot step through this collective: ") + Q(plan_.message));
    formula_->clear();
    pieces_->clear();
    pieces_->hide();
    canvas_->update();
    return;
  }
  title_->setText(Q(plan_.title));
  title_->setToolTip(Q(plan_.topology));
  summary_->setText(Q(plan_.walk.summary) + "\n" + QString("Slice: %1 (%2).").arg(Q(plan_.topology), Q(plan_.request.chip)));
  if (step_ == 0) {
    QString start;
    if (plan_.walk.kind == CollectiveKind::kAllGather) start = "Start: every device holds only its own shard (one filled cell).";
    else if (plan_.walk.kind == CollectiveKind::kReduceScatter) start = "Start: every device holds its own unreduced buffer: every cell is one contribution of N.";
    else if (plan_.walk.kind == CollectiveKind::kAllReduce) start = "Start: every device holds its own unreduced buffer: every cell is one contribution of N.";
    else if (plan_.walk.kind == CollectiveKind::kAllToAll) start = "Start: every device's buffer is N pieces, all its own (one colour); piece j is for member j.";
    else start = "Start: every device holds its own block.";
    caption_->setText(start + QString(" Press Next (or \u2192) to see step 1 of %1.").arg(stepCount()));
  } else {
    caption_->setText(Q(plan_.walk.steps[static_cast<size_t>(step_ - 1)].caption));
  }
  // A named all-to-all: who sends which piece to whom (this step's pieces in bold).
  const std::vector<std::string> lines = TeachingPieceLines(plan_, step_);
  if (lines.empty()) {
    pieces_->clear();
    pieces_->hide();
  } else {
    QString html = "<p>" + Q(plan_.request.pieces_summary).toHtmlEscaped() +
                   (step_ > 0 ? QString(" \u25B6: arrives in this step.") : QString()) + "</p><p>";
    const size_t shown = std::min<size_t>(lines.size(), 24);
    for (size_t i = 0; i < shown; ++i) {
      const QString l = Q(lines[i]).toHtmlEscaped();
      html += (lines[i].rfind("\u25B6 ", 0) == 0 ? "<b>" + l + "</b>" : l) + "<br>";
    }
    if (lines.size() > shown) html += QString("\u2026 and %1 more").arg(lines.size() - shown);
    pieces_->setText(html + "</p>");
    pieces_->show();
  }
  // The formula: the filled-in line, what each symbol is, and the book's closed form.
  QString html = "<p style='font-size:large'><b>" + Q(plan_.walk.formula.text).toHtmlEscaped() + "</b></p><ul style='margin-left:-20px'>";
  for (const auto& l : plan_.walk.formula.legend) html += "<li>" + Q(l).toHtmlEscaped() + "</li>";
  html += "</ul>";
  if (!plan_.walk.formula.book.empty()) html += "<p><i>" + Q(plan_.walk.formula.book).toHtmlEscaped() + "</i></p>";
  formula_->setText(html);
  canvas_->update();
}

// ---- Planning ----------------------------------------------------------------------------------------

TeachingPlan PlanTeaching(const TeachingRequest& request, const std::string& default_chip) {
  TeachingPlan plan;
  plan.request = request;
  plan.title = request.title;
  if (plan.request.chip.empty()) plan.request.chip = default_chip;
  if (plan.request.chip.empty()) {
    plan.message = "no chip chosen";
    return plan;
  }
  auto chip = ResolveChip(plan.request.chip);
  if (!chip.ok()) {
    plan.message = chip.error().message;
    return plan;
  }
  if (request.mesh.num_devices() < 1) {
    plan.message = "the mesh has no devices";
    return plan;
  }
  TopologyOptions topology_options;
  topology_options.wraparound = request.wraparound;
  auto topology = Topology::ForMesh(chip.value(), request.mesh, {}, topology_options);
  if (!topology.ok()) {
    plan.message = "cannot place mesh " + request.mesh.ToString() + " on " + plan.request.chip + ": " + topology.error().message;
    return plan;
  }
  plan.topology = topology->Describe();
  WalkthroughOptions options;
  options.mesh = request.mesh;
  options.collective.bidirectional = request.bidirectional;
  options.piece_names = request.piece_names;
  options.pipeline_shift = request.pipeline_shift;
  auto walk = request.kind == CollectiveKind::kCollectivePermute
                  ? WalkThroughCollectivePermute(topology.value(), request.pairs, request.operand_bytes, options)
                  : WalkThroughCollective(topology.value(), request.kind, request.groups, request.operand_bytes, options);
  if (!walk.ok()) {
    plan.message = walk.error().message;
    return plan;
  }
  plan.walk = std::move(walk).value();
  plan.ok = true;
  if (plan.title.empty()) plan.title = std::string(CollectiveKindName(request.kind)) + " on " + request.mesh.ToString();
  return plan;
}

TeachingRequest TeachingRequestFor(const InsertedCollective& collective, const std::vector<std::vector<int64_t>>& participants,
                                   const DeviceMesh& mesh, const Module* original, const ShardingLookup& sharding_of) {
  TeachingRequest r;
  auto kind = CollectiveKindFromName(OpcodeName(collective.kind));
  r.kind = kind.ok() ? kind.value() : CollectiveKind::kAllGather;
  r.mesh = mesh;
  if (r.kind == CollectiveKind::kCollectivePermute) {
    for (const auto& p : participants) {
      if (p.size() == 2) r.pairs.emplace_back(p[0], p[1]);
    }
  } else {
    r.groups = participants;
  }
  r.operand_bytes = static_cast<double>(collective.bytes_per_device);
  r.title = collective.instruction + (collective.origin.empty() ? "" : " for " + collective.origin) +
            (collective.reason.empty() ? "" : ": " + collective.reason);
  if (r.kind == CollectiveKind::kAllToAll && original && sharding_of) {
    auto pieces = DescribeAllToAllPieces(collective, *original, sharding_of);
    const bool fits = pieces.ok() && !participants.empty() &&
                      static_cast<int64_t>(participants.front().size()) == pieces->members;
    if (fits) {
      r.piece_names = pieces->pieces;
      r.pieces_summary = pieces->summary;
      if (!pieces->role.empty()) r.title = collective.instruction + ": MoE " + pieces->role + " of " + pieces->tensor;
    }
  }
  return r;
}

std::vector<std::string> TeachingPieceLines(const TeachingPlan& plan, int step) {
  std::vector<std::string> lines;
  const auto& names = plan.request.piece_names;
  if (!plan.ok || plan.walk.kind != CollectiveKind::kAllToAll || names.empty() || plan.walk.groups.empty()) return lines;
  const auto& group = plan.walk.groups.front();
  if (names.size() != group.size()) return lines;
  // The pieces (origin -> final destination) arriving in this step.
  std::set<std::pair<int64_t, int64_t>> moving;
  if (step > 0 && step <= static_cast<int>(plan.walk.steps.size())) {
    for (const auto& t : plan.walk.steps[static_cast<size_t>(step - 1)].transfers) {
      if (t.group != 0 || t.chunks.empty() || t.dst_device != t.final_dst_device) continue;
      moving.emplace(group[static_cast<size_t>(t.chunks.front())], t.final_dst_device);
    }
  }
  std::vector<std::string> now, rest;
  for (size_t i = 0; i < group.size(); ++i) {
    for (size_t j = 0; j < group.size(); ++j) {
      if (i == j || names[i].size() != group.size()) continue;
      const std::string line = "device " + std::to_string(group[i]) + " \u2192 device " + std::to_string(group[j]) + ": " + names[i][j];
      if (moving.count({group[i], group[j]})) now.push_back("\u25B6 " + line);
      else rest.push_back(line);
    }
  }
  lines = std::move(now);
  lines.insert(lines.end(), rest.begin(), rest.end());
  return lines;
}

namespace {

struct ExampleSpec {
  const char* name;
  const char* title;
  CollectiveKind kind;
  const char* mesh;
  std::vector<std::string> axes;  // replica groups over these mesh axes; permute: the shift axis
  double bytes;
  const char* chip;  // "" = the default chip
  TopologyOptions::Wraparound wraparound;
};

const std::vector<ExampleSpec>& ExampleSpecs() {
  using W = TopologyOptions::Wraparound;
  static const std::vector<ExampleSpec> specs = {
      {"all-gather-ring", "All-gather over X \u2014 rings of 4 with wraparound (4\u00D74 torus)", CollectiveKind::kAllGather,
       "X=4,Y=4", {"X"}, 8388608, "", W::kAll},
      {"all-gather-line", "All-gather over Y \u2014 lines of 4 without wraparound (book case C1: TPU v5e, 8\u00D74)",
       CollectiveKind::kAllGather, "X=8,Y=4", {"Y"}, 8388608, "tpu-v5e", W::kGenerationRule},
      {"reduce-scatter", "Reduce-scatter over Y \u2014 partial sums flow to their owners (4\u00D74 torus)",
       CollectiveKind::kReduceScatter, "X=4,Y=4", {"Y"}, 4 * 8388608.0, "", W::kAll},
      {"all-reduce", "All-reduce over X \u2014 reduce-scatter, then all-gather (4\u00D74 torus)", CollectiveKind::kAllReduce,
       "X=4,Y=4", {"X"}, 4 * 8388608.0, "", W::kAll},
      {"all-reduce-xy", "All-reduce over X and Y \u2014 both axes at once (4\u00D74 torus)", CollectiveKind::kAllReduce,
       "X=4,Y=4", {"X", "Y"}, 16 * 1048576.0, "", W::kAll},
      {"all-to-all", "All-to-all over X \u2014 every device sends a piece to every other (4\u00D74 torus)",
       CollectiveKind::kAllToAll, "X=4,Y=4", {"X"}, 4 * 2097152.0, "", W::kAll},
      {"halo-exchange", "Halo exchange along Y \u2014 collective-permute by +1, no wraparound (4\u00D74 mesh)",
       CollectiveKind::kCollectivePermute, "X=4,Y=4", {"Y"}, 65536, "", W::kNone},
  };
  return specs;
}

}  // namespace

std::vector<TeachingExample> TeachingExamples() {
  std::vector<TeachingExample> out;
  for (const auto& s : ExampleSpecs()) out.push_back({s.name, s.title});
  return out;
}

std::optional<TeachingRequest> TeachingExampleRequest(const std::string& name) {
  for (const auto& s : ExampleSpecs()) {
    if (name != s.name) continue;
    auto mesh = DeviceMesh::Parse(s.mesh);
    if (!mesh.ok()) return std::nullopt;
    TeachingRequest r;
    r.title = s.title;
    r.kind = s.kind;
    r.mesh = mesh.value();
    r.operand_bytes = s.bytes;
    r.chip = s.chip;
    r.wraparound = s.wraparound;
    if (r.kind == CollectiveKind::kCollectivePermute) {
      auto pairs = ShiftPairsAlongAxis(r.mesh, s.axes.front(), +1, /*cyclic=*/false);
      if (!pairs.ok()) return std::nullopt;
      r.pairs = pairs.value();
    } else {
      auto groups = ReplicaGroupsForAxes(r.mesh, s.axes);
      if (!groups.ok()) return std::nullopt;
      r.groups = groups.value();
    }
    return r;
  }
  return std::nullopt;
}

}  // namespace shardscope::views
