#include "views/sharding_style.h"

#include <cmath>
#include <string>

namespace shardscope::views {


namespace {

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

bool IsDarkPalette(const QPalette& palette) { return palette.color(QPalette::Window).lightness() < 128; }

QColor ShardingFillColor(const HloSharding& sharding, const QPalette& palette) {
  const bool dark = IsDarkPalette(palette);
  if (sharding.IsReplicated()) return dark ? QColor(88, 92, 100) : QColor(214, 217, 222);
  if (sharding.IsManual()) return dark ? QColor(110, 80, 50) : QColor(240, 214, 180);
  // A hash of the canonical text: the same sharding gets the same hue in every session. Hues are
  // quantised to 24 steps of 15 degrees so neighbouring colours stay distinguishable.
  const uint64_t h = Fnv1a(sharding.ToString());
  const int hue = static_cast<int>((h >> 11) % 24) * 15;
  return dark ? QColor::fromHsl(hue, 120, 78) : QColor::fromHsl(hue, 170, 196);
}

QColor UnshardedFillColor(const QPalette& palette) {
  return IsDarkPalette(palette) ? QColor(52, 55, 60) : QColor(248, 248, 248);
}

QColor TextColorOn(const QColor& fill) { return fill.lightness() < 128 ? QColor(240, 240, 240) : QColor(20, 20, 20); }

QColor ShardTileColor(int index, int count, const QPalette& palette) {
  if (count <= 1) return IsDarkPalette(palette) ? QColor(70, 110, 150) : QColor(160, 200, 235);
  const int hue = static_cast<int>((index * 360.0) / count + 200) % 360;
  return IsDarkPalette(palette) ? QColor::fromHsl(hue, 110, 85) : QColor::fromHsl(hue, 160, 190);
}

QString HloShardingText(const HloSharding& sharding) { return QString::fromStdString(sharding.ToString()); }

QString NamedAxesText(const HloSharding& sharding, const Shape& shape, const DeviceMesh& mesh,
                      const QString& tensor_name) {
  if (!shape.IsArray() || sharding.IsTuple()) return HloShardingText(sharding);
  auto named = ToNamedAxes(sharding, shape.rank(), mesh, tensor_name.toStdString());
  if (!named.ok()) return HloShardingText(sharding);
  return QString::fromStdString(*named);
}

QString ShapeText(const Shape& shape) { return QString::fromStdString(shape.ToString(/*print_layout=*/false)); }

namespace {

Shape LocalShape(const Shape& shape, const HloSharding& sharding) {
  if (shape.IsTuple()) {
    std::vector<Shape> leaves;
    for (size_t i = 0; i < shape.tuple.size(); ++i) {
      leaves.push_back(LocalShape(shape.tuple[i], sharding.GetSubSharding(shape, {static_cast<int64_t>(i)})));
    }
    return Shape::Tuple(std::move(leaves));
  }
  if (!shape.IsArray() || sharding.IsTuple()) return shape;
  if (sharding.IsMaximal() || sharding.IsManual() || sharding.IsUnknown()) return shape;
  Shape local = shape;
  local.dims = sharding.ShardShape(shape.dims);
  return local;
}

}  // namespace

QString LocalShapeText(const Shape& shape, const std::optional<HloSharding>& sharding) {
  if (!sharding) return ShapeText(shape);
  return ShapeText(LocalShape(shape, *sharding));
}

int64_t BytesPerDevice(const Shape& shape, const std::optional<HloSharding>& sharding) {
  if (!sharding) return shape.ByteSize();
  if (shape.IsTuple()) {
    int64_t total = 0;
    for (size_t i = 0; i < shape.tuple.size(); ++i) {
      total += BytesPerDevice(shape.tuple[i], sharding->GetSubSharding(shape, {static_cast<int64_t>(i)}));
    }
    return total;
  }
  if (!shape.IsArray()) return 0;
  return sharding->BytesPerDevice(shape);
}


}  // namespace shardscope::views
