#include "core/ir/scale_dims.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/ir/opcodes.h"
#include "core/ir/shape_inference.h"
#include "core/ir/verifier.h"

namespace shardscope {
namespace {

void CollectLeaves(const Shape& s, std::vector<const Shape*>& out) {
  if (s.IsTuple()) {
    for (const Shape& e : s.tuple) CollectLeaves(e, out);
    return;
  }
  out.push_back(&s);
}

Shape* LeafAt(Shape& s, int64_t& index) {
  if (s.IsTuple()) {
    for (Shape& e : s.tuple)
      if (Shape* found = LeafAt(e, index)) return found;
    return nullptr;
  }
  return index-- == 0 ? &s : nullptr;
}

std::string Where(const Instruction& inst) {
  const Computation* c = inst.parent();
  const bool entry = c && c->parent() && c->parent()->entry() == c;
  return (c && !entry ? c->name() + "/" : std::string()) + "%" + inst.name();
}

class Scaler {
 public:
  Scaler(Module& m, int64_t k, const ScaleDimsOptions& o, const std::vector<int64_t>& pins)
      : m_(m), k_(k), opts_(o), pins_(pins) {}

  // Dimensions (nodes) that, kept at their size, would let a failed attempt through: a dimension
  // two rules size differently keeps its size on the next attempt (the shifting buffer's stages:
  // a slice of 3 of its 4 stages and one more concatenated stay 4 only when the stages do not scale).
  const std::vector<int64_t>& retry_pins() const { return retry_pins_; }
  const std::vector<std::string>& conflicts() const { return conflicts_; }

  Result<ScaledModule> Run() {
    Layout();
    if (auto e = Unify()) return *e;
    for (int64_t n : pins_)
      if (n >= 0 && n < static_cast<int64_t>(old_.size())) Pin(n);
    if (auto e = ClassFactors()) return *e;
    if (opts_.shrink) TileRequirements();
    if (auto e = Propagate()) return *e;
    if (!conflicts_.empty()) return Error(conflicts_.front());
    ScaledModule out;
    for (Instruction* p : m_.entry()->parameters()) {
      const Info& info = info_.at(p);
      for (int64_t n = info.first; n < info.first + info.count; ++n)
        (Value(n) != old_[n] ? out.scaled_parameter_dims : out.kept_parameter_dims) += 1;
    }
    m_.entry_computation_layout.clear();  // its shapes were the old ones
    Status v = VerifyModule(m_);
    if (!v.ok()) return Error("scaling the module's dimensions by " + std::to_string(k_) + ": " + v.error().message);
    return out;
  }

 private:
  struct Info {
    int64_t first = 0, count = 0;
    std::vector<int64_t> leaf_first, leaf_rank;  // per leaf
  };

  // ---- the nodes: one per (instruction, leaf, dimension) ----
  void Layout() {
    for (const auto& c : m_.computations())
      for (const auto& i : c->instructions()) {
        Info info;
        info.first = static_cast<int64_t>(old_.size());
        std::vector<const Shape*> leaves;
        CollectLeaves(i->shape(), leaves);
        for (const Shape* l : leaves) {
          info.leaf_first.push_back(static_cast<int64_t>(old_.size()));
          const int64_t rank = l->IsArray() ? l->rank() : 0;
          info.leaf_rank.push_back(rank);
          for (int64_t d = 0; d < rank; ++d) old_.push_back(l->dim(d));
        }
        info.count = static_cast<int64_t>(old_.size()) - info.first;
        info_[i.get()] = std::move(info);
      }
    parent_.resize(old_.size());
    std::iota(parent_.begin(), parent_.end(), 0);
    value_.assign(old_.size(), 0);
    pinned_.assign(old_.size(), 0);
    derived_.assign(old_.size(), 0);
    free_.assign(old_.size(), 0);
    window_.assign(old_.size(), 0);
    extent_.assign(old_.size(), 0);
  }

  int64_t Node(const Instruction* i, int64_t d, int64_t leaf = 0) const {
    return info_.at(i).leaf_first[static_cast<size_t>(leaf)] + d;
  }
  int64_t Rank(const Instruction* i, int64_t leaf = 0) const { return info_.at(i).leaf_rank[static_cast<size_t>(leaf)]; }
  int64_t Leaves(const Instruction* i) const { return static_cast<int64_t>(info_.at(i).leaf_rank.size()); }

  int64_t Find(int64_t n) {
    while (parent_[n] != n) n = parent_[n] = parent_[parent_[n]];
    return n;
  }
  void Unite(int64_t a, int64_t b) {
    a = Find(a), b = Find(b);
    if (a == b) return;
    parent_[b] = a;
    pinned_[a] |= pinned_[b];
    derived_[a] |= derived_[b];
    free_[a] |= free_[b];
    window_[a] |= window_[b];
    extent_[a] |= extent_[b];
  }
  void Pin(int64_t n) { pinned_[Find(n)] = 1; }
  void MarkDerived(int64_t n) { derived_[Find(n)] = 1; }
  void MarkFree(int64_t n) { free_[Find(n)] = 1; }
  void MarkWindow(int64_t n) { window_[Find(n)] = 1; }
  void MarkExtent(int64_t n) { extent_[Find(n)] = 1; }
  int64_t Value(int64_t n) { return value_[Find(n)]; }

