#include "views/halo_slabs_view.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <QPainter>

#include "views/narrow_layout.h"
#include "views/sharding_style.h"

namespace shardscope::views {
namespace {

constexpr double kCaption = 18, kBar = 40, kAxis = 16, kGapAfter = 8;
constexpr double kLeft = 4, kRightMargin = 4;

// The width the captions and bars are drawn in.
double Avail(int width) { return std::max(120.0, width - kLeft - kRightMargin); }

// The height of a caption of `lines` lines (one line: as before the captions wrapped).
double CaptionHeight(int lines, const QFontMetrics& fm) { return std::max(kCaption, lines * fm.lineSpacing() + 4.0); }

QString SlabLabel(const HaloSlab& s) {
  if (s.hop == 0) {
    return QString("rows %1\u2013%2: device %3's own").arg(s.begin).arg(s.end - 1).arg(s.from_device);
  }
  return QString("%1 row%2 from device %3").arg(s.width()).arg(s.width() == 1 ? "" : "s").arg(s.from_device);
}

}  // namespace

QString DimCaption(const ConvHalo& h, const HaloDim& d) {
  const QString head = QString("dim %1 of %2: tile %3 of %4, %5 rows each; ")
                           .arg(d.input_dim).arg(QString::fromStdString(h.input)).arg(d.tile).arg(d.tiles).arg(d.shard);
  if (d.split == HaloSplit::kKernel) {
    // The filter gradient: the window is the kernel operand, split alike; this tile's taps (the
    // kernel's name is in the dock's text above: it is long).
    return head + QString("kernel split: taps %1\u2013%2 of %3").arg(d.kernel_begin).arg(d.kernel_end - 1).arg(d.window);
  }
  return head + QString("window %1").arg(d.window);
}

HaloSlabsWidget::HaloSlabsWidget(QWidget* parent) : QWidget(parent) {
  setObjectName("haloSlabs");
  QSizePolicy sp(QSizePolicy::Expanding, QSizePolicy::Preferred);
  sp.setHeightForWidth(true);
  setSizePolicy(sp);
}

QFont HaloSlabsWidget::captionFont() const {
  QFont f = font();
  f.setPointSizeF(std::max(6.5, font().pointSizeF() * 0.85));
  f.setBold(true);
  return f;
}

QStringList HaloSlabsWidget::captionLines(size_t index) const {
  if (!halo_ || index >= halo_->dims.size()) return {};
  return WrapToWidth(DimCaption(*halo_, halo_->dims[index]), QFontMetrics(captionFont()),
                     static_cast<int>(Avail(width())));
}

int HaloSlabsWidget::heightForWidth(int width) const {
  if (!halo_) return 0;
  const QFontMetrics fm(captionFont());
  double h = 0;
  for (const HaloDim& d : halo_->dims) {
    const auto lines = WrapToWidth(DimCaption(*halo_, d), fm, static_cast<int>(Avail(width))).size();
    h += CaptionHeight(static_cast<int>(lines), fm) + kBar + kAxis + kGapAfter;
  }
  return static_cast<int>(std::ceil(h));
}

void HaloSlabsWidget::setHalo(std::optional<ConvHalo> halo) {
  halo_ = std::move(halo);
  updateGeometry();
  update();
}

QStringList HaloSlabsWidget::slabLabels() const {
  QStringList out;
  if (!halo_) return out;
  for (const HaloDim& d : halo_->dims)
    for (const HaloSlab& s : d.slabs) out << SlabLabel(s);
  return out;
}

QSize HaloSlabsWidget::sizeHint() const { return QSize(320, heightForWidth(320)); }

QSize HaloSlabsWidget::minimumSizeHint() const { return QSize(200, heightForWidth(std::max(200, width()))); }

void HaloSlabsWidget::paintEvent(QPaintEvent*) {
  if (!halo_) return;
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  const QPalette pal = palette();
  QFont small = font();
  small.setPointSizeF(std::max(6.5, font().pointSizeF() * 0.85));
  const QFont bold = captionFont();
  const QFontMetricsF fm(small);
  const QFontMetrics cfm(bold);
  double y = 0;
  const double left = kLeft, avail = Avail(width());
  for (size_t k = 0; k < halo_->dims.size(); ++k) {
    const HaloDim& d = halo_->dims[k];
    p.setFont(bold);
    p.setPen(pal.color(QPalette::WindowText));
    // The caption's lines, centred as a block in its height.
    const QStringList lines = captionLines(k);
    const double caption_h = CaptionHeight(static_cast<int>(lines.size()), cfm);
    p.drawText(QRectF(left, y, avail, caption_h), Qt::AlignLeft | Qt::AlignVCenter, lines.join('\n'));
    y += caption_h;
    // Widths: halo slabs proportional to their rows but wide enough for their label; the own
    // slab takes the rest.
    std::vector<double> w(d.slabs.size(), 0);
    double halos = 0;
    for (size_t i = 0; i < d.slabs.size(); ++i) {
      if (d.slabs[i].hop == 0) continue;
      const double prop = avail * static_cast<double>(d.slabs[i].width()) / std::max<int64_t>(1, d.shard + d.left + d.right);
      w[i] = std::max(prop, std::min(avail * 0.3, fm.horizontalAdvance(SlabLabel(d.slabs[i])) * 0.7 + 10));
      halos += w[i];
    }
    for (size_t i = 0; i < d.slabs.size(); ++i)
      if (d.slabs[i].hop == 0) w[i] = std::max(avail * 0.3, avail - halos);
    const double total = std::accumulate(w.begin(), w.end(), 0.0);
    const double scale = total > avail ? avail / total : 1.0;
    double x = left;
    for (size_t i = 0; i < d.slabs.size(); ++i) {
      const HaloSlab& s = d.slabs[i];
      const QRectF r(x, y, w[i] * scale, kBar);
      const int64_t tile = d.tile + s.hop;
      QColor fill = ShardTileColor(static_cast<int>(tile), static_cast<int>(d.tiles), pal);
      p.setPen(QPen(pal.color(QPalette::Mid), 1));
      p.setBrush(fill);
      p.drawRect(r);
      if (s.hop != 0) {  // received: hatched
        p.setBrush(QBrush(TextColorOn(fill), Qt::BDiagPattern));
        p.drawRect(r);
      } else {
        p.setPen(QPen(pal.color(QPalette::WindowText), 2));
        p.setBrush(Qt::NoBrush);
        p.drawRect(r.adjusted(1, 1, -1, -1));
      }
      // The label on a plate so the hatching does not hide it; two lines when narrow.
      p.setFont(small);
      QString text = SlabLabel(s);
      if (fm.horizontalAdvance(text) > r.width() - 6) text.replace(QString(" from "), QString("\nfrom ")).replace(QString(": "), QString(":\n"));
      QRectF box = fm.boundingRect(r.adjusted(3, 2, -3, -2), Qt::AlignCenter | Qt::TextWordWrap, text).adjusted(-2, 0, 2, 0);
      box = box.intersected(r.adjusted(1, 1, -1, -1));
      QColor plate = fill;
      plate.setAlpha(225);
      p.setPen(Qt::NoPen);
      p.setBrush(plate);
      p.drawRoundedRect(box, 2, 2);
      p.setPen(TextColorOn(fill));
      p.drawText(r.adjusted(2, 1, -2, -1), Qt::AlignCenter | Qt::TextWordWrap, text);
      // Row numbers under the slab's edges.
      p.setPen(pal.color(QPalette::PlaceholderText));
      p.drawText(QRectF(r.left(), r.bottom(), r.width(), kAxis), Qt::AlignLeft | Qt::AlignTop, QString::number(s.begin));
      if (i + 1 == d.slabs.size())
        p.drawText(QRectF(r.left(), r.bottom(), r.width(), kAxis), Qt::AlignRight | Qt::AlignTop, QString::number(s.end));
      x += r.width();
    }
    y += kBar + kAxis + kGapAfter;
  }
}

}  // namespace shardscope::views
