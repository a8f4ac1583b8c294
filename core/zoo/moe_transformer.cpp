#include "core/zoo/moe_transformer.h"

#include <string>

#include "core/zoo/annotations.h"
#include "core/zoo/transformer.h"

namespace shardscope {

using namespace zoo;

std::string_view MoeAnnotationsName(MoeAnnotations a) {
  switch (a) {
    case MoeAnnotations::kNone: return "none";
    case MoeAnnotations::kGShard: return "gshard";
    case MoeAnnotations::kHybrid: return "hybrid";
  }
  return "none";
}

namespace {

constexpr int64_t X = 0, Y = 1, _ = -1;

// The MoE block's annotated tensors.
enum class MoeTensor : uint8_t {
  kInputs,      // GSM: the grouped tokens entering the gating and the dispatch
  kGatingW,     // ME
  kDispatchedG, // GECM: the dispatch einsum's result, by group
  kExpertIn,    // EGCM: the experts' inputs
  kWi,          // EMH
  kWo,          // EHM
  kHidden,      // EGCH
  kExpertOut,   // EGCM: the experts' outputs
  kOutByGroup,  // EGCM: the experts' outputs, by group (the combine einsum's operand)
  kCombined,    // GSM: the combined outputs
};

// The letters of each tensor's dims (GShard's names).
std::string_view MoeLetters(MoeTensor t) {
  switch (t) {
    case MoeTensor::kInputs: return "GSM";
    case MoeTensor::kGatingW: return "ME";
    case MoeTensor::kDispatchedG: return "GECM";
    case MoeTensor::kExpertIn: return "EGCM";
    case MoeTensor::kWi: return "EMH";
    case MoeTensor::kWo: return "EHM";
    case MoeTensor::kHidden: return "EGCH";
    case MoeTensor::kExpertOut: return "EGCM";
    case MoeTensor::kOutByGroup: return "EGCM";
    case MoeTensor::kCombined: return "GSM";
  }
  return "";
}

// GShard (1-D mesh X) and §5.5's hybrid (E on X, H on Y, dense layers as Table 1 "2D finalized").
Dims MoeMapping(MoeAnnotations set, MoeTensor t) {
  if (set == MoeAnnotations::kNone) return {};
  const bool hybrid = set == MoeAnnotations::kHybrid;
  switch (t) {
    case MoeTensor::kInputs: return {X, _, _};
    case MoeTensor::kGatingW: return {_, _};
    case MoeTensor::kDispatchedG: return {X, _, _, _};
    case MoeTensor::kExpertIn: return {X, _, _, _};
    case MoeTensor::kWi: return hybrid ? Dims{X, _, Y} : Dims{X, _, _};
    case MoeTensor::kWo: return hybrid ? Dims{X, Y, _} : Dims{X, _, _};
    case MoeTensor::kHidden: return hybrid ? Dims{X, _, _, Y} : Dims{X, _, _, _};
    case MoeTensor::kExpertOut: return hybrid ? Dims{X, _, _, Y} : Dims{X, _, _, _};
    case MoeTensor::kOutByGroup: return hybrid ? Dims{_, X, _, Y} : Dims{_, X, _, _};
    case MoeTensor::kCombined: return hybrid ? Dims{X, _, Y} : Dims{X, _, _};
  }
  return {};
}

// The dense layers' tensors: the batch split over the 1-D mesh and the weights replicated
// (GShard), or Table 1 "2D finalized" (hybrid).
Table1Policy DensePolicy(MoeAnnotations set) {
  if (set == MoeAnnotations::kNone) return {};
  if (set == MoeAnnotations::kHybrid) return [](Table1Tensor t) { return Table1DimsMapping(AnnotationSet::kFinalized, t); };
  return [](Table1Tensor t) -> Dims {
    switch (t) {
      case Table1Tensor::kWqkv: return {_, _, _};
      case Table1Tensor::kWo: return {_, _, _};
      case Table1Tensor::kWin: return {_, _};
      case Table1Tensor::kWout: return {_, _};
      case Table1Tensor::kBSM: return {X, _, _};
      case Table1Tensor::kBSND: return {X, _, _, _};
      case Table1Tensor::kBSH: return {X, _, _};
    }
    return {};
  };
}

struct MoeBlock {
  Weight* ln = nullptr;
  Weight* wg = nullptr;
  Weight* wi = nullptr;
  Weight* wo = nullptr;
  // Saved by the forward pass.
  NormSaved norm;
  Instruction *x = nullptr, *inputs = nullptr;
  Instruction *gates = nullptr, *mask1 = nullptr, *mask2 = nullptr, *density1 = nullptr;
  Instruction *gate1 = nullptr, *gate2 = nullptr, *kept1 = nullptr, *kept2 = nullptr, *denom = nullptr;
  // Per choice: the expert it keeps ([G,S,E] one-hot, 0 when dropped) and the token's slot in
  // it as a one-hot over C ([G,S,C]); backward contracts with them instead of keeping each
  // choice's [G,S,E,C] dispatch alive from the forward pass.
  Instruction *keep1 = nullptr, *keep2 = nullptr, *at1 = nullptr, *at2 = nullptr;
  Instruction *dispatch = nullptr, *combine = nullptr;
  Instruction *expert_in = nullptr, *hidden = nullptr, *relu = nullptr, *out_by_group = nullptr;
  Instruction* aux_loss = nullptr;  // f32 scalar
};

struct MoeDims {
  int64_t B, S, M, G, T, E, C;
};

class MoeBuilder {
 public:
  // `training`: the auxiliary loss is computed (a forward-only model has no loss).
  MoeBuilder(Net& net, Annotator& ann, MoeAnnotations set, const MoeDims& d, bool training)
      : net_(net), b_(net.b()), ann_(ann), set_(set), d_(d), training_(training),
        gating_type_(net.act() == PrimitiveType::kF64 ? PrimitiveType::kF64 : PrimitiveType::kF32) {}

