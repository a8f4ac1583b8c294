// How a device mesh is laid out on a 2-D canvas, shared by the mesh view's device grid and the
// teaching panel: the last axis runs across, the one before it down, every further leading axis
// makes a slice (slices are placed side by side, `slice_cols` per row); a 1-D mesh wraps into rows.
// Devices are indexed in mesh order (row-major over the axes).
#pragma once

#include <cstddef>

#include <QColor>
#include <QFont>
#include <QPointF>
#include <QRectF>

#include "core/sharding/mesh.h"

class QPainter;

namespace shardscope::views {

struct MeshGrid {
  int slices = 1, rows = 1, cols = 1, slice_cols = 1;
  double tile = 60, gap = 4, slice_gap = 18, label_h = 16;  // label_h: the caption above each slice
  double left = 30, top = 22;                                // where the first slice starts

  // rows, cols and slices for `mesh` (a 1-D mesh wraps after `max_cols_1d`); the sizes keep their
  // defaults for the caller to fit.
  static MeshGrid Shape(const DeviceMesh& mesh, int max_cols_1d);

  // The rectangle of the tile at `index` (mesh order).
  QRectF TileRect(size_t index) const;
  // The index of the tile under `p` among the first `count`, or -1.
  int TileAt(const QPointF& p, size_t count) const;
  // Height of the whole grid from `top` (slices stacked in rows of slice_cols).
  double Height() const;
  // Width of the whole grid from `left`.
  double Width() const;

  // The captions: the last axis across the top, the one before it down the left side, and above
  // each slice of a 3-D (or larger) mesh its leading coordinates ("X=1"). `width`: the canvas width.
  void PaintCaptions(QPainter& p, const DeviceMesh& mesh, double width, const QFont& small, const QFont& bold,
                     const QColor& text) const;
};

}  // namespace shardscope::views
