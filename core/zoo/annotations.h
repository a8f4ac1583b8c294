// Annotation sets of the model zoo: GSPMD Table 1's dense-Transformer sharding annotations
// (2D Attempt 1, Attempt 2, finalized), plain data parallelism (every weight replicated, the
// batch dim split over every device of the mesh: the program the weight-update-sharding paper
// starts from), and the helper that applies a dims mapping to an instruction through MeshSplit on
// the model's mesh.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/ir/builder.h"
#include "core/sharding/mesh.h"
#include "core/zoo/zoo.h"

namespace shardscope {

enum class AnnotationSet : uint8_t { kNone, kAttempt1, kAttempt2, kFinalized, kDataParallel };
std::string_view AnnotationSetName(AnnotationSet s);                  // "none", "attempt1", ..., "data-parallel"
std::optional<AnnotationSet> AnnotationSetFromName(std::string_view s);  // also "2d-attempt-1" etc.

// The tensors (columns) of GSPMD Table 1.
enum class Table1Tensor : uint8_t { kWqkv, kWo, kWin, kWout, kBSM, kBSND, kBSH };
std::string_view Table1TensorName(Table1Tensor t);  // "W_QKV (MND)", "BSM", ...
// The dims mapping (mesh axis per logical tensor dim: 0 = X, 1 = Y, -1 = not split,
// kEveryMeshAxis = split over every axis of the mesh) of a Table 1 cell, over the tensor's logical
// dims as Table 1 writes them (MND, NDM, MH, HM, BSM, BSND, BSH). Empty for AnnotationSet::kNone.
// kDataParallel: weights not split (replicated), B over every axis.
inline constexpr int64_t kEveryMeshAxis = -2;
std::vector<int64_t> Table1DimsMapping(AnnotationSet set, Table1Tensor tensor);

// The "annotations" setting of a zoo model.
AnnotationSet ReadAnnotationSet(ZooParams& p);

namespace zoo {

// Annotation helper: MeshSplit on a 2-D mesh, recording errors in the builder.
class Annotator {
 public:
  Annotator(Builder& b, AnnotationSet set, const DeviceMesh& mesh) : b_(b), set_(set), mesh_(mesh) {}
  // `mapping` over the instruction's dims (already expanded from the Table 1 logical dims).
  void Apply(Instruction* inst, const std::vector<int64_t>& mapping) {
    if (!inst || set_ == AnnotationSet::kNone) return;
    Result<HloSharding> s = Sharding(inst->shape().rank(), mapping);
    if (!s.ok()) {
      b_.Fail("annotating " + inst->name() + ": " + s.error().message);
      return;
    }
    b_.Annotate(inst, *s);
  }
  void Table1(Instruction* inst, Table1Tensor t, const std::function<std::vector<int64_t>(const std::vector<int64_t>&)>& expand = nullptr) {
    if (set_ == AnnotationSet::kNone) return;
    std::vector<int64_t> m = Table1DimsMapping(set_, t);
    Apply(inst, expand ? expand(m) : m);
  }
  // Every trainable weight's parameter: replicated under kDataParallel (the sets of Table 1 annotate
  // only the four Table 1 weights, through Table1).
  void WeightParameter(Instruction* param) {
    if (set_ == AnnotationSet::kDataParallel && param) b_.Annotate(param, HloSharding::Replicate());
  }
  AnnotationSet set() const { return set_; }

 private:
  Result<HloSharding> Sharding(int64_t rank, const std::vector<int64_t>& mapping) const {
    AxisAssignment a;
    a.dim_axes.resize(static_cast<size_t>(rank));
    bool every = false;
    for (size_t d = 0; d < mapping.size() && d < a.dim_axes.size(); ++d) {
      if (mapping[d] == kEveryMeshAxis) {
        every = true;
        for (int64_t ax = 0; ax < mesh_.num_axes(); ++ax) a.dim_axes[d].push_back(ax);
      } else if (mapping[d] >= 0) {
        a.dim_axes[d].push_back(mapping[d]);
      }
    }
    return every ? MeshShard(rank, mesh_, a) : MeshSplit(rank, mesh_, mapping);
  }

  Builder& b_;
  AnnotationSet set_;
  const DeviceMesh& mesh_;
};

}  // namespace zoo
}  // namespace shardscope