  // Also names the tensor's dims with GShard's letters (frontend attribute shardscope.dims, read
  // by the teaching panel's all-to-all labels: partitioner/spmd/all_to_all_pieces.h).
  void Annotate(Instruction* i, MoeTensor t) {
    ann_.Apply(i, MoeMapping(set_, t));
    const std::string_view letters = MoeLetters(t);
    if (i && i->frontend_attributes.empty() && static_cast<int64_t>(letters.size()) == i->shape().rank()) {
      i->frontend_attributes = "shardscope.dims=\"" + std::string(letters) + "\"";
    }
  }

  // The first maximum's one-hot over E of `g` [G,T,E] (f32).
  Instruction* ArgMaxOneHot(Instruction* g, Instruction* iota_e, const std::string& name) {
    Instruction* mx = net_.MaxOver(g, {2});
    Instruction* is_max = b_.Compare(g, net_.Bcast(mx, g, {0, 1}), ComparisonDirection::kEq);
    Instruction* cand = b_.Select(is_max, iota_e, b_.FullLike(iota_e, static_cast<double>(d_.E)));
    Instruction* idx = net_.MinOver(cand, {2}, name + "_expert");
    return b_.Convert(b_.Compare(iota_e, net_.Bcast(idx, iota_e, {0, 1}), ComparisonDirection::kEq), gating_type_, name);
  }

  // Inclusive running count over the tokens (dim 1) of `mask` [G,T,E]: a product with the
  // lower-triangular matrix of ones (how GShard's TPU code takes cumulative sums).
  Instruction* CumSumTokens(Instruction* mask, const std::string& name) {
    if (!tri_) {
      const Shape s(gating_type_, {d_.T, d_.T});
      tri_ = b_.Convert(b_.Compare(b_.Iota(s, 0), b_.Iota(s, 1), ComparisonDirection::kLe), gating_type_,
                        "token_order");  // [t', t] = t' <= t
    }
    Instruction* c = net_.Dot(mask, tri_, {}, {}, {1}, {0});  // [G,E,T]
    return b_.Transpose(c, {0, 2, 1}, name);
  }

  // One choice's dispatch [G,T,E,C]: its kept expert [G,T,E] times its slot [G,T,C].
  Instruction* Place(Instruction* keep, Instruction* at, const std::string& name) {
    const Dims gtec = {d_.G, d_.T, d_.E, d_.C};
    return b_.Mul(b_.Broadcast(keep, gtec, {0, 1, 2}), b_.Broadcast(at, gtec, {0, 1, 3}), name);
  }