  // Leaf `la` of a with leaf `lb` of b, dimension by dimension (nothing when the ranks differ).
  void UniteLeaf(const Instruction* a, int64_t la, const Instruction* b, int64_t lb) {
    if (Rank(a, la) != Rank(b, lb)) return;
    for (int64_t d = 0; d < Rank(a, la); ++d) Unite(Node(a, d, la), Node(b, d, lb));
  }
  // Every leaf of a with the leaves of b starting at leaf `from` (a tuple passed through).
  void UniteAll(const Instruction* a, const Instruction* b, int64_t from = 0) {
    for (int64_t l = 0; l < Leaves(a) && from + l < Leaves(b); ++l) UniteLeaf(a, l, b, from + l);
  }
  // The first leaf of tuple element `index` of `shape`.
  static int64_t ElementLeaf(const Shape& shape, int64_t index) {
    int64_t leaf = 0;
    for (int64_t e = 0; e < index && e < static_cast<int64_t>(shape.tuple.size()); ++e) leaf += shape.tuple[e].LeafCount();
    return leaf;
  }

  // A reshape's groups of dimensions whose (old) products match: input dims [a0, a) become output
  // dims [b0, b).
  struct ReshapeGroup {
    int64_t a0, a, b0, b;
  };
  std::vector<ReshapeGroup> ReshapeGroups(const Instruction* in, const Instruction* out) const {
    std::vector<ReshapeGroup> groups;
    int64_t a = 0, b = 0;
    const int64_t ra = Rank(in), rb = Rank(out);
    while (a < ra || b < rb) {
      const int64_t a0 = a, b0 = b;
      int64_t pa = 1, pb = 1;
      if (a < ra) pa *= old_[Node(in, a++)];
      if (b < rb) pb *= old_[Node(out, b++)];
      while (pa != pb && (a < ra || b < rb)) {
        if ((pa < pb && a < ra) || b >= rb) pa *= old_[Node(in, a++)];
        else pb *= old_[Node(out, b++)];
      }
      groups.push_back({a0, a, b0, b});
    }
    return groups;
  }

  static bool IsFusionLike(const Instruction& i) { return i.opcode() == Opcode::kGeneric && IsFusion(i); }
  // A custom-call that only marks its one operand (Sharding, ShardBarrierFrom/To,
  // LayoutConstraint, ...): its result is the operand's shape, so it scales with it.
  static bool IsPassThroughCall(const Instruction& i) {
    return i.opcode() == Opcode::kCustomCall && i.operand_count() == 1 && i.shape().Compatible(i.operand(0)->shape());
  }
  static bool Contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

  // The entry parameter's node for "param:dim", or an error naming what is wrong with it.
  Result<int64_t> ParameterNode(const std::string& key) const {
    const size_t colon = key.rfind(':');
    if (colon == std::string::npos) return Error("'" + key + "' is not PARAMETER:DIM (e.g. x:0)");
    const std::string name = key.substr(0, colon);
    int64_t dim = -1;
    try {
      size_t used = 0;
      dim = std::stoll(key.substr(colon + 1), &used);
      if (used != key.size() - colon - 1) dim = -1;
    } catch (...) {
      dim = -1;
    }
    for (const Instruction* p : m_.entry()->parameters())
      if (p->name() == name) {
        if (p->shape().IsTuple() || dim < 0 || dim >= Rank(p))
          return Error("'" + key + "': " + name + " is " + p->shape().ToString(false) + ", it has no dimension " +
                       key.substr(colon + 1));
        return Node(p, dim);
      }
    return Error("'" + key + "': the entry computation has no parameter " + name);
  }

  std::optional<Error> ClassFactors() {
    std::unordered_map<int64_t, std::string> given_by;
    for (const auto& [key, factor] : opts_.factors) {
      if (factor < 1) return Error("'" + key + "': a factor must be a whole number >= 1");
      auto n = ParameterNode(key);
      if (!n.ok()) return n.error();
      const int64_t r = Find(*n);
      auto [it, fresh] = factor_.emplace(r, factor);
      if (!fresh && it->second != factor)
        return Error("'" + key + "' and '" + given_by[r] + "' are the same dimension (an op uses them together) but are given " +
                     std::to_string(factor) + " and " + std::to_string(it->second));
      given_by.emplace(r, key);
    }
    return std::nullopt;
  }

 public:
  // For EntryParameterDimensionClasses: the classes without sizing anything.
  Result<std::vector<DimensionClass>> Classes() {
    Layout();
    if (auto e = Unify()) return *e;
    std::vector<DimensionClass> out;
    std::unordered_map<int64_t, size_t> index;
    for (const Instruction* p : m_.entry()->parameters()) {
      for (int64_t l = 0; l < Leaves(p); ++l)
        for (int64_t d = 0; d < Rank(p, l); ++d) {
          if (Leaves(p) != 1) continue;  // a tuple parameter's leaves are not named by param:dim
          const int64_t n = Node(p, d, l), r = Find(n);
          auto [it, fresh] = index.emplace(r, out.size());
          if (fresh) out.push_back({old_[n], {}, pinned_[r] != 0 || (window_[r] && !extent_[r])});
          out[it->second].dims.push_back(p->name() + ":" + std::to_string(d));
        }
    }
    return out;
  }

