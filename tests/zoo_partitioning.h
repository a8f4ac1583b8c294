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

// Empty on failure (a build, propagation or partitioning error, or a numerical mismatch) with the
// reason in *why. `edit` may change the built module first (e.g. add outputs); `options` draw the
// random inputs (e.g. token ids within the vocabulary).
inline std::optional<PartitionedZooModel> PartitionZooModel(const std::string& model, const ZooOverrides& overrides,
                                                            std::string* why,
                                                            const std::function<void(Module&)>& edit = nullptr,
                                                            uint64_t seed = 17,
                                                            const NumericVerifyOptions& options = {}) {
  auto m = ZooBuild(model, overrides);
  if (!m.ok()) { *why = m.error().message; return std::nullopt; }
  if (edit) edit(**m);
  PropagationOptions po;
  po.propagate_to_output = {true};
  auto p = PropagateShardings(**m, po);
  if (!p.ok()) { *why = "propagation: " + p.error().message; return std::nullopt; }
  auto r = PartitionModule(**m);
  if (!r.ok()) { *why = "partition: " + r.error().message; return std::nullopt; }
  auto v = VerifyPartitioned(**m, *r->module, (*m)->num_partitions, seed, options);
  if (!v.ok()) { *why = "verify: " + v.error().message; return std::nullopt; }
  if (!v->match) { *why = "numerical mismatch: " + v->detail; return std::nullopt; }
  return PartitionedZooModel{std::move(m).value(), std::move(r).value(), v->max_abs_error};
}

// One line per inserted collective: "kind groups from origin".
inline std::string DescribeCollectives(const PartitionResult& r) {
  std::string s;
  for (const auto& c : r.collectives)
    s += std::string(OpcodeName(c.kind)) + " " + c.replica_groups + " from " + c.origin + "\n";
  return s;
}

}  // namespace shardscope::testing