  // Top-2 gating of `logits` [G,T,E] (f32): fills the block's gating tensors.
  void Gating(MoeBlock& k, Instruction* logits) {
    const PrimitiveType F = gating_type_;
    const Shape gte(F, {d_.G, d_.T, d_.E});
    Instruction* mx = net_.MaxOver(logits, {2}, "max");
    Instruction* e = b_.Exp(b_.Sub(logits, net_.Bcast(mx, logits, {0, 1})), "exp");
    k.gates = b_.Div(e, net_.Bcast(net_.Sum(e, {2}), e, {0, 1}), "gates");
    Instruction* iota_e = b_.Iota(gte, 2, "expert_index");
    k.mask1 = ArgMaxOneHot(k.gates, iota_e, "first");
    Instruction* rest = b_.Select(b_.Compare(k.mask1, b_.FullLike(k.mask1, 0), ComparisonDirection::kGt),
                                  b_.FullLike(k.gates, -1), k.gates, "other_gates");
    k.mask2 = ArgMaxOneHot(rest, iota_e, "second");
    k.gate1 = net_.Sum(b_.Mul(k.gates, k.mask1), {2}, "gate1");
    k.gate2 = net_.Sum(b_.Mul(k.gates, k.mask2), {2}, "gate2");
    if (training_) {
      // Auxiliary load-balancing loss.
      const double inv_t = 1.0 / static_cast<double>(d_.T);
      k.density1 = net_.Scale(net_.Sum(k.mask1, {1}), inv_t, "density");            // c_e / S, [G,E]
      Instruction* proxy = net_.Scale(net_.Sum(k.gates, {1}), inv_t, "mean_gates");  // m_e, [G,E]
      k.aux_loss = net_.Scale(net_.Sum(b_.Mul(k.density1, proxy), {0, 1}), 1.0 / static_cast<double>(d_.G * d_.E),
                              "aux_loss");
    }
    // Capacity: positions in token order, first choices before second choices.
    Instruction* cap = b_.FullLike(k.mask1, static_cast<double>(d_.C));
    Instruction* cum1 = CumSumTokens(k.mask1, "position1");
    Instruction* keep1 = b_.Mul(k.mask1, b_.Convert(b_.Compare(cum1, cap, ComparisonDirection::kLe), F), "keep1");
    Instruction* count1 = net_.Sum(keep1, {1}, "count1");  // [G,E]
    Instruction* cum2 = b_.Add(CumSumTokens(k.mask2, "running2"), net_.Bcast(count1, k.mask2, {0, 2}), "position2");
    Instruction* keep2 = b_.Mul(k.mask2, b_.Convert(b_.Compare(cum2, cap, ComparisonDirection::kLe), F), "keep2");
    k.kept1 = net_.Sum(keep1, {2}, "kept1");  // [G,T]: 1 when the first choice has room
    k.kept2 = net_.Sum(keep2, {2}, "kept2");
    Instruction* one = b_.FullLike(cum1, 1.0);
    Instruction* slot1 = net_.Sum(b_.Mul(b_.Sub(cum1, one), keep1), {2}, "slot1");  // [G,T]
    Instruction* slot2 = net_.Sum(b_.Mul(b_.Sub(cum2, one), keep2), {2}, "slot2");
    k.denom = b_.Add(b_.Add(k.gate1, k.gate2), b_.FullLike(k.gate1, 1e-9), "gate_sum");
    Instruction* w1 = b_.Div(b_.Mul(k.gate1, k.kept1), k.denom, "weight1");
    Instruction* w2 = b_.Div(b_.Mul(k.gate2, k.kept2), k.denom, "weight2");
    Instruction* iota_c = b_.Iota(Shape(F, {d_.G, d_.T, d_.C}), 2, "capacity_index");
    auto slot_one_hot = [&](Instruction* slot, const std::string& n) {
      return b_.Convert(b_.Compare(iota_c, net_.Bcast(slot, iota_c, {0, 1}), ComparisonDirection::kEq), F, n);
    };
    k.keep1 = keep1;
    k.keep2 = keep2;
    k.at1 = slot_one_hot(slot1, "slot1_one_hot");
    k.at2 = slot_one_hot(slot2, "slot2_one_hot");
    Instruction* disp1 = Place(k.keep1, k.at1, "dispatch1");
    Instruction* disp2 = Place(k.keep2, k.at2, "dispatch2");
    const bool f32 = net_.act() == F;  // the gating's own type
    Instruction* dispatch = b_.Add(disp1, disp2, f32 ? "dispatch_mask" : "dispatch_mask_f32");
    const Dims gtec = {d_.G, d_.T, d_.E, d_.C};
    Instruction* combine = b_.Add(b_.Mul(b_.Broadcast(w1, gtec, {0, 1}), disp1),
                                  b_.Mul(b_.Broadcast(w2, gtec, {0, 1}), disp2),
                                  f32 ? "combine_weights" : "combine_weights_f32");
    k.dispatch = net_.ToType(dispatch, net_.act(), "dispatch_mask");
    k.combine = net_.ToType(combine, net_.act(), "combine_weights");
  }