 private:
  // ---- which dimensions are the same ----
  std::optional<Error> Unify() {
    for (const auto& c : m_.computations())
      for (const auto& owned : c->instructions()) {
        const Instruction* i = owned.get();
        const Opcode op = i->opcode();
        const int64_t rank = Rank(i);
        auto operand = [&](int64_t n) { return i->operand(n); };
        switch (op) {
          case Opcode::kParameter: case Opcode::kIota: case Opcode::kRng:
            if (op != Opcode::kParameter || c.get() == m_.entry())
              for (int64_t n = info_.at(i).first; n < info_.at(i).first + info_.at(i).count; ++n) MarkFree(n);
            break;
          case Opcode::kPartitionId: case Opcode::kReplicaId: case Opcode::kAfterAll:
            break;
          case Opcode::kConstant:
            for (int64_t n = info_.at(i).first; n < info_.at(i).first + info_.at(i).count; ++n) Pin(n);
            break;
          case Opcode::kBroadcast:
            for (int64_t d = 0; d < rank; ++d) MarkFree(Node(i, d));  // the mapped ones are united below
            for (size_t d = 0; d < i->dimensions.size() && static_cast<int64_t>(d) < Rank(operand(0)); ++d)
              Unite(Node(operand(0), static_cast<int64_t>(d)), Node(i, i->dimensions[d]));
            break;
          case Opcode::kTranspose:
            for (size_t d = 0; d < i->dimensions.size() && static_cast<int64_t>(d) < rank; ++d)
              Unite(Node(i, static_cast<int64_t>(d)), Node(operand(0), i->dimensions[d]));
            break;
          case Opcode::kReduce: {
            const int64_t inputs = i->operand_count() / 2;
            std::vector<int64_t> kept;
            for (int64_t d = 0; d < Rank(operand(0)); ++d)
              if (std::find(i->dimensions.begin(), i->dimensions.end(), d) == i->dimensions.end()) kept.push_back(d);
            for (int64_t n = 0; n < inputs; ++n) {
              UniteLeaf(operand(0), 0, operand(n), 0);
              if (n < Leaves(i) && Rank(i, n) == static_cast<int64_t>(kept.size()))
                for (size_t d = 0; d < kept.size(); ++d) Unite(Node(operand(n), kept[d]), Node(i, static_cast<int64_t>(d), n));
            }
            break;
          }
          case Opcode::kDot: {
            const DotDimensionNumbers& dn = i->dot_dims;
            const Instruction *l = operand(0), *r = operand(1);
            int64_t out = 0;
            for (size_t b = 0; b < dn.lhs_batch.size(); ++b) {
              Unite(Node(l, dn.lhs_batch[b]), Node(r, dn.rhs_batch[b]));
              Unite(Node(l, dn.lhs_batch[b]), Node(i, out++));
            }
            for (size_t c2 = 0; c2 < dn.lhs_contracting.size(); ++c2)
              Unite(Node(l, dn.lhs_contracting[c2]), Node(r, dn.rhs_contracting[c2]));
            auto free_dims = [&](const Instruction* x, const std::vector<int64_t>& batch, const std::vector<int64_t>& contracting) {
              for (int64_t d = 0; d < Rank(x); ++d)
                if (std::find(batch.begin(), batch.end(), d) == batch.end() &&
                    std::find(contracting.begin(), contracting.end(), d) == contracting.end() && out < rank)
                  Unite(Node(x, d), Node(i, out++));
            };
            free_dims(l, dn.lhs_batch, dn.lhs_contracting);
            free_dims(r, dn.rhs_batch, dn.rhs_contracting);
            break;
          }
          case Opcode::kConvolution: {
            const ConvolutionDimensionNumbers& cd = i->conv_dims;
            const Instruction *in = operand(0), *kernel = operand(1);
            if (i->batch_group_count != 1)
              return Error(Where(*i) + ": a convolution with batch_group_count > 1 cannot be scaled");
            Unite(Node(in, cd.input_batch), Node(i, cd.output_batch));
            // Grouped (depthwise): the kernel's input features are one group's; the group count
            // follows (Process).
            if (i->feature_group_count == 1) Unite(Node(in, cd.input_feature), Node(kernel, cd.kernel_input_feature));
            Unite(Node(kernel, cd.kernel_output_feature), Node(i, cd.output_feature));
            // A kernel's window keeps its size unless it is also some convolution's input extent (a
            // weight's 3x3 stays; the activation gradient a weight-gradient convolution takes as its
            // kernel grows, being the input of the data-gradient one).
            for (int64_t d : cd.kernel_spatial) MarkWindow(Node(kernel, d));
            for (int64_t d : cd.input_spatial) MarkExtent(Node(in, d));
            for (int64_t d : cd.output_spatial) MarkDerived(Node(i, d));
            break;
          }
          case Opcode::kReduceWindow: {
            const int64_t inputs = i->operand_count() / 2;
            for (int64_t n = 0; n < inputs && n < Leaves(i); ++n)
              for (int64_t d = 0; d < Rank(operand(n)) && d < Rank(i, n); ++d) {
                const WindowDimension w = d < static_cast<int64_t>(i->window.dims.size()) ? i->window.dims[d] : WindowDimension{};
                if (w == WindowDimension{})
                  Unite(Node(operand(n), d), Node(i, d, n));
                else
                  MarkDerived(Node(i, d, n));
              }
            break;
          }
          case Opcode::kConcatenate: {
            const int64_t cat = i->dimensions.empty() ? -1 : i->dimensions[0];
            for (int64_t n = 0; n < i->operand_count(); ++n)
              for (int64_t d = 0; d < rank && d < Rank(operand(n)); ++d)
                if (d != cat) Unite(Node(operand(n), d), Node(i, d));
            if (cat >= 0 && cat < rank) MarkDerived(Node(i, cat));
            break;
          }
          case Opcode::kSlice:
            for (int64_t d = 0; d < rank; ++d) {
              const SliceSpec& s = i->slice;
              const bool full = s.starts[d] == 0 && s.limits[d] == old_[Node(operand(0), d)] && s.strides[d] == 1;
              if (full) Unite(Node(operand(0), d), Node(i, d)); else MarkDerived(Node(i, d));
            }
            break;
          case Opcode::kDynamicSlice:
            for (int64_t d = 0; d < rank; ++d) {
              if (i->dynamic_slice_sizes[d] == old_[Node(operand(0), d)]) Unite(Node(operand(0), d), Node(i, d));
              else MarkDerived(Node(i, d));
            }
            break;
          case Opcode::kPad:
            for (int64_t d = 0; d < rank; ++d) {
              const PaddingDim& p = i->padding[d];
              if (p == PaddingDim{}) Unite(Node(operand(0), d), Node(i, d)); else MarkDerived(Node(i, d));
            }
            break;
          case Opcode::kReshape: {
            // Groups of dimensions whose products match; one-to-one groups of equal size are the same dimension.
            const Instruction* in = operand(0);
            for (const ReshapeGroup& g : ReshapeGroups(in, i)) {
              const int64_t a0 = g.a0, a = g.a, b0 = g.b0, b = g.b;
              int64_t long_outputs = 0;
              for (int64_t d = b0; d < b; ++d) long_outputs += old_[Node(i, d)] > 1;
              if (a - a0 == 1 && b - b0 == 1 && old_[Node(in, a0)] == old_[Node(i, b0)])
                Unite(Node(in, a0), Node(i, b0));
              else if (long_outputs <= 1)  // a merge: its size follows from its input's
                for (int64_t d = b0; d < b; ++d) MarkDerived(Node(i, d));
              // A split is not: how its growth is shared out waits for what else sizes its dimensions.
            }
            break;
          }
          case Opcode::kGather: {
            // The indices' index vector keeps its length (one entry per indexed operand dimension);
            // the output's batch dimensions are the indices' others, its offset dimensions the
            // operand's it takes whole.
            const GatherDimensionNumbers& g = i->gather_dims;
            const Instruction *operand_in = operand(0), *indices = operand(1);
            if (g.index_vector_dim >= 0 && g.index_vector_dim < Rank(indices)) Pin(Node(indices, g.index_vector_dim));
            std::vector<int64_t> batch_in, offset_in;
            for (int64_t d = 0; d < Rank(indices); ++d)
              if (d != g.index_vector_dim) batch_in.push_back(d);
            for (int64_t d = 0; d < Rank(operand_in); ++d)
              if (!Contains(g.collapsed_slice_dims, d) && !Contains(g.operand_batching_dims, d)) offset_in.push_back(d);
            size_t next_batch = 0, next_offset = 0;
            for (int64_t d = 0; d < rank; ++d) {
              if (Contains(g.offset_dims, d)) {
                const int64_t od = next_offset < offset_in.size() ? offset_in[next_offset++] : -1;
                if (od >= 0 && od < static_cast<int64_t>(i->gather_slice_sizes.size()) &&
                    i->gather_slice_sizes[od] == old_[Node(operand_in, od)])
                  Unite(Node(operand_in, od), Node(i, d));
                else
                  MarkDerived(Node(i, d));
              } else if (next_batch < batch_in.size()) {
                Unite(Node(indices, batch_in[next_batch++]), Node(i, d));
              } else {
                MarkDerived(Node(i, d));
              }
            }
            break;
          }
          case Opcode::kScatter: {
            // Inputs, indices, updates: the result is the inputs; the updates' scatter dimensions
            // are the indices' batch dimensions, their window dimensions the inputs' they cover whole.
            const ScatterDimensionNumbers& sd = i->scatter_dims;
            const int64_t inputs = (i->operand_count() - 1) / 2;
            if (inputs < 1) break;
            for (int64_t n = 0; n < Leaves(i) && n < inputs; ++n) UniteLeaf(operand(n), 0, i, n);
            const Instruction* indices = operand(inputs);
            if (sd.index_vector_dim >= 0 && sd.index_vector_dim < Rank(indices)) Pin(Node(indices, sd.index_vector_dim));
            std::vector<int64_t> batch_in, window_in;
            for (int64_t d = 0; d < Rank(indices); ++d)
              if (d != sd.index_vector_dim) batch_in.push_back(d);
            for (int64_t d = 0; d < Rank(operand(0)); ++d)
              if (!Contains(sd.inserted_window_dims, d) && !Contains(sd.input_batching_dims, d)) window_in.push_back(d);
            for (int64_t n = 0; n < inputs; ++n) {
              const Instruction* updates = operand(inputs + 1 + n);
              size_t next_batch = 0, next_window = 0;
              for (int64_t d = 0; d < Rank(updates); ++d) {
                if (Contains(sd.update_window_dims, d)) {
                  const int64_t od = next_window < window_in.size() ? window_in[next_window++] : -1;
                  if (od >= 0 && old_[Node(operand(0), od)] == old_[Node(updates, d)]) Unite(Node(operand(0), od), Node(updates, d));
                } else if (next_batch < batch_in.size()) {
                  Unite(Node(indices, batch_in[next_batch++]), Node(updates, d));
                }
              }
            }
            break;
          }
          case Opcode::kTuple:
            for (int64_t n = 0; n < i->operand_count(); ++n) UniteAll(operand(n), i, ElementLeaf(i->shape(), n));
            break;
          case Opcode::kGetTupleElement:
            UniteAll(i, operand(0), ElementLeaf(operand(0)->shape(), i->tuple_index));
            break;
          case Opcode::kWhile: {
            const Computation *cond = i->while_condition(), *body = i->while_body();
            UniteAll(i, operand(0));
            if (body) {
              UniteAll(body->parameter(0), i);
              UniteAll(body->root(), i);
            }
            if (cond) UniteAll(cond->parameter(0), i);
            break;
          }
          case Opcode::kCall:
            if (const Computation* callee = i->to_apply()) {
              for (int64_t n = 0; n < i->operand_count() && n < static_cast<int64_t>(callee->parameters().size()); ++n)
                UniteAll(callee->parameter(n), operand(n));
              UniteAll(callee->root(), i);
            }
            break;
          case Opcode::kConditional:
            for (size_t b = 0; b < i->called_computations().size(); ++b) {
              const Computation* branch = i->called_computations()[b];
              if (static_cast<int64_t>(b) + 1 < i->operand_count() && !branch->parameters().empty())
                UniteAll(branch->parameter(0), operand(static_cast<int64_t>(b) + 1));
              UniteAll(branch->root(), i);
            }
            break;
          case Opcode::kSort:
            for (int64_t n = 0; n < i->operand_count(); ++n) UniteLeaf(operand(n), 0, i, Leaves(i) > 1 ? n : 0);
            break;
          case Opcode::kDynamicUpdateSlice:
          case Opcode::kSelectAndScatter:
          case Opcode::kCopy:
          case Opcode::kReverse:
          case Opcode::kOptimizationBarrier:
            UniteAll(i, operand(0));
            break;
          case Opcode::kBitcastConvert:
            UniteLeaf(i, 0, operand(0), 0);
            break;
          case Opcode::kCustomCall:
            if (!IsPassThroughCall(*i))
              return Error(Where(*i) + ": custom-call \"" + i->custom_call_target +
                           "\" cannot be scaled (its result is not its one operand's shape: its size is its own)");
            UniteAll(i, operand(0));
            break;
          case Opcode::kGeneric:
            if (IsFusionLike(*i)) {
              const Computation* callee = FusedComputation(*i);
              if (!callee) return Error(Where(*i) + ": a fusion without its computation cannot be scaled");
              for (int64_t n = 0; n < i->operand_count() && n < static_cast<int64_t>(callee->parameters().size()); ++n)
                UniteAll(callee->parameter(n), operand(n));
              UniteAll(callee->root(), i);
              break;
            }
            return Error(Where(*i) + ": " + i->opcode_text() + " cannot be scaled");
          default:
            if (IsElementwise(op)) {
              for (int64_t n = 0; n < i->operand_count(); ++n) UniteLeaf(i, 0, operand(n), 0);
              break;
            }
            return Error(Where(*i) + ": " + std::string(OpcodeName(op)) +
                         " cannot be scaled (scale the unpartitioned module, before collectives are inserted)");
        }
      }
    return std::nullopt;
  }

