// Annotation sets of the model zoo: GSPMD Table 1's dense-Transformer sharding annotations
// (2D Attempt 1, Attempt 2, finalized) and the helper that applies a dims mapping to an
// instruction through MeshSplit on the model's mesh (Table 1's rows or a model's own policy).
#pragma once

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

enum class AnnotationSet : uint8_t { kNone, kAttempt1, kAttempt2, kFinalized };
std::string_view AnnotationSetName(AnnotationSet s);                  // "none", "attempt1", ...
std::optional<AnnotationSet> AnnotationSetFromName(std::string_view s);  // also "2d-attempt-1" etc.

// The tensors (columns) of GSPMD Table 1.
enum class Table1Tensor : uint8_t { kWqkv, kWo, kWin, kWout, kBSM, kBSND, kBSH };
std::string_view Table1TensorName(Table1Tensor t);  // "W_QKV (MND)", "BSM", ...
// The dims mapping (mesh axis per logical tensor dim: 0 = X, 1 = Y, -1 = not split) of a Table 1
// cell, over the tensor's logical dims as Table 1 writes them (MND, NDM, MH, HM, BSM, BSND, BSH).
// Empty for AnnotationSet::kNone.
std::vector<int64_t> Table1DimsMapping(AnnotationSet set, Table1Tensor tensor);

// The "annotations" setting of a zoo model.
AnnotationSet ReadAnnotationSet(ZooParams& p);

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
      : b_(b), mesh_(mesh), enabled_(set != AnnotationSet::kNone) {
    if (enabled_) policy_ = [set](Table1Tensor t) { return Table1DimsMapping(set, t); };
  }
  // A model's own policy (an empty policy annotates nothing).
  Annotator(Builder& b, Table1Policy policy, const DeviceMesh& mesh)
      : b_(b), mesh_(mesh), policy_(std::move(policy)), enabled_(static_cast<bool>(policy_)) {}
  // For models that apply their own mappings (Apply only): enabled or not.
  Annotator(Builder& b, const DeviceMesh& mesh, bool enabled) : b_(b), mesh_(mesh), enabled_(enabled) {}
  // `mapping` over the instruction's dims (mesh axis per dim, -1: not split; all -1: replicated).
  // An empty mapping leaves the instruction to propagation.
  void Apply(Instruction* inst, const std::vector<int64_t>& mapping) {
    if (!inst || !enabled_ || mapping.empty()) return;
    Result<HloSharding> s = MeshSplit(inst->shape().rank(), mesh_, mapping);
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
  // Mesh axes of leading dims in front of every Table 1 tensor (layers stacked and vectorised
  // along them: the pipelined Transformer's stage dim on its mesh axis L).
  void set_prefix_axes(std::vector<int64_t> axes) { prefix_ = std::move(axes); }
  bool enabled() const { return enabled_; }
  const DeviceMesh& mesh() const { return mesh_; }

 private:
  Builder& b_;
  const DeviceMesh& mesh_;
  Table1Policy policy_;
  std::vector<int64_t> prefix_;
  bool enabled_ = false;
};

}  // namespace zoo
}  // namespace shardscope