  // x + MoE(LN(x)) for x [B,seq,M].
  Instruction* Forward(MoeBlock& k, Instruction* x) {
    k.x = x;
    Instruction* h = nullptr;
    {
      auto s = b_.Scope("ln2");
      h = PreNorm(net_, k.ln, x, &k.norm);
    }
    Instruction* y = nullptr;
    {
      auto s = b_.Scope("moe");
      k.inputs = b_.Reshape(h, {d_.G, d_.T, d_.M}, "inputs");
      Annotate(k.inputs, MoeTensor::kInputs);
      {
        auto sg = b_.Scope("gating");
        Instruction* logits = net_.Dot(k.inputs, k.wg->value, {}, {}, {2}, {0}, "logits");  // [G,T,E]
        Gating(k, net_.ToType(logits, gating_type_, "logits_f32"));
      }
      Instruction* disp_g = net_.Dot(k.dispatch, k.inputs, {0}, {0}, {1}, {1}, "dispatched_by_group");  // [G,E,C,M]
      Annotate(disp_g, MoeTensor::kDispatchedG);
      k.expert_in = b_.Transpose(disp_g, {1, 0, 2, 3}, "dispatched");  // [E,G,C,M]
      Annotate(k.expert_in, MoeTensor::kExpertIn);
      Instruction* out = nullptr;
      {
        auto se = b_.Scope("experts");
        k.hidden = net_.Dot(k.expert_in, k.wi->value, {0}, {0}, {3}, {1}, "wi");  // [E,G,C,H]
        Annotate(k.hidden, MoeTensor::kHidden);
        k.relu = net_.Relu(k.hidden, "relu");
        out = net_.Dot(k.relu, k.wo->value, {0}, {0}, {3}, {1}, "wo");  // [E,G,C,M]
        Annotate(out, MoeTensor::kExpertOut);
      }
      k.out_by_group = b_.Copy(out, "expert_outputs_by_group");
      Annotate(k.out_by_group, MoeTensor::kOutByGroup);
      Instruction* combined = net_.Dot(k.combine, k.out_by_group, {0}, {1}, {2, 3}, {0, 2}, "combined");  // [G,T,M]
      Annotate(combined, MoeTensor::kCombined);
      y = b_.Reshape(combined, {d_.B, d_.S, d_.M}, "output");
    }
    return b_.Add(x, y, "residual2");
  }