  // ---- sizes, in an order where operands come first ----
  // Free dimensions (a parameter's, a broadcast's new ones): their class's size, else scaled when
  // nothing else will size it (no derived member in the class), or when forced.
  enum class Outcome { kDone, kDeferred };

  std::optional<int64_t> FreeSize(int64_t node, bool force) {
    const int64_t r = Find(node);
    if (value_[r]) return value_[r];
    if (pinned_[r]) return old_[node];
    if (derived_[r] && !force) return std::nullopt;
    if (auto f = factor_.find(r); f != factor_.end()) return old_[node] * f->second;  // the user's, for this class
    if (window_[r] && !extent_[r]) return old_[node];  // a weight's window; not an activation's extent
    if (opts_.shrink) return ShrunkSize(r, old_[node]);
    return old_[node] >= opts_.min_dim ? old_[node] * k_ : old_[node];
  }

  // A slice's or dynamic-slice's cut longer than its operand's shrunk dimension: that dimension
  // keeps its size on the next attempt.
  Error CutCannotShrink(const Instruction& i, const Instruction* in, int64_t d) {
    retry_pins_.push_back(Node(in, d));
    return Error(Where(i) + ": its cut of dimension " + std::to_string(d) + " does not shrink with the dimension (" +
                 std::to_string(old_[Node(in, d)]) + " -> " + std::to_string(in->shape().dim(d)) + ")");
  }

