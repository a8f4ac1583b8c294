#include "views/mesh_grid.h"

#include <algorithm>

#include <QPainter>
#include <QStringList>

namespace shardscope::views {


MeshGrid MeshGrid::Shape(const DeviceMesh& mesh, int max_cols_1d) {
  MeshGrid g;
  const int64_t n = std::max<int64_t>(1, mesh.num_devices());
  const int64_t k = mesh.num_axes();
  if (k <= 1) {
    g.cols = static_cast<int>(std::min<int64_t>(n, std::max(1, max_cols_1d)));
    g.rows = static_cast<int>((n + g.cols - 1) / g.cols);
  } else {
    g.rows = static_cast<int>(mesh.axis_size(k - 2));
    g.cols = static_cast<int>(mesh.axis_size(k - 1));
    g.slices = static_cast<int>(n / std::max(1, g.rows * g.cols));
  }
  return g;
}

QRectF MeshGrid::TileRect(size_t index) const {
  const int per_slice = std::max(1, rows * cols);
  const int slice = static_cast<int>(index) / per_slice;
  const int within = static_cast<int>(index) % per_slice;
  const int r = within / cols, c = within % cols;
  const int sr = slice / slice_cols, sc = slice % slice_cols;
  const double slice_w = cols * (tile + gap);
  const double slice_h = label_h + rows * (tile + gap);
  const double x0 = left + sc * (slice_w + slice_gap);
  const double y0 = top + sr * (slice_h + slice_gap) + label_h;
  return QRectF(x0 + c * (tile + gap), y0 + r * (tile + gap), tile, tile);
}

int MeshGrid::TileAt(const QPointF& p, size_t count) const {
  for (size_t i = 0; i < count; ++i)
    if (TileRect(i).contains(p)) return static_cast<int>(i);
  return -1;
}

double MeshGrid::Height() const {
  const int slice_rows = (slices + slice_cols - 1) / slice_cols;
  return slice_rows * (label_h + rows * (tile + gap) + slice_gap);
}

void MeshGrid::PaintCaptions(QPainter& p, const DeviceMesh& mesh, double width, const QFont& small, const QFont& bold,
                             const QColor& text) const {
  const int64_t k = mesh.num_axes();
  auto caption = [](const MeshAxis& a) {
    return QString("%1 (%2) \u2192").arg(QString::fromStdString(a.name)).arg(a.size);
  };
  p.setPen(text);
  p.setFont(small);
  if (k >= 1) {
    p.drawText(QRectF(left, top - 20, width - left, 18), Qt::AlignLeft | Qt::AlignVCenter,
               caption(mesh.axes()[static_cast<size_t>(k - 1)]));
  }
  if (k >= 2) {
    p.save();
    p.translate(left - 18, top + label_h);
    p.rotate(90);
    p.drawText(QRectF(0, -12, 200, 16), Qt::AlignLeft | Qt::AlignVCenter, caption(mesh.axes()[static_cast<size_t>(k - 2)]));
    p.restore();
  }
  if (slices <= 1 || k < 3) return;
  p.setFont(bold);
  const int64_t per_slice = static_cast<int64_t>(rows) * cols;
  for (int s = 0; s < slices; ++s) {
    // Mesh order is row-major over the axes: slice s is the leading axes' coordinates of s.
    std::vector<int64_t> lead(static_cast<size_t>(k - 2));
    int64_t rest = s;
    for (int64_t a = k - 3; a >= 0; --a) {
      const int64_t n = mesh.axis_size(a);
      lead[static_cast<size_t>(a)] = rest % n;
      rest /= n;
    }
    QStringList parts;
    for (int64_t a = 0; a + 2 < k; ++a)
      parts << QString("%1=%2").arg(QString::fromStdString(mesh.axes()[static_cast<size_t>(a)].name)).arg(lead[static_cast<size_t>(a)]);
    const QRectF r = TileRect(static_cast<size_t>(s * per_slice));
    p.drawText(QRectF(r.left(), r.top() - label_h, 300, label_h), Qt::AlignLeft | Qt::AlignVCenter, parts.join(", "));
  }
}

double MeshGrid::Width() const { return slice_cols * cols * (tile + gap) + (slice_cols - 1) * slice_gap; }

}  // namespace shardscope::views