  // The gradient with respect to the block's input, given that of its output; `aux_weight` scales
  // the auxiliary loss's gradient.
  Instruction* Backward(MoeBlock& k, Instruction* dy, double aux_weight) {
    const PrimitiveType F = gating_type_;
    Instruction* dxg = nullptr;
    {
      auto s = b_.Scope("moe");
      Instruction* dyg = b_.Reshape(dy, {d_.G, d_.T, d_.M}, "dcombined");
      Annotate(dyg, MoeTensor::kCombined);
      Instruction* dcombine = net_.Dot(dyg, k.out_by_group, {0}, {1}, {2}, {3}, "dcombine_weights");  // [G,T,E,C]
      Instruction* dout_g = b_.Transpose(net_.Dot(k.combine, dyg, {0}, {0}, {1}, {1}), {1, 0, 2, 3},
                                         "dexpert_outputs_by_group");  // [E,G,C,M]
      Annotate(dout_g, MoeTensor::kOutByGroup);
      Instruction* dout = b_.Copy(dout_g, "dexpert_outputs");
      Annotate(dout, MoeTensor::kExpertOut);
      Instruction* din = nullptr;
      {
        auto se = b_.Scope("experts");
        AccumulateGrad(b_, &k.wo->grad, net_.Dot(k.relu, dout, {0}, {0}, {1, 2}, {1, 2}, "dwo"));  // [E,H,M]
        Instruction* drelu = net_.Dot(dout, k.wo->value, {0}, {0}, {3}, {2}, "drelu");             // [E,G,C,H]
        Instruction* dhidden = net_.ReluGrad(k.hidden, drelu, "dhidden");
        Annotate(dhidden, MoeTensor::kHidden);
        AccumulateGrad(b_, &k.wi->grad, net_.Dot(k.expert_in, dhidden, {0}, {0}, {1, 2}, {1, 2}, "dwi"));  // [E,M,H]
        din = net_.Dot(dhidden, k.wi->value, {0}, {0}, {3}, {2}, "ddispatched");  // [E,G,C,M]
        Annotate(din, MoeTensor::kExpertIn);
      }
      Instruction* din_g = b_.Transpose(din, {1, 0, 2, 3}, "ddispatched_by_group");  // [G,E,C,M]
      Annotate(din_g, MoeTensor::kDispatchedG);
      Instruction* dx_dispatch = net_.Dot(k.dispatch, din_g, {0}, {0}, {2, 3}, {1, 2}, "dinputs_dispatch");  // [G,T,M]
      Instruction* dlogits = nullptr;
      {
        auto sg = b_.Scope("gating");
        Instruction* dc = net_.ToType(dcombine, F, "dcombine_f32");
        // combine = w1 disp1 + w2 disp2, w_i = gate_i kept_i / (gate1 + gate2 + eps).
        // d w_i = sum over E, C of dcombine * dispatch_i: the slot one-hot contracted first (a
        // product per token, no [G,S,E,C] tensor of forward values), then the kept expert.
        auto dweight = [&](Instruction* keep, Instruction* at, Instruction* kept, const std::string& n) {
          Instruction* per_expert = net_.Dot(dc, at, {0, 1}, {0, 1}, {3}, {2});  // [G,T,E]
          return b_.Mul(net_.Sum(b_.Mul(per_expert, keep), {2}), kept, n);
        };
        Instruction* a1 = dweight(k.keep1, k.at1, k.kept1, "dweight1");
        Instruction* a2 = dweight(k.keep2, k.at2, k.kept2, "dweight2");
        Instruction* both = b_.Div(b_.Add(b_.Mul(a1, k.gate1), b_.Mul(a2, k.gate2)), b_.Mul(k.denom, k.denom));
        Instruction* dg1 = b_.Sub(b_.Div(a1, k.denom), both, "dgate1");
        Instruction* dg2 = b_.Sub(b_.Div(a2, k.denom), both, "dgate2");
        Instruction* dgates = b_.Add(b_.Mul(net_.Bcast(dg1, k.gates, {0, 1}), k.mask1),
                                     b_.Mul(net_.Bcast(dg2, k.gates, {0, 1}), k.mask2));
        // d l_aux / d gates[g,t,e] = density1[g,e] / (G E T).
        const double aux_scale = aux_weight / static_cast<double>(d_.G * d_.E * d_.T);
        dgates = b_.Add(dgates, net_.Scale(net_.Bcast(k.density1, k.gates, {0, 2}), aux_scale), "dgates");
        Instruction* dot = net_.Sum(b_.Mul(dgates, k.gates), {2});
        Instruction* dl = b_.Mul(k.gates, b_.Sub(dgates, net_.Bcast(dot, dgates, {0, 1})), "dlogits_f32");
        dlogits = net_.ToType(dl, net_.act(), "dlogits");
        AccumulateGrad(b_, &k.wg->grad, net_.Dot(k.inputs, dlogits, {}, {}, {0, 1}, {0, 1}, "dwg"));  // [M,E]
      }
      Instruction* dx_gate = net_.Dot(dlogits, k.wg->value, {}, {}, {2}, {1}, "dinputs_gating");  // [G,T,M]
      dxg = b_.Add(dx_dispatch, dx_gate, "dinputs");
      Annotate(dxg, MoeTensor::kInputs);
    }
    Instruction* dh = b_.Reshape(dxg, {d_.B, d_.S, d_.M}, "dh2");
    if (k.ln) {
      auto s = b_.Scope("ln2");
      dh = PreNormBackward(net_, k.ln, k.norm, dh);
    }
    return b_.Add(dy, dh, "dresidual1");
  }