  // Shrinking: the tiles every tiled sharding splits a class's dimensions into (lcm), and whether
  // one splits them unevenly (then the class keeps its size).
  void TileRequirements() {
    tiles_.assign(old_.size(), 1);
    uneven_.assign(old_.size(), 0);
    for (const auto& c : m_.computations())
      for (const auto& owned : c->instructions()) {
        const Instruction* i = owned.get();
        if (!i->has_sharding() || !info_.count(i)) continue;
        const HloSharding& sh = *i->sharding();
        for (int64_t l = 0; l < Leaves(i); ++l) {
          const HloSharding* leaf = &sh;
          if (sh.IsTuple()) {
            if (l >= static_cast<int64_t>(sh.tuple_elements().size())) break;
            leaf = &sh.tuple_elements()[static_cast<size_t>(l)];
          }
          if (!leaf->IsTiled()) continue;
          for (int64_t d = 0; d < Rank(i, l); ++d) {
            const int64_t t = leaf->DimensionTiles(d);
            if (t <= 1) continue;
            const int64_t n = Node(i, d, l), r = Find(n);
            if (old_[n] % t != 0) uneven_[r] = 1;
            tiles_[r] = std::lcm(tiles_[r], t);
          }
        }
      }
  }

  int64_t ShrunkSize(int64_t root, int64_t was) const {
    if (was < opts_.min_dim || uneven_[root]) return was;
    const int64_t t = tiles_[root];
    if (was % t != 0) return was;
    // The smallest multiple of t dividing `was` that is at least min_dim.
    for (int64_t s = t; s < was; s += t)
      if (was % s == 0 && s >= opts_.min_dim) return s;
    return was;
  }

