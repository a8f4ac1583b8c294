// Helpers for tests that run SPMD programs on virtual devices and compare their outputs.
#pragma once

#include <QtGlobal>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/eval/numeric_verify.h"
#include "core/eval/virtual_cluster.h"

namespace shardscope::testing {

// Runs `m` on `devices` virtual devices, device d with its own random arguments (seed `seed + d`).
// Empty (with a warning) when the run fails.
inline std::vector<Tensor> RunOnVirtualDevices(const Module& m, int64_t devices, uint64_t seed) {
  std::vector<std::vector<Tensor>> args;
  for (int64_t d = 0; d < devices; ++d) args.push_back(MakeRandomArguments(*m.entry(), seed + static_cast<uint64_t>(d)));
  auto r = RunSpmd(m, devices, args);
  if (!r.ok()) qWarning("%s", r.error().message.c_str());
  return r.ok() ? std::move(r).value() : std::vector<Tensor>{};
}

// The largest difference between two runs' outputs (per device, tuple elements compared one by
// one), relative to the values (at least 1); infinity when their shapes differ or a run is empty.
inline double MaxRelativeDifference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size() || a.empty()) return INFINITY;
  double worst = 0;
  for (size_t d = 0; d < a.size(); ++d) {
    const std::vector<Tensor> xs = a[d].IsTuple() ? a[d].elements() : std::vector<Tensor>{a[d]};
    const std::vector<Tensor> ys = b[d].IsTuple() ? b[d].elements() : std::vector<Tensor>{b[d]};
    if (xs.size() != ys.size()) return INFINITY;
    for (size_t e = 0; e < xs.size(); ++e) {
      if (xs[e].size() != ys[e].size()) return INFINITY;
      for (int64_t i = 0; i < xs[e].size(); ++i) {
        const double p = xs[e].GetDouble(i), q = ys[e].GetDouble(i);
        worst = std::max(worst, std::abs(p - q) / std::max({1.0, std::abs(p), std::abs(q)}));
      }
    }
  }
  return worst;
}

}  // namespace shardscope::testing
