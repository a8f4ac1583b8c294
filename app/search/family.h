// Strategy families: pluggable generators of candidates. Each family is one file
// (family_<name>.cpp) and one line in families.cpp's table; it knows which models it applies to and
// which settings, annotations and pipeline options express its strategy on each mesh of the pod.
//
//   in-layer        GSPMD Table 1's dense-Transformer variants (2D Attempt 1, Attempt 2, finalized)
//   data-parallel   the batch split over every device, weights replicated
//   weight-update-sharding  data parallel with the update sharded across the replicas (paper 000)
//   pipelining      the dense Transformer in L stages on (L, X, Y): GPipe and circular (GSPMD §3.3)
//   expert-parallel MoE: GShard's 1-D expert sharding and GSPMD §5.5's hybrid (E on X, H on Y)
//   spatial         image models: the batch on X, the first spatial dim on Y (GSPMD §5.6)
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "app/search/candidate.h"
#include "app/search/mesh_space.h"
#include "core/zoo/zoo.h"

namespace shardscope::search {

// What the families generate candidates for: a zoo model with the user's settings on a pod.
class SearchSpace {
 public:
  SearchSpace(std::string model, ZooOverrides settings, Pod pod);

  const std::string& model() const { return model_; }
  const ZooOverrides& settings() const { return settings_; }
  const Pod& pod() const { return pod_; }
  bool known_model() const { return known_; }

  bool HasParameter(std::string_view name) const;
  // The user's value of a setting, else the model's default ("" when the model has no such setting).
  std::string Setting(std::string_view name) const;
  int64_t IntSetting(std::string_view name, int64_t fallback = 0) const;

  // Whether the model builds with annotations=`set` (probed once, at reduced depth and on a 1x1 mesh).
  bool AcceptsAnnotations(const std::string& set) const;

  // A candidate of this model and pod on `mesh`: the user's settings, the pod's fields, the mesh.
  Candidate Base(std::string family, std::string strategy, const MeshChoice& mesh) const;

 private:
  std::string model_;
  ZooOverrides settings_;
  Pod pod_;
  std::vector<ZooParameter> parameters_;
  bool known_ = false;
  mutable std::mutex mutex_;
  mutable std::map<std::string, bool> accepts_;
};

class StrategyFamily {
 public:
  virtual ~StrategyFamily() = default;
  virtual std::string_view name() const = 0;
  virtual std::string_view summary() const = 0;
  // Appends the family's candidates for `space` (none when it does not apply to the model); `notes`
  // say what it left out and why ("gshard: 4 experts cannot be split over 256 devices").
  virtual void Generate(const SearchSpace& space, std::vector<Candidate>& out, std::vector<std::string>& notes) const = 0;
};

// The zoo settings the families set per candidate, whatever the user's value: the annotation set,
// the mesh axes and, for the pipelined Transformer, the stages and the schedule. (The microbatch
// count is a family's choice too, but a user's value fixes it, and with the microbatch size it is
// the pipelined model's batch.)
const std::vector<std::string_view>& StrategyChoiceSettings();

// The families, in the order families.cpp lists them.
const std::vector<const StrategyFamily*>& StrategyFamilies();
const StrategyFamily* FindFamily(std::string_view name);

// Each family file defines one of these.
const StrategyFamily& InLayerFamily();
const StrategyFamily& DataParallelFamily();
const StrategyFamily& WeightUpdateShardingFamily();
const StrategyFamily& PipeliningFamily();
const StrategyFamily& ExpertParallelFamily();
const StrategyFamily& SpatialFamily();

}  // namespace shardscope::search