  // The ratio a dimension of an operand grew by (exact: every new size is old x k^e or fixed).
  struct Ratio {
    int64_t num = 1, den = 1;
  };
  static Ratio RatioOf(int64_t now, int64_t was) {
    if (was == 0) return {1, 1};
    const int64_t g = std::gcd(now, was);
    return {now / g, was / g};
  }
  static std::optional<int64_t> Scaled(int64_t x, Ratio r) {
    if ((x * r.num) % r.den != 0) return std::nullopt;
    return x * r.num / r.den;
  }

  Result<Outcome> Process(Instruction* i, bool force) {
    const Opcode op = i->opcode();
    Shape proposal = i->shape();
    auto set_free = [&](int64_t leaf, int64_t d) -> bool {
      Shape* s = LeafOf(proposal, leaf);
      auto v = FreeSize(Node(i, d, leaf), force);
      if (!v) return false;
      s->dims[d] = *v;
      return true;
    };
    auto all_free = [&]() -> bool {
      for (int64_t l = 0; l < Leaves(i); ++l)
        for (int64_t d = 0; d < Rank(i, l); ++d)
          if (!set_free(l, d)) return false;
      return true;
    };
    const Instruction* in = i->operand_count() > 0 ? i->operand(0) : nullptr;
    switch (op) {
      case Opcode::kParameter: case Opcode::kIota: case Opcode::kRng: case Opcode::kConstant:
        if (!all_free()) return Outcome::kDeferred;
        break;
      case Opcode::kBroadcast:
        for (int64_t d = 0; d < Rank(i); ++d) {
          auto it = std::find(i->dimensions.begin(), i->dimensions.end(), d);
          if (it != i->dimensions.end()) proposal.dims[d] = in->shape().dim(it - i->dimensions.begin());
          else if (!set_free(0, d)) return Outcome::kDeferred;
        }
        break;
      case Opcode::kReshape: {
        // Each group of dimensions takes what its input group grew by.
        for (const ReshapeGroup& group : ReshapeGroups(in, i)) {
          const int64_t a0 = group.a0, a = group.a, b0 = group.b0, b = group.b;
          for (int64_t d = b0; d < b && !force; ++d)
            if (!Value(Node(i, d)) && free_[Find(Node(i, d))] && !pinned_[Find(Node(i, d))]) return Outcome::kDeferred;
          int64_t grown_num = 1, grown_den = 1;
          for (int64_t d = a0; d < a; ++d) {
            grown_num *= in->shape().dim(d);
            grown_den *= old_[Node(in, d)];
          }
          const int64_t g = std::gcd(grown_num, grown_den);
          grown_num /= g, grown_den /= g;
          // Dimensions whose class already has a size keep it; the rest of the growth goes to the
          // major-most dimension long enough to be scaled (all of it to one: a split of B x S
          // grown k^2 by a merge of B and S gets it back on B and S when their classes say so).
          for (int64_t d = b0; d < b; ++d) {
            const int64_t v = pinned_[Find(Node(i, d))] ? old_[Node(i, d)] : Value(Node(i, d));
            if (v) {
              const Ratio r = RatioOf(v, old_[Node(i, d)]);
              grown_num *= r.den, grown_den *= r.num;
              const int64_t g2 = std::gcd(grown_num, grown_den);
              grown_num /= g2, grown_den /= g2;
              proposal.dims[d] = v;
            } else {
              proposal.dims[d] = old_[Node(i, d)];
            }
          }
          if (grown_num != grown_den) {
            int64_t target = -1;
            for (int64_t d = b0; d < b && target < 0; ++d)
              if (!Value(Node(i, d)) && !pinned_[Find(Node(i, d))] && old_[Node(i, d)] >= opts_.min_dim &&
                  Scaled(old_[Node(i, d)], {grown_num, grown_den}))
                target = d;
            for (int64_t d = b0; d < b && target < 0; ++d)
              if (!Value(Node(i, d)) && !pinned_[Find(Node(i, d))] && Scaled(old_[Node(i, d)], {grown_num, grown_den}))
                target = d;
            if (target < 0) {
              for (int64_t d = a0; d < a; ++d)
                if (in->shape().dim(d) != old_[Node(in, d)]) retry_pins_.push_back(Node(in, d));
              return Error(Where(*i) + ": the reshape of " + in->shape().ToString(false) +
                           " cannot share out its input's growth among its dimensions");
            }
            proposal.dims[target] = *Scaled(old_[Node(i, target)], {grown_num, grown_den});
          }
        }
        break;
      }
      case Opcode::kSlice: {
        for (int64_t d = 0; d < Rank(i); ++d) {
          const int64_t was = old_[Node(in, d)], now = in->shape().dim(d);
          int64_t& start = i->slice.starts[d];
          int64_t& limit = i->slice.limits[d];
          if (start == 0 && limit == was && i->slice.strides[d] == 1) {
            limit = now;
            continue;
          }
          const Ratio r = RatioOf(now, was);
          auto s = Scaled(start, r), l = Scaled(limit, r);
          // A cut shorter than min_dim (one layer of a stack) stays a cut of that many.
          if (s && l && i->slice.strides[d] == 1 && !pinned_[Find(Node(i, d))] && limit - start >= opts_.min_dim)
            start = *s, limit = *l;
          if (limit > now) return CutCannotShrink(*i, in, d);
        }
        auto inferred = InferShape(*i);
        if (!inferred.ok()) return Error(Where(*i) + ": " + inferred.error().message);
        proposal = *inferred;
        break;
      }
      case Opcode::kDynamicSlice: {
        for (int64_t d = 0; d < Rank(i); ++d) {
          const int64_t was = old_[Node(in, d)], now = in->shape().dim(d);
          int64_t& size = i->dynamic_slice_sizes[d];
          if (size == was) size = now;
          else if (auto s = Scaled(size, RatioOf(now, was)); s && !pinned_[Find(Node(i, d))] && size >= opts_.min_dim)
            size = *s;
          if (size > now) return CutCannotShrink(*i, in, d);
        }
        auto inferred = InferShape(*i);
        if (!inferred.ok()) return Error(Where(*i) + ": " + inferred.error().message);
        proposal = *inferred;
        break;
      }
      case Opcode::kGather: {
        for (size_t d = 0; d < i->gather_slice_sizes.size() && static_cast<int64_t>(d) < Rank(in); ++d)
          if (i->gather_slice_sizes[d] == old_[Node(in, static_cast<int64_t>(d))])
            i->gather_slice_sizes[d] = in->shape().dim(static_cast<int64_t>(d));
        auto inferred = InferShape(*i);
        if (!inferred.ok()) return Error(Where(*i) + ": " + inferred.error().message);
        proposal = *inferred;
        break;
      }
      case Opcode::kConvolution: {
        // The window is the kernel's spatial extent.
        const Instruction* kernel = i->operand(1);
        for (size_t j = 0; j < i->conv_dims.kernel_spatial.size() && j < i->window.dims.size(); ++j)
          i->window.dims[j].size = kernel->shape().dim(i->conv_dims.kernel_spatial[j]);
        if (i->feature_group_count != 1) {
          const int64_t features = in->shape().dim(i->conv_dims.input_feature);
          const int64_t per_group = kernel->shape().dim(i->conv_dims.kernel_input_feature);
          if (per_group > 0 && features % per_group == 0) i->feature_group_count = features / per_group;
        }
        auto inferred = InferShape(*i);
        if (!inferred.ok()) return Error(Where(*i) + ": " + inferred.error().message);
        proposal = *inferred;
        break;
      }
      case Opcode::kCustomCall:
      case Opcode::kGeneric:  // a Sharding custom-call or a fusion: as its operand / its computation's root
        if (op == Opcode::kCustomCall) {
          proposal = in->shape();
        } else {
          proposal = FusedComputation(*i)->root()->shape();
        }
        break;
      default: {
        auto inferred = InferShape(*i);
        if (!inferred.ok()) return Error(Where(*i) + ": " + inferred.error().message);
        proposal = *inferred;
      }
    }
    // The proposal against what the classes already say.
    // A dimension sized otherwise than its class says is a conflict: recorded (it keeps its size on
    // the next attempt) and the class's size used, so that one pass finds every such conflict (one
    // per layer of a 64-layer model) instead of one per attempt.
    for (int64_t l = 0; l < Leaves(i); ++l) {
      Shape* s = LeafOf(proposal, l);
      if (!s || (s->IsArray() ? s->rank() : 0) != Rank(i, l))
        return Error(Where(*i) + ": its shape would change rank when scaled (" + proposal.ToString(false) + ")");
      for (int64_t d = 0; d < Rank(i, l); ++d) {
        const int64_t n = Node(i, d, l), r = Find(n);
        if (value_[r] && value_[r] != s->dims[d]) {
          retry_pins_.push_back(n);
          conflicts_.push_back(Where(*i) + ": dimension " + std::to_string(d) + " would be " + std::to_string(s->dims[d]) +
                               " long, but it is the same dimension as one that is " + std::to_string(value_[r]) +
                               " long (from " + std::to_string(old_[n]) + ")");
          s->dims[d] = value_[r];
        }
        if (pinned_[r] && s->dims[d] != old_[n]) {
          // Derived from operand dimensions that grew: those of the same length keep it next time
          // (all that grew when none has its length).
          bool found = false;
          for (int pass = 0; pass < 2 && !found; ++pass)
            for (const Instruction* o : i->operands())
              for (int64_t ol = 0; ol < Leaves(o); ++ol)
                for (int64_t od = 0; od < Rank(o, ol); ++od) {
                  const int64_t on = Node(o, od, ol);
                  if (Value(on) != old_[on] && !pinned_[Find(on)] && (pass == 1 || old_[on] == old_[n])) {
                    retry_pins_.push_back(on);
                    found = true;
                  }
                }
          if (!found)
            return Error(Where(*i) + ": dimension " + std::to_string(d) + " must stay " + std::to_string(old_[n]) +
                         " long (a constant's data, or a convolution kernel's window, fixes it), but scaling makes it " +
                         std::to_string(s->dims[d]));
          conflicts_.push_back(Where(*i) + ": dimension " + std::to_string(d) + " must stay " + std::to_string(old_[n]) +
                               " long (a constant's data, or a convolution kernel's window, fixes it), but scaling makes it " +
                               std::to_string(s->dims[d]));
          s->dims[d] = old_[n];
        }
        value_[r] = s->dims[d];
      }
    }
    // Layouts are kept; only the dimensions change.
    Shape updated = i->shape();
    for (int64_t l = 0; l < Leaves(i); ++l) {
      Shape* to = LeafOf(updated, l);
      const Shape* from = LeafOf(proposal, l);
      if (to->IsArray()) to->dims = from->dims;
    }
    i->set_shape(std::move(updated));
    return Outcome::kDone;
  }

