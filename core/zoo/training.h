// Building blocks the zoo's models share: a thin layer over the Builder (Net), trainable weights
// with their gradients and optimizer state, argument checks, normalisation (LayerNorm, BatchNorm)
// forward/backward, the losses (MSE, softmax cross-entropy), and the optimizer step (SGD, Adam,
// LARS). Each model family (transformer.cpp, mlp.cpp, ...) builds its forward pass and
// hand-derived backward pass from these.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/ir/builder.h"
#include "core/base/status.h"
#include "core/zoo/annotations.h"
#include "core/zoo/zoo.h"

namespace shardscope {

enum class Optimizer : uint8_t { kNone, kSgd, kAdam, kLars, kAdafactor };
std::string_view OptimizerName(Optimizer o);
std::optional<Optimizer> OptimizerFromName(std::string_view s);
// The "optimizer" setting of a zoo model.
Optimizer ReadOptimizer(ZooParams& p);

namespace zoo {

using Dims = std::vector<int64_t>;

// Small helpers over the Builder shared by the models.
class Net {
 public:
  Net(Module& m, Builder& b, PrimitiveType act) : m_(m), b_(b), act_(act) {}
  Builder& b() { return b_; }

  Instruction* Const(double v, PrimitiveType t) { return b_.ConstantScalar(t, v); }
  // x * c (c broadcast to x's shape).
  Instruction* Scale(Instruction* x, double c, const std::string& name = "") {
    if (!x) return nullptr;
    return b_.Mul(x, b_.FullLike(x, c), name);
  }
  Instruction* Sum(Instruction* x, const Dims& dims, const std::string& name = "") {
    if (!x) return nullptr;
    const PrimitiveType t = x->shape().type;
    return b_.Reduce(x, Const(0, t), dims, ScalarAdd(m_, t), name);
  }
  Instruction* MaxOver(Instruction* x, const Dims& dims, const std::string& name = "") {
    if (!x) return nullptr;
    const PrimitiveType t = x->shape().type;
    return b_.Reduce(x, Const(-INFINITY, t), dims, ScalarMax(m_, t), name);
  }
  Instruction* MinOver(Instruction* x, const Dims& dims, const std::string& name = "") {
    if (!x) return nullptr;
    const PrimitiveType t = x->shape().type;
    return b_.Reduce(x, Const(INFINITY, t), dims, ScalarMin(m_, t), name);
  }
  // Broadcasts `x` into `like`'s dims, x's dims landing on `dims`.
  Instruction* Bcast(Instruction* x, Instruction* like, const Dims& dims) {
    if (!x || !like) return nullptr;
    return b_.Broadcast(x, like->shape().dims, dims);
  }
  Instruction* Dot(Instruction* l, Instruction* r, Dims lb, Dims rb, Dims lc, Dims rc, const std::string& name = "") {
    DotDimensionNumbers dn;
    dn.lhs_batch = std::move(lb);
    dn.rhs_batch = std::move(rb);
    dn.lhs_contracting = std::move(lc);
    dn.rhs_contracting = std::move(rc);
    return b_.Dot(l, r, dn, name);
  }
  Instruction* Relu(Instruction* x, const std::string& name = "") {
    if (!x) return nullptr;
    return b_.Max(x, b_.FullLike(x, 0.0), name);
  }
  // d/dx relu(x) applied to dy: select(x > 0, dy, 0).
  Instruction* ReluGrad(Instruction* x, Instruction* dy, const std::string& name = "") {
    if (!x || !dy) return nullptr;
    Instruction* pos = b_.Compare(x, b_.FullLike(x, 0.0), ComparisonDirection::kGt);
    return b_.Select(pos, dy, b_.FullLike(dy, 0.0), name);
  }
  Instruction* ToType(Instruction* x, PrimitiveType t, const std::string& name = "") {
    if (!x || x->shape().type == t) return x;
    return b_.Convert(x, t, name);
  }
  PrimitiveType act() const { return act_; }

