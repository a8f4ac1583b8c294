// How shardings look: a stable colour per distinct sharding (palette-aware, so dark mode works),
// the named-axis text a person reads, per-device shapes and byte counts.
#pragma once

#include <cstdint>
#include <optional>

#include <QColor>
#include <QPalette>
#include <QString>

#include "core/sharding/mesh.h"
#include "core/base/shape.h"
#include "core/sharding/sharding.h"

namespace shardscope::views {

bool IsDarkPalette(const QPalette& palette);

// Fill colour of a tensor with this sharding: the same sharding text always gives the same hue;
// replicated tensors are neutral grey; lightness follows the palette (light or dark).
QColor ShardingFillColor(const HloSharding& sharding, const QPalette& palette);
// Fill of a tensor with no sharding at all (yet).
QColor UnshardedFillColor(const QPalette& palette);
// Text colour readable on `fill`.
QColor TextColorOn(const QColor& fill);
// Colour of the i-th of `count` distinct shards in the mesh view (evenly spread hues).
QColor ShardTileColor(int index, int count, const QPalette& palette);

// "A[I_X, J_Y]"-style text over `mesh`; falls back to the HLO sharding text when the sharding
// cannot be expressed over the mesh (or is not an array sharding).
QString NamedAxesText(const HloSharding& sharding, const Shape& shape, const DeviceMesh& mesh,
                      const QString& tensor_name = "A");
// HLO text of a sharding: "{devices=[4,1,4]<=[16]}".
QString HloShardingText(const HloSharding& sharding);
// The per-device (padded) shape, e.g. "f32[2,1024,2048]". Tuples: "(f32[2], s32[])".
QString LocalShapeText(const Shape& shape, const std::optional<HloSharding>& sharding);
// Bytes one device holds (padded shard). Unsharded: the whole tensor.
int64_t BytesPerDevice(const Shape& shape, const std::optional<HloSharding>& sharding);
// Short shape text without layout: "f32[8,1024]".
QString ShapeText(const Shape& shape);

}  // namespace shardscope::views