  static Shape* LeafOf(Shape& s, int64_t leaf) {
    int64_t index = leaf;
    return LeafAt(s, index);
  }

  // Callees right before the instruction that calls them (after its operands).
  void Order(const Computation* c, std::vector<Instruction*>& out, std::unordered_set<const Computation*>& seen) {
    if (!seen.insert(c).second) return;
    for (const auto& i : c->instructions()) {
      for (const Computation* callee : i->called_computations()) Order(callee, out, seen);
      out.push_back(i.get());
    }
  }

  std::optional<Error> Propagate() {
    std::vector<Instruction*> pending;
    std::unordered_set<const Computation*> seen;
    Order(m_.entry(), pending, seen);
    for (const auto& c : m_.computations()) Order(c.get(), pending, seen);  // not called from the entry
    std::unordered_set<const Instruction*> done;
    auto ready = [&](const Instruction* i) {
      for (const Instruction* o : i->operands())
        if (!done.count(o)) return false;
      for (const Computation* callee : i->called_computations())
        if (callee->root() && !done.count(callee->root())) return false;
      return true;
    };
    while (!pending.empty()) {
      std::vector<Instruction*> next;
      bool progress = false;
      for (Instruction* i : pending) {
        if (!ready(i)) {
          next.push_back(i);
          continue;
        }
        auto r = Process(i, /*force=*/false);
        if (!r.ok()) return r.error();
        if (*r == Outcome::kDeferred) {
          next.push_back(i);
          continue;
        }
        done.insert(i);
        progress = true;
      }
      if (!progress) {
        // Nothing else sizes the first waiting free dimension: scaled as a parameter's.
        Instruction* first = nullptr;
        for (Instruction* i : next)
          if (ready(i)) {
            first = i;
            break;
          }
        if (!first) return Error("scaling the module's dimensions: instructions wait on each other (a cycle?)");
        auto r = Process(first, /*force=*/true);
        if (!r.ok()) return r.error();
        done.insert(first);
        next.erase(std::find(next.begin(), next.end(), first));
      }
      pending = std::move(next);
    }
    return std::nullopt;
  }