 private:
  Net& net_;
  Builder& b_;
  Annotator& ann_;
  MoeAnnotations set_;
  MoeDims d_;
  bool training_;
  PrimitiveType gating_type_;  // f32 (GShard), f64 when the activations are
  Instruction* tri_ = nullptr;
};

struct Layer {
  AttentionBlock attention;
  bool moe = false;
  FfnBlock ffn;
  MoeBlock experts;
};

}  // namespace

Result<DeviceMesh> MoeMesh(const MoeTransformerConfig& c) {
  if (c.mesh_x < 1 || c.mesh_y < 1) return Error("mesh_x and mesh_y must be >= 1");
  if (c.annotations == MoeAnnotations::kGShard) {
    if (c.mesh_y != 1)
      return Error("the gshard annotations shard on a 1-D mesh: set mesh_y=1 (mesh_x devices), or use annotations=hybrid");
    return DeviceMesh({{"X", c.mesh_x}});
  }
  return DeviceMesh({{"X", c.mesh_x}, {"Y", c.mesh_y}});
}

Result<std::unique_ptr<Module>> BuildMoeTransformer(const MoeTransformerConfig& c) {
  if (Status s = CheckPositive({{"batch", c.batch}, {"seq", c.seq}, {"model", c.model}, {"heads", c.heads},
                                {"head_dim", c.head_dim}, {"hidden", c.hidden}, {"experts", c.experts},
                                {"layers", c.layers}, {"mesh_x", c.mesh_x}, {"mesh_y", c.mesh_y}});
      !s.ok())
    return s.error();
  if (c.layers > 4096) return Error("layers = " + std::to_string(c.layers) + " is too many (limit 4096)");
  if (c.experts < 2) return Error("top-2 gating needs experts >= 2");
  if (c.groups < 0 || c.capacity < 0) return Error("groups and capacity must be >= 0 (0: the default)");
  const int64_t G = c.groups > 0 ? c.groups : c.mesh_x;
  if (c.batch % G != 0)
    return Error("batch = " + std::to_string(c.batch) + " must be a multiple of the groups G = " + std::to_string(G));
  const int64_t T = c.batch / G * c.seq;
  const int64_t C = c.capacity > 0 ? c.capacity : (2 * T + c.experts - 1) / c.experts;
  if (c.annotations != MoeAnnotations::kNone) {
    if (c.experts % c.mesh_x != 0)
      return Error("experts = " + std::to_string(c.experts) + " must be a multiple of mesh_x = " + std::to_string(c.mesh_x) +
                   " (the experts are split over X)");
    if (G % c.mesh_x != 0)
      return Error("groups = " + std::to_string(G) + " must be a multiple of mesh_x = " + std::to_string(c.mesh_x));
  }
  if (Status s = CheckElementCount({{G, T, c.experts, C}, {c.experts, G, C, c.hidden}, {c.batch, c.heads, c.seq, c.seq},
                                    {T, T}, {c.experts, c.model, c.hidden}});
      !s.ok())
    return s.error();
  if (Status s = CheckTrainingParameters(c); !s.ok()) return s.error();
  Result<DeviceMesh> mesh_or = MoeMesh(c);
  if (!mesh_or.ok()) return mesh_or.error();
  const DeviceMesh mesh = *mesh_or;

  const int64_t B = c.batch, S = c.seq, M = c.model, N = c.heads, D = c.head_dim, H = c.hidden, E = c.experts;
  const PrimitiveType P = c.param_type, A = c.act_type;
  const PrimitiveType F = A == PrimitiveType::kF64 ? A : PrimitiveType::kF32;  // the gating's type
  auto module = std::make_unique<Module>(c.layers == 1 ? "moe_layer" : "moe_transformer");
  module->num_partitions = c.mesh_x * c.mesh_y;
  Module& m = *module;
  ScalarAdd(m, A);
  ScalarMax(m, A);
  ScalarAdd(m, F);
  ScalarMax(m, F);
  ScalarMin(m, F);
  if (P != A && P != F) ScalarAdd(m, P);
  Builder b(m.AddComputation("main", /*is_entry=*/true));
  b.set_scoped_names(true);
  Net net(m, b, A);
  Annotator ann(b, DensePolicy(c.annotations), mesh);
  MoeBuilder moe(net, ann, c.annotations, MoeDims{B, S, M, G, T, E, C}, c.backward);

  int64_t pn = 0;
  Instruction* x = b.Parameter(pn++, Shape(A, {B, S, M}), "x");
  Instruction* target = c.backward ? b.Parameter(pn++, Shape(A, {B, S, M}), "target") : nullptr;
  std::vector<Weight> weights;
  weights.reserve(static_cast<size_t>(c.layers) * 7);
  std::vector<Layer> layers(static_cast<size_t>(c.layers));
  for (int64_t l = 0; l < c.layers; ++l) {
    Layer& L = layers[static_cast<size_t>(l)];
    L.moe = c.all_moe || l % 2 == 1;
    const WeightAdder add = MakeWeightAdder(b, weights, "layer" + std::to_string(l), &pn);
    AddAttentionWeights(add, P, M, N, D, c.layernorm, &L.attention);
    AnnotateAttentionWeights(ann, L.attention);
    if (!L.moe) {
      AddFfnWeights(add, P, M, H, c.layernorm, &L.ffn);
      AnnotateFfnWeights(ann, L.ffn);
      continue;
    }
    MoeBlock& k = L.experts;
    if (c.layernorm) k.ln = add("ln2_scale", "ln2", Shape(P, {M}));
    k.wg = add("wg", "moe/gating", Shape(P, {M, E}));
    k.wi = add("expert_wi", "moe/experts", Shape(P, {E, M, H}));
    k.wo = add("expert_wo", "moe/experts", Shape(P, {E, H, M}));
    moe.Annotate(k.wg->param, MoeTensor::kGatingW);
    moe.Annotate(k.wi->param, MoeTensor::kWi);
    moe.Annotate(k.wo->param, MoeTensor::kWo);
  }
  AddOptimizerState(b, weights, c.optimizer, &pn);
  b.PushScope("forward", /*in_names=*/false);  // op_name forward/..., names unchanged
  CastWeights(net, weights);

  Instruction* h = x;
  std::vector<Instruction*> layer_inputs(static_cast<size_t>(c.layers));  // what remat keeps
  for (int64_t l = 0; l < c.layers; ++l) {
    Layer& L = layers[static_cast<size_t>(l)];
    auto scope = b.Scope("layer" + std::to_string(l));
    ann.Table1(h, Table1Tensor::kBSM);
    layer_inputs[static_cast<size_t>(l)] = h;
    h = AttentionForward(net, ann, L.attention, h);
    h = L.moe ? moe.Forward(L.experts, h) : FfnForward(net, ann, L.ffn, h);
  }
  b.PopScope();  // forward
  if (!c.backward) {
    b.SetRoot(h);
    if (!b.ok()) return b.status().error();
    return module;
  }

  auto [mse, dh] = MseLoss(net, h, target);
  Instruction* loss = mse;
  {
    auto s = b.Scope("loss");
    Instruction* aux = nullptr;
    for (Layer& L : layers)
      if (L.moe) AccumulateGrad(b, &aux, L.experts.aux_loss);
    if (aux) loss = b.Add(mse, net.ToType(net.Scale(aux, c.aux_loss_weight), A), "total");
  }
  for (int64_t l = c.layers - 1; l >= 0; --l) {
    Layer& L = layers[static_cast<size_t>(l)];
    auto bwd = b.Scope("backward/layer" + std::to_string(l));
    // Rematerialisation: the layer's forward runs again from its input, here, so the backward reads
    // values made just before it instead of the forward pass's (those die with the forward). Same
    // weights, same annotations; the recomputed auxiliary loss has no user.
    Layer again = L;
    if (c.remat) {
      auto rs = b.Scope("remat");
      // As TensorFlow's recompute_grad (GShard's Lingvo): the recomputation waits for the gradient
      // arriving at this layer (an optimization barrier over the layer's input and that gradient),
      // so no schedule can run it before the backward pass gets here.
      Instruction* tied = b.OptimizationBarrier(b.Tuple({layer_inputs[static_cast<size_t>(l)], dh}), "barrier");
      Instruction* input = b.GetTupleElement(tied, 0, "input");
      dh = b.GetTupleElement(tied, 1, "dh");
      Instruction* mid = AttentionForward(net, ann, again.attention, input);
      if (again.moe) moe.Forward(again.experts, mid);
      else FfnForward(net, ann, again.ffn, mid);
    }
    Layer& saved = c.remat ? again : L;
    dh = saved.moe ? moe.Backward(saved.experts, dh, c.aux_loss_weight) : FfnBackward(net, saved.ffn, dh);
    dh = AttentionBackward(net, saved.attention, dh);
  }
  FinishGradients(net, weights, P);
  b.SetRoot(MakeRoot(net, loss, weights, c.optimizer, c.learning_rate));
  if (!b.ok()) return b.status().error();
  return module;
}

// ---- registry entries --------------------------------------------------------------------------------------

namespace {

std::vector<ZooParameter> MoeParameters(int64_t layers, bool backward, const char* optimizer, const char* pattern) {
  return WithCommonParameters({
      {"batch", "8", "B: batch size (sequences)"},
      {"seq", "16", "tokens per sequence"},
      {"model", "32", "M: model dimension"},
      {"heads", "4", "N: attention heads"},
      {"head_dim", "8", "D: dimension per head"},
      {"hidden", "64", "H: feed-forward hidden dimension (per expert)"},
      {"experts", "4", "E: experts per MoE layer"},
      {"layers", std::to_string(layers), "number of Transformer layers"},
      {"moe_layers", pattern, "alternate (every other layer is MoE, GShard) | all"},
      {"groups", "0", "G: token groups for local dispatch (0: one per device along X)"},
      {"capacity", "0", "C: tokens per expert per group (0: 2N/(G*E), GShard)"},
      {"aux_loss_weight", "0.01", "weight of the load-balancing loss"},
      {"remat", "0", "recompute each layer's forward in the backward pass from the layer's input (0 | 1)"},
      {"layernorm", "1", "pre-norm LayerNorm before attention and feed-forward (0 | 1)"},
      {"backward", backward ? "1" : "0", "add the loss and the backward pass (0 | 1)"},
      {"optimizer", optimizer, "weight update after backward: none | sgd | adam | lars"},
      {"annotations", "gshard", "gshard (1-D mesh: E in MoE layers, batch elsewhere) | hybrid (E on X, H and N on Y, "
                                "dense layers as Table 1) | none"},
      {"mesh_x", "4", "mesh axis X size"},
      {"mesh_y", "1", "mesh axis Y size (1 for gshard)"},
  });
}

bool ReadConfig(ZooParams& p, MoeTransformerConfig& c) {
  c.batch = p.Int("batch");
  c.seq = p.Int("seq");
  c.model = p.Int("model");
  c.heads = p.Int("heads");
  c.head_dim = p.Int("head_dim");
  c.hidden = p.Int("hidden");
  c.experts = p.Int("experts");
  c.layers = p.Int("layers");
  c.all_moe = p.Choice("moe_layers", {"alternate", "all"}) == "all";
  c.groups = p.Int("groups");
  c.capacity = p.Int("capacity");
  c.aux_loss_weight = p.Real("aux_loss_weight");
  c.remat = p.Bool("remat");
  c.layernorm = p.Bool("layernorm");
  ReadTrainingParameters(p, c);
  const std::string set = p.Choice("annotations", {"gshard", "hybrid", "none"});
  c.annotations = set == "gshard" ? MoeAnnotations::kGShard : set == "hybrid" ? MoeAnnotations::kHybrid : MoeAnnotations::kNone;
  return p.ok();
}

Result<std::unique_ptr<Module>> BuildFromParams(ZooParams& p) {
  MoeTransformerConfig c;
  if (!ReadConfig(p, c)) return Error(p.error());
  return BuildMoeTransformer(c);
}

Result<DeviceMesh> MeshFromParams(ZooParams& p) {
  MoeTransformerConfig c;
  if (!ReadConfig(p, c)) return Error(p.error());
  return MoeMesh(c);
}

}  // namespace

void AddMoeTransformerModels(std::vector<ZooModel>& models) {
  models.push_back({"moe-layer",
                    "One sparse MoE Transformer layer (GShard: top-2 gating, dispatch and combine einsums, E experts), "
                    "forward; E split over a 1-D mesh (GSPMD Figure 8a) or the hybrid 2-D sharding (Figure 8b)",
                    MoeParameters(1, false, "none", "all"), &BuildFromParams, &MeshFromParams});
  models.push_back({"moe-transformer",
                    "GShard MoE Transformer training step: dense and MoE layers alternating, load-balancing loss, "
                    "backward and Adam (GSPMD §5.4 Table 6; hybrid §5.5 Table 7)",
                    MoeParameters(2, true, "adam", "alternate"), &BuildFromParams, &MeshFromParams});
}

}  // namespace shardscope
