// Annotation sets of the model zoo: GSPMD Table 1's dense-Transformer sharding annotations
// (2D Attempt 1, Attempt 2, finalized), plain data parallelism (every weight replicated, the batch
// split over every device of the mesh: the program the weight-update-sharding paper starts from),
// and the helper that applies a dims mapping to an instruction through MeshSplit on the model's
// mesh (Table 1's rows or a model's own policy).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
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

// The vocabulary layers of a language model (GSPMD §5.1's 32000-word token embedding and softmax;
// not in Table 1, which annotates the Transformer layers only). Paper Figure 2's caption: "Y
// partitions the vocabulary, X is data parallelism in the embedding and softmax layers"; like Table
// 1's weights, the two vocabulary weights are also split over X (weight-update sharding). Tensors:
// the embedding table E [V,M], the softmax weight W_s [M,V], and the [B,S,V] one-hots (tokens and
// labels) and logits.
enum class VocabularyTensor : uint8_t { kEmbedding, kSoftmaxWeight, kBSV };
// The dims mapping of a vocabulary tensor (over VM, MV, BSV) under `set`:
//   attempt1 / attempt2 / finalized   E: Y,X   W_s: X,Y   BSV: X,_,Y
//   data-parallel                     E: _,_   W_s: _,_   BSV: B over every axis,_,_
// Empty for AnnotationSet::kNone.
std::vector<int64_t> VocabularyDimsMapping(AnnotationSet set, VocabularyTensor tensor);

// The annotation sets of the image models (resnet.h, unet3d.h): none; data (the batch split over
// mesh axis X); spatial (the batch on X and the first spatial dim on Y: GSPMD §5.6). Only the
// model's inputs are annotated.
enum class ImageAnnotations : uint8_t { kNone, kData, kSpatial };
std::string_view ImageAnnotationsName(ImageAnnotations a);
// The "annotations" setting of the image models (none | data | spatial).
ImageAnnotations ReadImageAnnotations(ZooParams& p);
// The dims mapping of an image input [B, spatial..., C] under `a` (empty for kNone).
std::vector<int64_t> ImageInputMapping(ImageAnnotations a, int64_t rank);

// The dims mapping of each Table 1 tensor under some annotation policy: Table 1's own rows, or a
// model's own (the MoE sets annotate the dense layers' tensors their way). Empty: not annotated.
using Table1Policy = std::function<std::vector<int64_t>(Table1Tensor)>;

namespace zoo {

// Annotation helper: MeshSplit on the model's mesh, recording errors in the builder.
class Annotator {
 public:
  // Table 1's rows for `set` (kNone annotates nothing).
  Annotator(Builder& b, AnnotationSet set, const DeviceMesh& mesh)
      : b_(b), mesh_(mesh), set_(set), enabled_(set != AnnotationSet::kNone), replicate_weights_(set == AnnotationSet::kDataParallel) {
    if (enabled_) policy_ = [set](Table1Tensor t) { return Table1DimsMapping(set, t); };
  }
  // A model's own policy (an empty policy annotates nothing).
  Annotator(Builder& b, Table1Policy policy, const DeviceMesh& mesh)
      : b_(b), mesh_(mesh), policy_(std::move(policy)), enabled_(static_cast<bool>(policy_)) {}
  // For models that apply their own mappings (Apply only): enabled or not.
  Annotator(Builder& b, const DeviceMesh& mesh, bool enabled) : b_(b), mesh_(mesh), enabled_(enabled) {}
  // `mapping` over the instruction's dims (mesh axis per dim, -1: not split, kEveryMeshAxis: over
  // every axis; all -1: replicated). An empty mapping leaves the instruction to propagation.
  void Apply(Instruction* inst, const std::vector<int64_t>& mapping) {
    if (!inst || !enabled_ || mapping.empty()) return;
    Result<HloSharding> s = Sharding(inst->shape().rank(), mapping);
    if (!s.ok()) {
      b_.Fail("annotating " + inst->name() + ": " + s.error().message);
      return;
    }
    b_.Annotate(inst, *s);
  }
  // The policy's mapping of Table 1 tensor `t`, expanded to the instruction's dims by `expand`,
  // behind the prefix axes.
  void Table1(Instruction* inst, Table1Tensor t, const std::function<std::vector<int64_t>(const std::vector<int64_t>&)>& expand = nullptr) {
    if (!enabled_ || !policy_) return;
    std::vector<int64_t> m = policy_(t);
    if (m.empty()) return;
    if (expand) m = expand(m);
    m.insert(m.begin(), prefix_.begin(), prefix_.end());
    Apply(inst, m);
  }
  // The set's mapping of vocabulary tensor `t` (VocabularyDimsMapping; nothing for an Annotator
  // built from a model's own policy).
  void Vocabulary(Instruction* inst, VocabularyTensor t) {
    if (enabled_ && set_ != AnnotationSet::kNone) Apply(inst, VocabularyDimsMapping(set_, t));
  }
  // Mesh axes of leading dims in front of every Table 1 tensor (layers stacked and vectorised
  // along them: the pipelined Transformer's stage dim on its mesh axis L).
  void set_prefix_axes(std::vector<int64_t> axes) { prefix_ = std::move(axes); }
  bool enabled() const { return enabled_; }
  const DeviceMesh& mesh() const { return mesh_; }
  // Every trainable weight's parameter and its optimizer state's: replicated under kDataParallel
  // (the sets of Table 1 annotate only the four Table 1 weights, through Table1; propagation gives
  // the state its weight's sharding).
  void WeightParameter(Instruction* param) {
    if (replicate_weights_ && param) b_.Annotate(param, HloSharding::Replicate());
  }

 private:
  Result<HloSharding> Sharding(int64_t rank, const std::vector<int64_t>& mapping) const {
    if (std::find(mapping.begin(), mapping.end(), kEveryMeshAxis) == mapping.end()) return MeshSplit(rank, mesh_, mapping);
    AxisAssignment a;
    a.dim_axes.resize(static_cast<size_t>(rank));
    for (size_t d = 0; d < mapping.size() && d < a.dim_axes.size(); ++d) {
      if (mapping[d] == kEveryMeshAxis)
        for (int64_t ax = 0; ax < mesh_.num_axes(); ++ax) a.dim_axes[d].push_back(ax);
      else if (mapping[d] >= 0)
        a.dim_axes[d].push_back(mapping[d]);
    }
    return MeshShard(rank, mesh_, a);
  }

  Builder& b_;
  const DeviceMesh& mesh_;
  AnnotationSet set_ = AnnotationSet::kNone;  // kNone when built from a policy
  Table1Policy policy_;
  std::vector<int64_t> prefix_;
  bool enabled_ = false;
  bool replicate_weights_ = false;
};

}  // namespace zoo
}  // namespace shardscope