  Module& m_;
  const int64_t k_;
  const ScaleDimsOptions opts_;
  std::unordered_map<const Instruction*, Info> info_;
  std::vector<int64_t> parent_, old_, value_;
  std::vector<char> pinned_, derived_, free_, window_, extent_;
  const std::vector<int64_t>& pins_;
  std::vector<int64_t> retry_pins_;
  std::vector<std::string> conflicts_;  // this attempt's, in order
  std::unordered_map<int64_t, int64_t> factor_;  // class root -> the user's factor
  std::vector<int64_t> tiles_;  // shrinking: per class root, the tiles its dimensions must divide into
  std::vector<char> uneven_;    // shrinking: per class root, split unevenly somewhere
};

}  // namespace

Result<std::vector<DimensionClass>> EntryParameterDimensionClasses(const Module& module) {
  if (!module.entry()) return Error("the module has no entry computation");
  auto copy = module.Clone();
  const std::vector<int64_t> no_pins;
  Scaler scaler(*copy, 1, ScaleDimsOptions{}, no_pins);
  return scaler.Classes();
}

Result<ScaledModule> ScaleModuleDims(const Module& module, int64_t k, const ScaleDimsOptions& options) {
  if (k < 1) return Error("the scale must be a whole number >= 1, not " + std::to_string(k));
  if (options.shrink && (k != 1 || !options.factors.empty()))
    return Error("shrinking takes no scale or factors (k = 1, no factors)");
  if (!module.entry()) return Error("the module has no entry computation");
  // Each failed attempt names the dimensions that keep their size on the next one (bounded: every
  // retry keeps at least one more class).
  std::vector<int64_t> pins;
  std::vector<std::string> kept_because;
  for (int attempt = 0;; ++attempt) {
    auto copy = module.Clone();
    Scaler scaler(*copy, k, options, pins);
    auto r = scaler.Run();
    if (r.ok()) {
      r->module = std::move(copy);
      r->kept_because = std::move(kept_because);
      r->attempts = attempt + 1;
      return r;
    }
    if (scaler.retry_pins().empty() || attempt >= 256) return r.error();
    if (scaler.conflicts().empty()) kept_because.push_back(r.error().message);
    kept_because.insert(kept_because.end(), scaler.conflicts().begin(), scaler.conflicts().end());
    pins.insert(pins.end(), scaler.retry_pins().begin(), scaler.retry_pins().end());
  }
}

}  // namespace shardscope
