#include "views/downsample.h"

#include <algorithm>

namespace shardscope::views {

std::vector<SeriesPoint> DownsampleKeepingMaxima(const std::vector<SeriesPoint>& points, size_t buckets) {
  if (buckets == 0 || points.size() <= buckets + 2) return points;
  const double t0 = points.front().t, t1 = points.back().t;
  std::vector<SeriesPoint> out;
  out.reserve(buckets + 2);
  out.push_back(points.front());
  if (t1 <= t0) {  // all at one instant: keep the maximum
    out.push_back(*std::max_element(points.begin(), points.end(),
                                    [](const SeriesPoint& a, const SeriesPoint& b) { return a.v < b.v; }));
    out.push_back(points.back());
    return out;
  }
  const double width = (t1 - t0) / static_cast<double>(buckets);
  size_t i = 1;
  const size_t last = points.size() - 1;
  for (size_t b = 0; b < buckets && i < last; ++b) {
    const double end = b + 1 == buckets ? t1 : t0 + width * static_cast<double>(b + 1);
    const SeriesPoint* best = nullptr;
    for (; i < last && (points[i].t < end || b + 1 == buckets); ++i) {
      if (!best || points[i].v > best->v) best = &points[i];
    }
    if (best) out.push_back(*best);
  }
  out.push_back(points.back());
  return out;
}

}  // namespace shardscope::views
