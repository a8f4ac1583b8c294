// Downsampling of time series for charts (heaptrack's rule): a few hundred points per series, and
// every interval keeps its maximum, so peaks never vanish however long the run.
#pragma once

#include <cstddef>
#include <vector>

namespace shardscope::views {

struct SeriesPoint {
  double t = 0;
  double v = 0;
  bool operator==(const SeriesPoint&) const = default;
};

// `points` in time order. Returns at most about `buckets` + 2 points: the first and last points
// and, for each of `buckets` equal time intervals, the point with the largest value in it (in time
// order). Returns `points` unchanged when it is already small enough.
std::vector<SeriesPoint> DownsampleKeepingMaxima(const std::vector<SeriesPoint>& points, size_t buckets);

}  // namespace shardscope::views