 private:
  Module& m_;
  Builder& b_;
  PrimitiveType act_;
};

// A trainable weight: its parameter, the value used in compute (converted to the activation type
// when that differs), its gradient and optimizer state.
struct Weight {
  std::string name;              // "layer0_wqkv"
  std::string scope;             // "layer0/attention" (for backward/optimizer scopes)
  Instruction* param = nullptr;  // param type
  Instruction* value = nullptr;  // act type
  Instruction* grad = nullptr;   // act type, accumulated by backward
  // Optimizer state: Adam's first and second moments (m, v); LARS's momentum (m); Adafactor's
  // factored second moments of a weight of rank >= 2 (m: the row factor, v: the column factor) or
  // the second moment of a vector (m).
  Instruction* m = nullptr;
  Instruction* v = nullptr;
};

// Adds a weight "<prefix>_<name>" as the next entry parameter, scoped "<scope prefix>/<scope>" (or
// "<scope prefix>" for an empty scope; the scope prefix is `prefix` unless given, and must be the
// forward's scope of the block: "stage1/block0" for weights named "stage1_block0_..."), to a
// list whose capacity was reserved (the returned pointers stay valid).
using WeightAdder = std::function<Weight*(const std::string& name, const std::string& scope, const Shape& shape)>;
WeightAdder MakeWeightAdder(Builder& b, std::vector<Weight>& weights, const std::string& prefix, int64_t* next_param,
                            const std::string& scope_prefix = "");
// Every weight's value in the activation type ("cast_<name>" where the types differ).
void CastWeights(Net& net, std::vector<Weight>& weights);

Status CheckPositive(const std::vector<std::pair<const char*, int64_t>>& values);
// Fails when a tensor of these dims would have more than 2^50 elements (shapes stay in int64 with
// room for byte sizes).
Status CheckElementCount(const std::vector<Dims>& tensors);

// ---- normalisation: y = (x - mean) * rsqrt(var + eps) * gamma (+ beta) --------------------------------
// Mean and variance are taken over the `stats` dims; gamma (and beta) lie along the `param` dims.
// LayerNorm: stats = param = {last}. BatchNorm: stats = every dim but the feature dim, param = {feature}.

struct NormSaved {
  Instruction* xhat = nullptr;  // normalised input
  Instruction* r = nullptr;     // rsqrt(var + eps), over the dims outside `stats`
  Instruction* y = nullptr;
  Dims stats, param;
};
using LayerNormSaved = NormSaved;

constexpr double kLayerNormEps = 1e-6;
constexpr double kBatchNormEps = 1e-3;

NormSaved NormalizeForward(Net& net, Instruction* x, const Dims& stats, Instruction* gamma, Instruction* beta,
                           const Dims& param, double eps);
// Returns dx; sets *dgamma (and *dbeta when beta was used) to this use's contribution.
Instruction* NormalizeBackward(Net& net, const NormSaved& s, Instruction* gamma, Instruction* dy, Instruction** dgamma,
                               Instruction** dbeta = nullptr);

// LayerNorm without bias over the last dim; gamma is [M], or [P..., M] for layers stacked along
// x's leading dims P (one scale per leading index).
NormSaved LayerNormForward(Net& net, Instruction* x, Instruction* gamma);
Instruction* LayerNormBackward(Net& net, const NormSaved& s, Instruction* gamma, Instruction* dy, Instruction** dgamma);

// BatchNorm over every dim but the last (features), training mode (batch statistics). With
// `group_dims` = k, x's first k dims index groups normalised separately (statistics over the other
// dims but the last; gamma and beta shared).
NormSaved BatchNormForward(Net& net, Instruction* x, Instruction* gamma, Instruction* beta, int64_t group_dims = 0);

// ---- optimizer -----------------------------------------------------------------------------------------

struct UpdateResult {
  std::vector<Instruction*> params, m, v;
};

// SGD: w' = w - lr g. Adam (no bias correction): m' = 0.9 m + 0.1 g, v' = 0.999 v + 0.001 g^2,
// w' = w - lr m' / (sqrt(v') + 1e-8). LARS (You, Gitman and Ginsburg 2017; the optimizer of the
// weight-update-sharding paper's ResNet-50), for weights of rank > 1:
//   trust = eta |w| / (|g| + wd |w|)   (1 when |w| or |g| is 0)
//   m' = mu m + lr trust (g + wd w),  w' = w - m'
// and plain momentum (m' = mu m + lr g) for vectors (BatchNorm scales and offsets, biases), with
// the commonly used eta, wd and mu below. Adafactor (Shazeer and Stern 2018, Algorithms 4/5 with
// beta1 = 0, a fixed decay beta2 and update clipping d = 1), for a weight [..., R, C] with
// g2 = g^2 + 1e-30:
//   row' = b2 row + (1-b2) mean_C(g2)   [..., R]     col' = b2 col + (1-b2) mean_R(g2)   [..., C]
//   v = row' (x) col' / mean_R(row'),  u = g / sqrt(v),  w' = w - lr u / max(1, rms(u))
// and an unfactored v' = b2 v + (1-b2) g2 for vectors. Its means, the RMS and LARS's norms are the
// reduces a weight-update-sharding pass runs on shards (its paper, section 4.1).
constexpr double kLarsEta = 0.001, kLarsWeightDecay = 1e-4, kLarsMomentum = 0.9;
constexpr double kAdafactorDecay = 0.999, kAdafactorEps = 1e-30;
UpdateResult ApplyOptimizer(Net& net, Optimizer opt, double lr, std::vector<Weight>& weights);
// Converts each accumulated gradient to the parameter type (backward scope).
void FinishGradients(Net& net, std::vector<Weight>& weights, PrimitiveType param_type);
Instruction* MakeRoot(Net& net, Instruction* loss, std::vector<Weight>& weights, Optimizer opt, double lr);
// Loss 0.5 * mean((out - target)^2) and its gradient with respect to `out`.
std::pair<Instruction*, Instruction*> MseLoss(Net& net, Instruction* out, Instruction* target);
// A training loop of `steps` steps around a one-step module whose entry takes the batch inputs
// first (`batch_inputs` parameters: x, target, ...), then the weights and optimizer state, and
// returns (loss, new weights and state in parameter order). The loop's entry takes each batch input
// with a leading [steps] dim (step i reads slice i) and the initial weights and state, carries
// them through a while loop (known trip count) whose body is the step, and returns
// (final weights and state..., last loss). Shardings of the step carry over (a batch input's gain
// an unsplit leading dim).
Result<std::unique_ptr<Module>> WrapInTrainingLoop(const Module& step, int64_t steps, int64_t batch_inputs);
// Softmax cross-entropy over the last dim (classes) against `labels` (a distribution per row, e.g.
// one-hot), averaged over the rows: -mean(sum(labels * log_softmax(logits))). Returns the loss and
// its gradient with respect to the logits ((softmax - labels) / rows for a distribution).
std::pair<Instruction*, Instruction*> SoftmaxCrossEntropy(Net& net, Instruction* logits, Instruction* labels);
// One-hot encoding of integer ids [...] over `classes`: [..., classes] of type `t`, 1 where the
// last index equals the id (iota == broadcast(ids)), so an id outside [0, classes) gives a zero
// row. A dot of the one-hot with a table [classes, F] is the table lookup TPU models of the
// GSPMD paper's time used for embeddings (a matmul on the matrix units instead of a gather).
Instruction* OneHot(Net& net, Instruction* ids, int64_t classes, PrimitiveType t, const std::string& name = "");
// Adds the optimizer's state parameters: Adam m for every weight, then v for every weight; LARS
// the momentum for every weight (named "<weight>_m"); Adafactor "<weight>_adafactor_row" (or
// "_adafactor_v" for a vector) for every weight, then "<weight>_adafactor_col" for every weight of
// rank >= 2; nothing for SGD.
void AddOptimizerState(Builder& b, std::vector<Weight>& weights, Optimizer opt, int64_t* next_param);
void AccumulateGrad(Builder& b, Instruction** acc, Instruction* g);


// The settings of a training step every family has: "backward", "optimizer", "learning_rate",
// "dtype", "act_dtype", "mesh_x", "mesh_y".
template <typename Config>
void ReadTrainingParameters(ZooParams& p, Config& c) {
  c.backward = p.Bool("backward");
  c.optimizer = ReadOptimizer(p);
  c.learning_rate = p.Real("learning_rate");
  c.param_type = p.FloatType("dtype", PrimitiveType::kF32);
  c.act_type = p.FloatType("act_dtype", c.param_type);
  c.mesh_x = p.Int("mesh_x");
  c.mesh_y = p.Int("mesh_y");
}
// Their consistency: an optimizer step needs backward; both element types floating point.
template <typename Config>
Status CheckTrainingParameters(const Config& c) {
  if (c.optimizer != Optimizer::kNone && !c.backward) return Error("an optimizer step needs backward=1");
  if (!IsFloatingPoint(c.param_type) || !IsFloatingPoint(c.act_type))
    return Error("parameter and activation types must be floating point");
  return Status::Ok();
}

// The settings the Transformer and the MLP share (both configs name them alike).
template <typename Config>
void ReadCommonParameters(ZooParams& p, Config& c) {
  c.batch = p.Int("batch");
  c.model = p.Int("model");
  c.hidden = p.Int("hidden");
  c.layers = p.Int("layers");
  ReadTrainingParameters(p, c);
  c.annotations = ReadAnnotationSet(p);
}

}  // namespace zoo
}  // namespace shardscope
