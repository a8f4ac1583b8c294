// Helpers for tests that run SPMD programs on virtual devices and compare their outputs.
#pragma once

#include <QtGlobal>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/eval/numeric_verify.h"
#include "core/eval/virtual_cluster.h"
#include "core/ir/hlo_text.h"
#include "partitioner/spmd/spmd_partitioner.h"

namespace shardscope::testing {

// Every instruction of `m` (all computations) with opcode `op`, in order.
inline std::vector<const Instruction*> Find(const Module& m, Opcode op) {
  std::vector<const Instruction*> out;
  for (const auto& c : m.computations())
    for (const auto& i : c->instructions())
      if (i->opcode() == op) out.push_back(i.get());
  return out;
}

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

// How PartitionAndVerify partitions and checks: the partitioner's options (num_partitions is set
// from `devices`) and one numerical comparison per seed.
struct PartitionVerifyOptions {
  SpmdOptions spmd;
  std::vector<uint64_t> seeds = {7};
  NumericVerifyOptions verify;
};

// Parses `hlo`, partitions it over `devices` and runs both programs on virtual devices with the
// same random inputs (one run per seed), comparing the results. nullopt with the reason in *why
// (parse, partition, or the mismatch, with the partitioned program's text) on failure; the parsed
// module (which the partition result's records point into) goes to *original when given.
inline std::optional<PartitionResult> PartitionAndVerify(const std::string& hlo, int64_t devices, std::string* why,
                                                         const PartitionVerifyOptions& options = {},
                                                         std::unique_ptr<Module>* original = nullptr) {
  auto m = ParseHloModule(hlo);
  if (!m.ok()) {
    *why = "parse: " + m.error().message;
    return std::nullopt;
  }
  SpmdOptions o = options.spmd;
  o.num_partitions = devices;
  auto r = PartitionModule(**m, o);
  if (!r.ok()) {
    *why = "partition: " + r.error().message;
    return std::nullopt;
  }
  for (uint64_t seed : options.seeds) {
    auto v = VerifyPartitioned(**m, *r->module, devices, seed, options.verify);
    if (!v.ok() || !v->match) {
      *why = (v.ok() ? "numerical mismatch (max_abs_error " + std::to_string(v->max_abs_error) + "): " + v->detail
                     : "verify: " + v.error().message) +
             "\n" + PrintHloModule(*r->module);
      return std::nullopt;
    }
  }
  if (original) *original = std::move(m).value();
  return std::move(r).value();
}

}  // namespace shardscope::testing
