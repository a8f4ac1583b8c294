// Test helper shared by the model-zoo partitioning tests: build a zoo model, propagate (outputs
// may be sharded), partition, and verify numerically on the model's devices.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/eval/numeric_verify.h"
#include "core/zoo/zoo.h"
#include "partitioner/propagation/sharding_propagation.h"
#include "partitioner/spmd/spmd_partitioner.h"

namespace shardscope::testing {

struct PartitionedZooModel {
  std::unique_ptr<Module> annotated;  // after propagation
  PartitionResult spmd;
  double max_abs_error = 0;
};

// Builds a zoo model, propagates (outputs may be sharded; `to_parameters` lets propagation shard
// the parameters too) and partitions it for the model's devices, without verifying: the SPMD
// program of a zoo configuration as the simulator's tests take it. `edit` may change (or measure)
// the built module first (e.g. add outputs); `annotated` gets the propagated module. Errors say
// which step failed.
inline Result<PartitionResult> PartitionZooUnverified(const std::string& model, const ZooOverrides& overrides,
                                                      std::unique_ptr<Module>* annotated = nullptr,
                                                      const std::function<void(Module&)>& edit = nullptr,
                                                      bool to_parameters = false) {
  auto m = ZooBuild(model, overrides);
  if (!m.ok()) return m.error();
  if (edit) edit(**m);
  PropagationOptions po;
  po.propagate_to_output = {true};
  if (to_parameters) po.propagate_to_parameters = {true};
  if (auto p = PropagateShardings(**m, po); !p.ok()) return Error("propagation: " + p.error().message);
  auto r = PartitionModule(**m);
  if (!r.ok()) return Error("partition: " + r.error().message);
  if (annotated) *annotated = std::move(m).value();
  return r;
}

// Empty on failure (a build, propagation or partitioning error, or a numerical mismatch) with the
// reason in *why. `edit` may change the built module first (e.g. add outputs); `options` draw the
// random inputs (e.g. token ids within the vocabulary).
inline std::optional<PartitionedZooModel> PartitionZooModel(const std::string& model, const ZooOverrides& overrides,
                                                            std::string* why,
                                                            const std::function<void(Module&)>& edit = nullptr,
                                                            uint64_t seed = 17,
                                                            const NumericVerifyOptions& options = {}) {
  std::unique_ptr<Module> m;
  auto r = PartitionZooUnverified(model, overrides, &m, edit);
  if (!r.ok()) { *why = r.error().message; return std::nullopt; }
  auto v = VerifyPartitioned(*m, *r->module, m->num_partitions, seed, options);
  if (!v.ok()) { *why = "verify: " + v.error().message; return std::nullopt; }
  if (!v->match) { *why = "numerical mismatch: " + v->detail; return std::nullopt; }
  return PartitionedZooModel{std::move(m), std::move(r).value(), v->max_abs_error};
}

// One line per inserted collective: "kind groups from origin".
inline std::string DescribeCollectives(const PartitionResult& r) {
  std::string s;
  for (const auto& c : r.collectives)
    s += std::string(OpcodeName(c.kind)) + " " + c.replica_groups + " from " + c.origin + "\n";
  return s;
}

}  // namespace shardscope::testing
