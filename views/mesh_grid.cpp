#include "views/mesh_grid.h"

#include <algorithm>

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

double MeshGrid::Width() const { return slice_cols * cols * (tile + gap) + (slice_cols - 1) * slice_gap; }

}  // namespace shardscope::views
