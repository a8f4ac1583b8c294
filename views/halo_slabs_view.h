// The halo of a spatially partitioned convolution as one device sees it: for every split windowed
// dim a bar along the dim with the device's own slab of input rows in the middle and, on each
// side, the slab each neighbour sends, labelled with its width and the sending device ("2 rows
// from device 1"); nothing at an edge of the array (the padding). Drawn from ConvHaloForDevice
// (partitioner/spmd/conv_halo_slabs.h): no arithmetic here. A filter-gradient conv (its kernel's
// spatial dim split, partial sums all-reduced) is drawn alike, its caption naming the kernel taps
// the device's tile holds. The captions are broken into lines that fit the widget's width (the
// widget's height follows: height for width), so a narrow dock shows them whole.
#pragma once

#include <optional>

#include <QWidget>

#include "partitioner/spmd/conv_halo_slabs.h"

namespace shardscope::views {

// The caption over a dim's bar: the tile, the shard and the window ("window 3"), or for a
// filter gradient the kernel taps this tile holds ("kernel split: taps 32–63 of 128").
QString DimCaption(const ConvHalo& halo, const HaloDim& dim);

class HaloSlabsWidget : public QWidget {
  Q_OBJECT
 public:
  explicit HaloSlabsWidget(QWidget* parent = nullptr);
  void setHalo(std::optional<ConvHalo> halo);
  const std::optional<ConvHalo>& halo() const { return halo_; }
  // Every label drawn, left to right per dim ("2 rows from device 1", "rows 8–15: device 2's own").
  QStringList slabLabels() const;
  // The caption over the bar of dim `index` of the halo, as painted at the widget's width: its
  // words in lines that each fit (a single word wider than the widget gets a line of its own).
  QStringList captionLines(size_t index) const;
  // The font the captions are painted in.
  QFont captionFont() const;

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;
  bool hasHeightForWidth() const override { return true; }
  int heightForWidth(int width) const override;

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  std::optional<ConvHalo> halo_;
};

}  // namespace shardscope::views
