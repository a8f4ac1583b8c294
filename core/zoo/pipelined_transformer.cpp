#include "core/zoo/pipelined_transformer.h"

#include <memory>
#include <string>

#include "core/sharding/mesh.h"
#include "core/zoo/transformer.h"

namespace shardscope {

using namespace zoo;

std::string_view PipelineScheduleName(PipelineSchedule s) {
  return s == PipelineSchedule::kCircular ? "circular" : "gpipe";
}

int64_t PipelinedLayerIndex(const PipelinedTransformerConfig& c, int64_t stage, int64_t slot) {
  const int64_t R = c.stages > 0 ? c.layers / c.stages : 0;
  return c.schedule == PipelineSchedule::kCircular ? slot * c.stages + stage : stage * R + slot;
}

int64_t PipelineIterations(const PipelinedTransformerConfig& c) {
  const int64_t R = c.stages > 0 ? c.layers / c.stages : 0;
  return (c.schedule == PipelineSchedule::kCircular ? c.microbatches * R : c.microbatches) + c.stages - 1;
}

namespace {

// ---- the weights of a layer -------------------------------------------------------------------------

enum Kind : int { kLn1, kWqkv, kWo, kLn2, kWi, kWout, kNumKinds };
constexpr const char* kKindName[kNumKinds] = {"ln1_scale", "wqkv", "wo", "ln2_scale", "wi", "wout"};
constexpr const char* kKindScope[kNumKinds] = {"ln1", "attention", "attention", "ln2", "ffn", "ffn"};

// The (L, X, Y) mesh's axes.
constexpr int64_t kAxisL = 0, kAxisX = 1, kAxisY = 2;

struct Sizes {
  int64_t L, N, mb, S, M, Nh, D, H, R, T;
  Dims Weight(int k) const {
    switch (k) {
      case kLn1: case kLn2: return {M};
      case kWqkv: return {3, M, Nh, D};
      case kWo: return {Nh, D, M};
      case kWi: return {M, H};
      default: return {H, M};
    }
  }
  Dims Act() const { return {mb, S, M}; }
};

Dims Cat(Dims a, const Dims& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Dims Zeros(size_t n) { return Dims(n, 0); }

// Everything the builders below share.
struct Pipeline {
  const PipelinedTransformerConfig& c;
  Sizes z;
  Module& m;
  DeviceMesh mesh;
  PrimitiveType A;
  bool circular;

  // A Table 1 column's dims mapping on this mesh: X -> the X axis (dropped for weights: X is data
  // parallelism here, GSPMD §5.2), Y -> the Y axis.
  Dims Mapped(Table1Tensor t, const std::function<Dims(const Dims&)>& expand, bool weight) const {
    Dims m = Table1DimsMapping(c.annotations, t);
    if (m.empty()) return m;
    if (expand) m = expand(m);
    for (int64_t& v : m) {
      if (v == 0) v = weight ? -1 : kAxisX;
      else if (v == 1) v = kAxisY;
    }
    return m;
  }
  // [L, mb, S, M]-shaped values: stage on L, the rest as Table 1's BSM.
  Dims StageBsm() const { return Cat({kAxisL}, Mapped(Table1Tensor::kBSM, nullptr, false)); }
  // Mapping of a stacked weight [L, R, ...].
  Dims StackedWeight(int k) const {
    switch (k) {
      case kWqkv:
        return Cat({kAxisL, -1}, Mapped(Table1Tensor::kWqkv, [](const Dims& d) { return Dims{-1, d[0], d[1], d[2]}; }, true));
      case kWo: return Cat({kAxisL, -1}, Mapped(Table1Tensor::kWo, nullptr, true));
      case kWi: return Cat({kAxisL, -1}, Mapped(Table1Tensor::kWin, nullptr, true));
      case kWout: return Cat({kAxisL, -1}, Mapped(Table1Tensor::kWout, nullptr, true));
      default: return {kAxisL, -1, -1};
    }
  }
  bool has(int k) const { return c.layernorm || (k != kLn1 && k != kLn2); }
  // Table 1's activation annotations on this mesh (nullptr without annotations).
  Table1Policy ActivationPolicy() const {
    if (c.annotations == AnnotationSet::kNone) return nullptr;
    return [this](Table1Tensor t) { return Mapped(t, nullptr, false); };
  }
  // The annotator of a builder: Table 1 on X / Y behind the stage axis L.
  Annotator MakeAnnotator(Builder& b) const {
    Annotator a(b, ActivationPolicy(), mesh);
    a.set_prefix_axes({kAxisL});
    return a;
  }
};

// A while loop under construction: the condition (i < trip count, i the first element) and a body
// builder whose inputs are the loop-carried values.
struct Loop {
  Computation* body = nullptr;
  Computation* cond = nullptr;
  std::unique_ptr<Builder> b;
  std::vector<Instruction*> in;  // the body's view of each carried value
};

Loop MakeLoop(Pipeline& p, const std::string& name, const std::vector<Instruction*>& init,
              const std::vector<std::string>& names, int64_t trips) {
  Loop l;
  std::vector<Shape> shapes;
  for (Instruction* i : init) shapes.push_back(i ? i->shape() : Shape());
  const Shape tuple = Shape::Tuple(shapes);
  l.cond = p.m.AddComputation(name + "_cond");
  Builder cb(l.cond);
  Instruction* i = cb.GetTupleElement(cb.Parameter(0, tuple, "carried"), 0, "i");
  cb.SetRoot(cb.Compare(i, cb.ConstantScalar(PrimitiveType::kS32, static_cast<double>(trips)), ComparisonDirection::kLt,
                        "more"));
  l.body = p.m.AddComputation(name + "_body");
  l.b = std::make_unique<Builder>(l.body);
  l.b->set_scoped_names(true);
  if (!cb.ok()) l.b->Fail("loop condition: " + cb.status().error().message);
  Instruction* param = l.b->Parameter(0, tuple, "carried");
  for (size_t k = 0; k < init.size(); ++k) l.in.push_back(l.b->GetTupleElement(param, static_cast<int64_t>(k), names[k]));
  return l;
}

// The stage dimension's ids, broadcast to `dims` (L leading).
Instruction* StageIds(Builder& b, const Dims& dims) {
  Instruction* ids = b.Iota(Shape(PrimitiveType::kS32, {dims[0]}), 0, "stage_id");
  return b.Broadcast(ids, dims, {0});
}

Instruction* S32(Builder& b, int64_t v) { return b.ConstantScalar(PrimitiveType::kS32, static_cast<double>(v)); }

// pred[dims] from a pred scalar.
Instruction* Splat(Builder& b, Instruction* pred, const Dims& dims) { return b.Broadcast(pred, dims, {}); }

// Non-negative a mod n for an s32 scalar a >= -bias (bias a multiple of n).
Instruction* Mod(Builder& b, Instruction* a, int64_t n, int64_t bias) {
  return b.Binary(Opcode::kRemainder, b.Add(a, S32(b, bias)), S32(b, n));
}

// value[L, ...rest] written at [0, slot, 0...] of buf[L, K, ...rest].
Instruction* WriteSlot(Builder& b, Instruction* buf, Instruction* value, Instruction* slot, const std::string& name) {
  if (!buf || !value) return nullptr;
  Dims one = value->shape().dims;
  one.insert(one.begin() + 1, 1);
  std::vector<Instruction*> starts(buf->shape().dims.size(), nullptr);
  for (auto& s : starts) s = S32(b, 0);
  starts[1] = slot;
  return b.DynamicUpdateSlice(buf, b.Reshape(value, one), starts, name);
}

// buf[L, K, ...rest] read at slot: [L, ...rest].
Instruction* ReadSlot(Builder& b, Instruction* buf, Instruction* slot, const std::string& name) {
  if (!buf) return nullptr;
  Dims sizes = buf->shape().dims;
  sizes[1] = 1;
  std::vector<Instruction*> starts(sizes.size(), nullptr);
  for (auto& s : starts) s = S32(b, 0);
  starts[1] = slot;
  Dims out = sizes;
  out.erase(out.begin() + 1);
  return b.Reshape(b.DynamicSlice(buf, starts, sizes), out, name);
}

// The value at index `at` of the leading dim of buf[K, ...]: [...].
Instruction* ReadLeading(Builder& b, Instruction* buf, Instruction* at, const std::string& name) {
  if (!buf) return nullptr;
  Dims sizes = buf->shape().dims;
  sizes[0] = 1;
  std::vector<Instruction*> starts(sizes.size(), nullptr);
  for (auto& s : starts) s = S32(b, 0);
  starts[0] = at;
  Dims out(sizes.begin() + 1, sizes.end());
  return b.Reshape(b.DynamicSlice(buf, starts, sizes), out, name);
}

// buf[K, ...] with value[...] written at index `at` of the leading dim.
Instruction* WriteLeading(Builder& b, Instruction* buf, Instruction* value, Instruction* at, const std::string& name) {
  if (!buf || !value) return nullptr;
  std::vector<Instruction*> starts(buf->shape().dims.size(), nullptr);
  for (auto& s : starts) s = S32(b, 0);
  starts[0] = at;
  return b.DynamicUpdateSlice(buf, b.Reshape(value, Cat({1}, value->shape().dims)), starts, name);
}

// The shift of the buffer by one stage: towards higher stages (forward) or lower (backward).
// GPipe: pad + slice along L (row 0 / row L-1 receives zeros); circular: a rotation
// concatenate(x[L-1:], x[:L-1]) (forward) or concatenate(x[1:], x[:1]) (backward).
Instruction* Shift(Builder& b, const Pipeline& p, Instruction* x, bool forward) {
  if (!x) return nullptr;
  const Dims& d = x->shape().dims;
  const int64_t L = d[0];
  Dims lo = Zeros(d.size()), hi = d;
  if (p.circular) {
    const int64_t cut = forward ? L - 1 : 1;
    Dims a_lo = lo, a_hi = hi, b_lo = lo, b_hi = hi;
    a_lo[0] = cut;
    b_hi[0] = cut;
    Instruction* last = b.Slice(x, a_lo, a_hi, {}, "rotate_last");
    Instruction* rest = b.Slice(x, b_lo, b_hi, {}, "rotate_rest");
    return b.Concatenate({last, rest}, 0, "shift");
  }
  std::vector<PaddingDim> pad(d.size());
  (forward ? pad[0].low : pad[0].high) = 1;
  Instruction* padded = b.Pad(x, b.ConstantScalar(x->shape().type, 0), pad, "shift_pad");
  if (!forward) {
    lo[0] = 1;
    hi[0] = L + 1;
  }
  return b.Slice(padded, lo, hi, {}, "shift");
}

// One layer of every stage: the Transformer blocks (transformer.h) over the stage dim.
struct StageLayer {
  AttentionBlock attention;
  FfnBlock ffn;
};

// What backward reads of a layer's forward: the activations, in a fixed order (LayerNorm's only
// with layernorm).
std::vector<Instruction*> PackSaved(const StageLayer& s, bool layernorm) {
  std::vector<Instruction*> v;
  if (layernorm) v.insert(v.end(), {s.attention.norm.xhat, s.attention.norm.r});
  v.insert(v.end(), {s.attention.h, s.attention.q, s.attention.k, s.attention.v, s.attention.p, s.attention.ctx});
  if (layernorm) v.insert(v.end(), {s.ffn.norm.xhat, s.ffn.norm.r});
  v.insert(v.end(), {s.ffn.h, s.ffn.hid, s.ffn.relu});
  return v;
}

// The blocks' saved state from PackSaved's list (the blocks read their input only for its shape:
// the normalised input stands in).
void UnpackSaved(const std::vector<Instruction*>& v, bool layernorm, StageLayer* s) {
  size_t i = 0;
  auto norm = [&](NormSaved* n, Instruction* like) {
    n->xhat = v[i++];
    n->r = v[i++];
    const int64_t last = like ? like->shape().rank() - 1 : 0;
    n->stats = {last};
    n->param = {0, last};
  };
  AttentionBlock& a = s->attention;
  if (layernorm) norm(&a.norm, v[i]);
  a.h = v[i++];
  a.q = v[i++];
  a.k = v[i++];
  a.v = v[i++];
  a.p = v[i++];
  a.ctx = v[i++];
  a.x = a.h;
  FfnBlock& f = s->ffn;
  if (layernorm) norm(&f.norm, v[i]);
  f.h = v[i++];
  f.hid = v[i++];
  f.relu = v[i++];
  f.x = f.h;
}

// The layers of the stage compute of one iteration: for each, its weights [L, ...] (values in the
// activation type) and fresh gradient accumulators.
struct StageWeights {
  std::vector<Weight> w;  // one per kind (unused kinds empty)
  Weight* at(int k) { return w[static_cast<size_t>(k)].value ? &w[static_cast<size_t>(k)] : nullptr; }
  // The blocks of a layer using these weights.
  StageLayer Layer() {
    StageLayer l;
    l.attention.ln = at(kLn1);
    l.attention.wqkv = at(kWqkv);
    l.attention.wo = at(kWo);
    l.ffn.ln = at(kLn2);
    l.ffn.wi = at(kWi);
    l.ffn.wout = at(kWout);
    return l;
  }
};

// GPipe: slot r of every stage, a static slice along R. Circular: each stage's round r_l, a gather
// over R batched over L.
StageWeights SelectWeights(Builder& b, const Pipeline& p, const std::vector<Instruction*>& stacked, int64_t slot,
                           Instruction* rounds) {
  StageWeights sw;
  sw.w.resize(kNumKinds);
  for (int k = 0; k < kNumKinds; ++k) {
    Instruction* W = stacked[static_cast<size_t>(k)];
    if (!W) continue;
    const Dims& d = W->shape().dims;  // [L, R, ...]
    Dims out = {d[0]};
    out.insert(out.end(), d.begin() + 2, d.end());
    const std::string name = std::string(kKindName[k]);
    if (!rounds) {
      Dims lo = Zeros(d.size()), hi = d;
      lo[1] = slot;
      hi[1] = slot + 1;
      sw.w[static_cast<size_t>(k)].value = b.Reshape(b.Slice(W, lo, hi), out, name);
      sw.w[static_cast<size_t>(k)].param = sw.w[static_cast<size_t>(k)].value;
    } else {
      GatherDimensionNumbers g;
      for (size_t i = 2; i < d.size(); ++i) g.offset_dims.push_back(static_cast<int64_t>(i) - 1);
      g.collapsed_slice_dims = {1};
      g.start_index_map = {1};
      g.operand_batching_dims = {0};
      g.start_indices_batching_dims = {0};
      g.index_vector_dim = 1;
      Dims sizes = d;
      sizes[0] = 1;
      sizes[1] = 1;
      sw.w[static_cast<size_t>(k)].value = b.Gather(W, rounds, g, sizes, name);
      sw.w[static_cast<size_t>(k)].param = sw.w[static_cast<size_t>(k)].value;
    }
    sw.w[static_cast<size_t>(k)].name = "stage_" + name;
    sw.w[static_cast<size_t>(k)].scope = kKindScope[k];
  }
  return sw;
}

// The gradient of slot `slot` (GPipe: the static slot; circular: each stage's round) added into the
// stacked accumulators.
void AccumulateStacked(Builder& b, const Pipeline& p, std::vector<Instruction*>& acc,
                       const std::vector<std::vector<Instruction*>>& per_slot, Instruction* rounds) {
  for (int k = 0; k < kNumKinds; ++k) {
    Instruction*& a = acc[static_cast<size_t>(k)];
    if (!a) continue;
    const Dims& d = a->shape().dims;  // [L, R, ...]
    if (!rounds) {
      std::vector<Instruction*> parts;
      for (const auto& g : per_slot) {
        Instruction* x = g[static_cast<size_t>(k)];
        parts.push_back(x ? b.Reshape(x, Cat({d[0], 1}, Dims(d.begin() + 2, d.end()))) : nullptr);
      }
      Instruction* stacked = parts.size() == 1 ? parts[0] : b.Concatenate(parts, 1);
      a = b.Add(a, stacked, std::string("acc_") + kKindName[k]);
      continue;
    }
    ScatterDimensionNumbers s;
    for (size_t i = 2; i < d.size(); ++i) s.update_window_dims.push_back(static_cast<int64_t>(i) - 1);
    s.inserted_window_dims = {1};
    s.scatter_dims_to_operand_dims = {1};
    s.input_batching_dims = {0};
    s.scatter_indices_batching_dims = {0};
    s.index_vector_dim = 1;
    a = b.Scatter(a, rounds, per_slot[0][static_cast<size_t>(k)], s, ScalarAdd(p.m, p.A),
                  std::string("acc_") + kKindName[k]);
  }
}

// Each stage's round at iteration `it` (circular): clamp((it - l) / N, 0, R - 1), as s32[L, 1].
Instruction* Rounds(Builder& b, const Pipeline& p, Instruction* it) {
  const int64_t L = p.z.L;
  Instruction* ids = b.Iota(Shape(PrimitiveType::kS32, {L}), 0, "stage_id");
  Instruction* k = b.Sub(b.Broadcast(it, {L}, {}), ids, "progress");
  Instruction* r = b.Div(b.Max(k, b.Broadcast(S32(b, 0), {L}, {})), b.Broadcast(S32(b, p.z.N), {L}, {}));
  r = b.Clamp(b.Broadcast(S32(b, 0), {L}, {}), r, b.Broadcast(S32(b, p.z.R - 1), {L}, {}), "round");
  return b.Reshape(r, {L, 1}, "rounds");
}

// The shapes PackSaved lists for one layer of every stage (prefix L).
std::vector<Dims> SavedShapes(const Sizes& z, bool layernorm) {
  const Dims bsm = {z.L, z.mb, z.S, z.M}, bs = {z.L, z.mb, z.S}, bsnd = {z.L, z.mb, z.S, z.Nh, z.D};
  std::vector<Dims> v;
  if (layernorm) v.insert(v.end(), {bsm, bs});
  v.insert(v.end(), {bsm, bsnd, bsnd, bsnd, {z.L, z.mb, z.Nh, z.S, z.S}, {z.L, z.mb, z.Nh, z.S, z.D}});
  if (layernorm) v.insert(v.end(), {bsm, bs});
  v.insert(v.end(), {bsm, {z.L, z.mb, z.S, z.H}, {z.L, z.mb, z.S, z.H}});
  return v;
}

// Runs the stage's layers on `in` [L, mb, S, M]; returns the output and, per layer, what backward
// reads (when `saved` is given).
Instruction* StageForward(Builder& b, Pipeline& p, Instruction* in, const std::vector<Instruction*>& stacked,
                          Instruction* rounds, const std::string& scope,
                          std::vector<std::vector<Instruction*>>* saved) {
  Net net(p.m, b, p.A);
  Annotator ann = p.MakeAnnotator(b);
  const int64_t per_iteration = p.circular ? 1 : p.z.R;
  Instruction* h = in;
  for (int64_t r = 0; r < per_iteration; ++r) {
    auto s = b.Scope(scope + "/layer" + std::to_string(r));
    StageWeights sw = SelectWeights(b, p, stacked, r, rounds);
    StageLayer layer = sw.Layer();
    ann.Table1(h, Table1Tensor::kBSM);  // the layer input activation
    h = FfnForward(net, ann, layer.ffn, AttentionForward(net, ann, layer.attention, h));
    if (saved) saved->push_back(PackSaved(layer, p.c.layernorm));
  }
  return h;
}

}  // namespace

Result<std::unique_ptr<Module>> BuildPipelinedTransformer(const PipelinedTransformerConfig& c) {
  if (Status s = CheckPositive({{"stages", c.stages}, {"microbatches", c.microbatches}, {"microbatch", c.microbatch},
                                {"seq", c.seq}, {"model", c.model}, {"heads", c.heads}, {"head_dim", c.head_dim},
                                {"hidden", c.hidden}, {"layers", c.layers}, {"mesh_x", c.mesh_x}, {"mesh_y", c.mesh_y}});
      !s.ok())
    return s.error();
  if (c.layers % c.stages != 0)
    return Error("layers = " + std::to_string(c.layers) + " must be a multiple of stages = " + std::to_string(c.stages));
  if (c.layers > 4096) return Error("layers = " + std::to_string(c.layers) + " is too many (limit 4096)");
  const bool circular = c.schedule == PipelineSchedule::kCircular;
  if (circular && c.microbatches < c.stages)
    return Error("the circular schedule needs microbatches >= stages (" + std::to_string(c.microbatches) + " < " +
                 std::to_string(c.stages) + "): a microbatch's next round must not start before its last one ends");
  if (Status s = CheckTrainingParameters(c); !s.ok()) return s.error();
  const Sizes z{c.stages, c.microbatches, c.microbatch, c.seq, c.model, c.heads, c.head_dim, c.hidden,
                c.layers / c.stages, PipelineIterations(c)};
  if (Status s = CheckElementCount({{z.T, z.L, z.mb, z.Nh, z.S, z.S}, {z.L, z.N, z.mb, z.S, z.M},
                                    {z.L, z.R, 3, z.M, z.Nh, z.D}, {z.L, z.R, z.M, z.H}, {z.T, z.L, z.mb, z.S, z.H}});
      !s.ok())
    return s.error();

  auto module = std::make_unique<Module>("pipelined_transformer");
  module->num_partitions = c.stages * c.mesh_x * c.mesh_y;
  Module& m = *module;
  const PrimitiveType P = c.param_type, A = c.act_type;
  // Reducers first, so the module lists callees before their callers.
  ScalarAdd(m, A);
  ScalarMax(m, A);
  Computation* entry = m.AddComputation("main", /*is_entry=*/true);
  Builder b(entry);
  b.set_scoped_names(true);
  Net net(m, b, A);
  Pipeline p{c, z, m, DeviceMesh({{"L", c.stages}, {"X", c.mesh_x}, {"Y", c.mesh_y}}), A, circular};
  Annotator ann = p.MakeAnnotator(b);
  const Dims act = z.Act();                 // [mb, S, M]
  const Dims stage_act = Cat({z.L}, act);   // [L, mb, S, M]
  const Dims data = Cat({z.N}, act);        // [N, mb, S, M]
  const Dims slots = Cat({z.L, z.N}, act);  // [L, N, mb, S, M]
  const Dims bsm = p.Mapped(Table1Tensor::kBSM, nullptr, false);

  // ---- parameters ----
  int64_t pn = 0;
  Instruction* x = b.Parameter(pn++, Shape(A, data), "x");
  ann.Apply(x, Cat({-1}, bsm));
  Instruction* target = nullptr;
  if (c.backward) {
    target = b.Parameter(pn++, Shape(A, data), "target");
    ann.Apply(target, Cat({-1}, bsm));
  }
  std::vector<Weight> weights;
  weights.reserve(kNumKinds);
  std::vector<int> kind_of;
  const WeightAdder add = MakeWeightAdder(b, weights, "stacked", &pn);
  for (int k = 0; k < kNumKinds; ++k) {
    if (!p.has(k)) continue;
    Weight* w = add(kKindName[k], kKindScope[k], Shape(P, Cat({z.L, z.R}, z.Weight(k))));
    if (w) ann.Apply(w->param, p.StackedWeight(k));
    kind_of.push_back(k);
  }
  AddOptimizerState(b, weights, c.optimizer, &pn);
  CastWeights(net, weights);
  std::vector<Instruction*> stacked(kNumKinds, nullptr);  // values in the activation type, by kind
  for (size_t i = 0; i < weights.size(); ++i) stacked[static_cast<size_t>(kind_of[i])] = weights[i].value;
  auto zeros = [&](const Dims& dims, const Dims& mapping, const std::string& name) {
    Instruction* z0 = b.Broadcast(b.ConstantScalar(A, 0), dims, {}, name);
    if (!mapping.empty()) ann.Apply(z0, mapping);
    return z0;
  };

  // ---- forward loop ----
  // Carried: i, state, x, the stacked weights, the output slots, [circular: stage 0's arrivals],
  // then what backward reads (remat: every stage's input per iteration; else every activation of
  // every layer the stage runs per iteration).
  const int64_t per_iteration = circular ? 1 : z.R;
  const std::vector<Dims> saved_shapes = SavedShapes(z, c.layernorm);
  std::vector<Instruction*> init = {S32(b, 0), zeros(stage_act, p.StageBsm(), "state"), x};
  std::vector<std::string> names = {"i", "state", "x"};
  const size_t first_weight = init.size();
  for (int k = 0; k < kNumKinds; ++k)
    if (stacked[static_cast<size_t>(k)]) {
      init.push_back(stacked[static_cast<size_t>(k)]);
      names.push_back(kKindName[k]);
    }
  const size_t out_index = init.size();
  init.push_back(zeros(slots, Cat({kAxisL, -1}, bsm), "output_slots"));
  names.push_back("output_slots");
  size_t circ_index = 0;
  if (circular) {
    circ_index = init.size();
    init.push_back(zeros(slots, Cat({kAxisL, -1}, bsm), "arrivals"));
    names.push_back("arrivals");
  }
  const size_t saved_index = init.size();
  if (c.backward) {
    if (c.remat) {
      init.push_back(zeros(Cat({z.T}, stage_act), Cat({-1}, p.StageBsm()), "saved_inputs"));
      names.push_back("saved_inputs");
    } else {
      for (int64_t r = 0; r < per_iteration; ++r)
        for (size_t a = 0; a < saved_shapes.size(); ++a) {
          init.push_back(zeros(Cat({z.T}, saved_shapes[a]), {}, "saved"));
          names.push_back("saved_l" + std::to_string(r) + "_" + std::to_string(a));
        }
    }
  }
  auto weights_in = [&](const Loop& l, size_t first) {
    std::vector<Instruction*> w(kNumKinds, nullptr);
    size_t j = first;
    for (int k = 0; k < kNumKinds; ++k)
      if (stacked[static_cast<size_t>(k)]) w[static_cast<size_t>(k)] = l.in[j++];
    return w;
  };

  Loop fwd = MakeLoop(p, "forward", init, names, z.T);
  {
    Builder& fb = *fwd.b;
    Annotator fann = p.MakeAnnotator(fb);
    Instruction* i = fwd.in[0];
    std::vector<Instruction*> next = fwd.in;
    Instruction* shifted = Shift(fb, p, fwd.in[1], /*forward=*/true);
    Instruction* is0 = fb.Compare(StageIds(fb, stage_act), fb.Broadcast(S32(fb, 0), stage_act, {}),
                                  ComparisonDirection::kEq, "is_first_stage");
    Instruction* stage_in = nullptr;
    Instruction* rounds = nullptr;
    if (!circular) {
      // Stage 0 takes microbatch i (iterations past the last microbatch compute on a clamped copy:
      // the bubble).
      Instruction* mbatch = fb.Broadcast(ReadLeading(fb, fwd.in[2], i, "microbatch"), stage_act, {1, 2, 3});
      stage_in = fb.Select(is0, mbatch, shifted, "stage_input");
    } else {
      // The rotation brought the last stage's result to stage 0: keep it until that microbatch's
      // next round (slot (i - L) mod N), then stage 0 reads microbatch i mod N: from x in round 0,
      // from its arrivals afterwards.
      Instruction* arrivals =
          WriteSlot(fb, fwd.in[circ_index], shifted, Mod(fb, fb.Sub(i, S32(fb, z.L)), z.N, z.N * z.L), "keep_arrival");
      next[circ_index] = arrivals;
      Instruction* m0 = Mod(fb, i, z.N, 0);
      Instruction* first_round = fb.Compare(fb.Div(i, S32(fb, z.N)), S32(fb, 0), ComparisonDirection::kEq, "first_round");
      Instruction* mbatch = fb.Broadcast(ReadLeading(fb, fwd.in[2], m0, "microbatch"), stage_act, {1, 2, 3});
      Instruction* first = fb.Select(Splat(fb, first_round, stage_act), mbatch, ReadSlot(fb, arrivals, m0, "arrival"),
                                     "first_stage_input");
      stage_in = fb.Select(is0, first, shifted, "stage_input");
      rounds = Rounds(fb, p, i);
    }
    fann.Apply(stage_in, p.StageBsm());
    std::vector<std::vector<Instruction*>> saved;
    Instruction* out = StageForward(fb, p, stage_in, weights_in(fwd, first_weight), rounds, "stage",
                                    c.backward && !c.remat ? &saved : nullptr);
    next[1] = out;
    // Every stage writes its result to the slot of the microbatch the last stage finished; only
    // the last stage's row is read after the loop.
    Instruction* slot = Mod(fb, fb.Sub(i, S32(fb, z.L - 1)), z.N, z.N * z.L);
    next[out_index] = WriteSlot(fb, fwd.in[out_index], out, circular ? slot : fb.Sub(i, S32(fb, z.L - 1)), "output");
    if (c.backward) {
      if (c.remat) {
        next[saved_index] = WriteLeading(fb, fwd.in[saved_index], stage_in, i, "save_input");
      } else {
        size_t j = saved_index;
        for (const auto& layer : saved)
          for (Instruction* a : layer) {
            if (a && a->shape().dims != Dims(fwd.in[j]->shape().dims.begin() + 1, fwd.in[j]->shape().dims.end()))
              fb.Fail("internal: saved activation " + a->name() + " has shape " + a->shape().ToString());
            next[j] = WriteLeading(fb, fwd.in[j], a, i, "save");
            ++j;
          }
      }
    }
    next[0] = fb.Add(i, S32(fb, 1), "next_i");
    fb.SetRoot(fb.Tuple(next, "carried_out"));
    if (!fb.ok()) return Error("forward loop: " + fb.status().error().message);
  }
  Instruction* fwd_loop = b.While(b.Tuple(init, "forward_init"), fwd.cond, fwd.body, "forward");
  auto out_of = [&](Instruction* loop, size_t k, const std::string& name) { return b.GetTupleElement(loop, static_cast<int64_t>(k), name); };
  Instruction* out_slots = out_of(fwd_loop, out_index, "output_slots_final");
  Dims lo = Zeros(slots.size()), hi = slots;
  lo[0] = z.L - 1;
  Instruction* outputs = b.Reshape(b.Slice(out_slots, lo, hi, {}, "last_stage_outputs"), data, "outputs");
  if (!c.backward) {
    b.SetRoot(outputs);
    m.set_entry(entry);
    if (!b.ok()) return b.status().error();
    return module;
  }
  auto [loss, dout] = MseLoss(net, outputs, target);

  // ---- backward loop ----
  // Carried: j (iteration t = T - 1 - j), the gradient of every stage's input at t + 1, the
  // gradient of the outputs, the stacked weights, the gradient accumulators, [circular: the last
  // stage's arrivals], the saved buffers.
  std::vector<Instruction*> binit = {S32(b, 0), zeros(stage_act, p.StageBsm(), "grad_state"), dout};
  std::vector<std::string> bnames = {"j", "grad_state", "dout"};
  const size_t bfirst_weight = binit.size();
  for (int k = 0; k < kNumKinds; ++k)
    if (stacked[static_cast<size_t>(k)]) {
      binit.push_back(stacked[static_cast<size_t>(k)]);
      bnames.push_back(kKindName[k]);
    }
  const size_t acc_index = binit.size();
  for (int k = 0; k < kNumKinds; ++k)
    if (stacked[static_cast<size_t>(k)]) {
      binit.push_back(zeros(stacked[static_cast<size_t>(k)]->shape().dims, p.StackedWeight(k),
                            std::string("grad_") + kKindName[k]));
      bnames.push_back(std::string("grad_") + kKindName[k]);
    }
  size_t gcirc_index = 0;
  if (circular) {
    gcirc_index = binit.size();
    binit.push_back(zeros(slots, Cat({kAxisL, -1}, bsm), "grad_arrivals"));
    bnames.push_back("grad_arrivals");
  }
  const size_t bsaved_index = binit.size();
  for (size_t k = saved_index; k < init.size(); ++k) {
    binit.push_back(out_of(fwd_loop, k, names[k] + "_final"));
    bnames.push_back(names[k]);
  }
  Loop bwd = MakeLoop(p, "backward", binit, bnames, z.T);
  {
    Builder& bb = *bwd.b;
    Annotator bann = p.MakeAnnotator(bb);
    Net bnet(m, bb, A);
    Instruction* j = bwd.in[0];
    std::vector<Instruction*> next = bwd.in;
    Instruction* t = bb.Sub(S32(bb, z.T - 1), j, "t");
    Instruction* from_next = Shift(bb, p, bwd.in[1], /*forward=*/false);
    Instruction* is_last = bb.Compare(StageIds(bb, stage_act), bb.Broadcast(S32(bb, z.L - 1), stage_act, {}),
                                      ComparisonDirection::kEq, "is_last_stage");
    // The last stage's microbatch and round at t; outside [0, N*R) it computed on padding.
    Instruction* k = bb.Sub(t, S32(bb, z.L - 1), "last_progress");
    Instruction* valid = bb.Binary(Opcode::kAnd, bb.Compare(k, S32(bb, 0), ComparisonDirection::kGe),
                                   bb.Compare(k, S32(bb, circular ? z.N * z.R : z.N), ComparisonDirection::kLt), "valid");
    Instruction* kk = bb.Max(k, S32(bb, 0));
    Instruction* mlast = circular ? bb.Binary(Opcode::kRemainder, kk, S32(bb, z.N)) : k;
    Instruction* dlast = bb.Broadcast(ReadLeading(bb, bwd.in[2], mlast, "output_grad"), stage_act, {1, 2, 3});
    Instruction* zero = bb.Broadcast(bb.ConstantScalar(A, 0), stage_act, {});
    Instruction* g_last = nullptr;
    Instruction* rounds = nullptr;
    if (!circular) {
      g_last = bb.Select(Splat(bb, valid, stage_act), dlast, zero, "last_stage_grad");
    } else {
      // Stage 0's input gradient at t + 1 reached the last stage through the rotation: keep it in
      // slot (t + 1) mod N until the last stage handles that microbatch's previous round.
      Instruction* arrivals =
          WriteSlot(bb, bwd.in[gcirc_index], from_next, Mod(bb, bb.Add(t, S32(bb, 1)), z.N, 0), "keep_grad_arrival");
      next[gcirc_index] = arrivals;
      Instruction* last_round = bb.Compare(bb.Div(kk, S32(bb, z.N)), S32(bb, z.R - 1), ComparisonDirection::kEq);
      Instruction* from_loss = bb.Binary(Opcode::kAnd, valid, last_round, "from_loss");
      g_last = bb.Select(Splat(bb, from_loss, stage_act), dlast,
                         bb.Select(Splat(bb, valid, stage_act), ReadSlot(bb, arrivals, mlast, "grad_arrival"), zero),
                         "last_stage_grad");
      rounds = Rounds(bb, p, t);
    }
    Instruction* g = bb.Select(is_last, g_last, from_next, "stage_output_grad");
    bann.Apply(g, p.StageBsm());
    // What the stage's layers saved at t: recomputed from the saved input (remat) or read back.
    const std::vector<Instruction*> Wb = weights_in(bwd, bfirst_weight);
    std::vector<std::vector<Instruction*>> saved;
    if (c.remat) {
      Instruction* in = ReadLeading(bb, bwd.in[bsaved_index], t, "saved_input");
      StageForward(bb, p, in, Wb, rounds, "backward/recompute", &saved);
    } else {
      size_t jj = bsaved_index;
      for (int64_t r = 0; r < per_iteration; ++r) {
        std::vector<Instruction*> layer;
        for (size_t a = 0; a < saved_shapes.size(); ++a) layer.push_back(ReadLeading(bb, bwd.in[jj++], t, "saved"));
        saved.push_back(layer);
      }
    }
    std::vector<std::vector<Instruction*>> grads(static_cast<size_t>(per_iteration));
    for (int64_t r = per_iteration - 1; r >= 0; --r) {
      auto scope = bb.Scope("backward/layer" + std::to_string(r));
      StageWeights sw = SelectWeights(bb, p, Wb, r, rounds);
      StageLayer layer = sw.Layer();
      UnpackSaved(saved[static_cast<size_t>(r)], c.layernorm, &layer);
      g = AttentionBackward(bnet, layer.attention, FfnBackward(bnet, layer.ffn, g));
      for (int kd = 0; kd < kNumKinds; ++kd) grads[static_cast<size_t>(r)].push_back(sw.w[static_cast<size_t>(kd)].grad);
    }
    std::vector<Instruction*> acc(kNumKinds, nullptr);
    {
      size_t jj = acc_index;
      for (int kd = 0; kd < kNumKinds; ++kd)
        if (stacked[static_cast<size_t>(kd)]) acc[static_cast<size_t>(kd)] = bwd.in[jj++];
    }
    {
      auto scope = bb.Scope("backward/accumulate");
      AccumulateStacked(bb, p, acc, grads, rounds);
    }
    {
      size_t jj = acc_index;
      for (int kd = 0; kd < kNumKinds; ++kd)
        if (stacked[static_cast<size_t>(kd)]) next[jj++] = acc[static_cast<size_t>(kd)];
    }
    next[1] = g;
    next[0] = bb.Add(j, S32(bb, 1), "next_j");
    bb.SetRoot(bb.Tuple(next, "carried_out"));
    if (!bb.ok()) return Error("backward loop: " + bb.status().error().message);
  }
  Instruction* bwd_loop = b.While(b.Tuple(binit, "backward_init"), bwd.cond, bwd.body, "backward");
  {
    size_t jj = acc_index;
    for (size_t w = 0; w < weights.size(); ++w)
      weights[w].grad = out_of(bwd_loop, jj++, std::string("grad_") + kKindName[kind_of[w]] + "_final");
  }
  FinishGradients(net, weights, P);
  b.SetRoot(MakeRoot(net, loss, weights, c.optimizer, c.learning_rate));
  m.set_entry(entry);
  if (!b.ok()) return b.status().error();
  return module;
}

// ---- registry entry ----------------------------------------------------------------------------------

namespace {

Result<std::unique_ptr<Module>> BuildFromParams(ZooParams& p) {
  PipelinedTransformerConfig c;
  c.stages = p.Int("stages");
  c.microbatches = p.Int("microbatches");
  c.microbatch = p.Int("microbatch");
  c.seq = p.Int("seq");
  c.model = p.Int("model");
  c.heads = p.Int("heads");
  c.head_dim = p.Int("head_dim");
  c.hidden = p.Int("hidden");
  c.layers = p.Int("layers");
  c.schedule = p.Choice("schedule", {"gpipe", "circular"}) == "circular" ? PipelineSchedule::kCircular
                                                                          : PipelineSchedule::kGPipe;
  c.remat = p.Bool("remat");
  c.layernorm = p.Bool("layernorm");
  ReadTrainingParameters(p, c);
  c.annotations = ReadAnnotationSet(p);
  if (!p.ok()) return Error(p.error());
  return BuildPipelinedTransformer(c);
}

Result<DeviceMesh> MeshFromParams(ZooParams& p) {
  const int64_t l = p.Int("stages"), x = p.Int("mesh_x"), y = p.Int("mesh_y");
  if (!p.ok()) return Error(p.error());
  if (l < 1 || x < 1 || y < 1) return Error("stages, mesh_x and mesh_y must be >= 1");
  return DeviceMesh({{"L", l}, {"X", x}, {"Y", y}});
}

}  // namespace

void AddPipelinedTransformerModels(std::vector<ZooModel>& models) {
  std::vector<ZooParameter> params = {
      {"stages", "4", "L: pipeline stages (mesh axis L)"},
      {"microbatches", "4", "N: microbatches per step"},
      {"microbatch", "2", "rows of the batch per microbatch"},
      {"seq", "8", "S: sequence length"},
      {"model", "32", "M: model dimension"},
      {"heads", "4", "N: attention heads"},
      {"head_dim", "8", "D: dimension per head"},
      {"hidden", "64", "H: feed-forward hidden dimension"},
      {"layers", "8", "Transformer layers (a multiple of stages)"},
      {"schedule", "gpipe", "gpipe | circular (layers round-robin over the stages)"},
      {"remat", "1", "recompute forward activations in the backward pass (0 | 1)"},
      {"layernorm", "1", "pre-norm LayerNorm before attention and feed-forward (0 | 1)"},
      {"backward", "1", "add the loss and the backward pass (0 | 1)"},
      {"optimizer", "sgd", "weight update after backward: none | sgd | adam | lars"},
  };
  for (const auto& cp : ZooCommonParameters()) {
    ZooParameter q = cp;
    if (q.name == "mesh_x") q.default_value = "1";
    if (q.name == "mesh_y") q.default_value = "2";
    params.push_back(q);
  }
  models.push_back({"pipelined-transformer",
                    "Transformer training step pipelined as sharding (GSPMD §3.3): stacked layers, microbatch loop, "
                    "shifting buffer; GPipe or circular schedule, rematerialisation; mesh (L, X, Y)",
                    params, &BuildFromParams, &MeshFromParams});
}

}  // namespace shardscope
