// Building blocks the zoo's models share: a thin layer over the Builder (Net), trainable weights
// with their gradients and optimizer state, argument checks, LayerNorm forward/backward, the MSE
// loss, and the optimizer step (SGD, Adam, Adafactor, LARS). Each model family (transformer.cpp,
// mlp.cpp, ...) builds its forward pass and hand-derived backward pass from these.
#pragma once

#include <cmath>
#include <cstdint>
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

enum class Optimizer : uint8_t { kNone, kSgd, kAdam, kAdafactor, kLars };
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
  // Optimizer state parameters, one per slot of OptimizerSlots (Adam: m, v; LARS: momentum;
  // Adafactor: the row and column factors of a weight of rank >= 2, else one second moment).
  std::vector<Instruction*> state;
};

Status CheckPositive(const std::vector<std::pair<const char*, int64_t>>& values);
// Fails when a tensor of these dims would have more than 2^50 elements (shapes stay in int64 with
// room for byte sizes).
Status CheckElementCount(const std::vector<Dims>& tensors);

// ---- layer norm (no bias): y = (x - mean) * rsqrt(var + eps) * gamma over the last dim ------------

struct LayerNormSaved {
  Instruction* xhat = nullptr;  // normalised input
  Instruction* r = nullptr;     // rsqrt(var + eps), [B,S]
  Instruction* y = nullptr;
};

constexpr double kLayerNormEps = 1e-6;

LayerNormSaved LayerNormForward(Net& net, Instruction* x, Instruction* gamma);
// Returns dx; accumulates dgamma into *dgamma.
Instruction* LayerNormBackward(Net& net, const LayerNormSaved& s, Instruction* gamma, Instruction* dy,
                               Instruction** dgamma);

// ---- optimizer -----------------------------------------------------------------------------------------
//
// The state each optimizer keeps per weight (its "auxiliary variables"), as named parameters:
//   sgd        none
//   adam       <w>_m, <w>_v: moving averages of g and g^2, each the weight's shape (Kingma & Ba,
//              without bias correction)
//   lars       <w>_momentum, the weight's shape (You, Gitman & Ginsburg 2017: the step of a weight
//              of rank >= 2 is scaled by the trust ratio eta |w| / (|g| + wd |w|); rank-1 weights,
//              biases and scales, take plain momentum with weight decay, as MLPerf's LARS does)
//   adafactor  a weight of rank >= 2 keeps factored second moments over its last two dims:
//              <w>_adafactor_row (the shape without the last dim) and <w>_adafactor_col (without
//              the second-last); a rank-1 weight keeps <w>_adafactor_v (Shazeer & Stern 2018,
//              Algorithm 4/5 with beta1 = 0, a fixed decay beta2 and update clipping d = 1)
// The norms, factored means and RMS are reduce ops: the non-elementwise optimizer ops a
// weight-update-sharding pass has to handle (paper 000, section 4.1).
struct OptimizerSlot {
  std::string suffix;  // "m", "v", "momentum", "adafactor_row", ...
  Shape shape;
};
std::vector<OptimizerSlot> OptimizerSlots(Optimizer opt, const Shape& weight);

struct UpdateResult {
  std::vector<Instruction*> params;
  std::vector<Instruction*> state;  // in the order AddOptimizerParameters adds the state parameters
};

UpdateResult ApplyOptimizer(Net& net, Optimizer opt, double lr, std::vector<Weight>& weights);
// Converts each accumulated gradient to the parameter type (backward scope).
void FinishGradients(Net& net, std::vector<Weight>& weights, PrimitiveType param_type);
Instruction* MakeRoot(Net& net, Instruction* loss, std::vector<Weight>& weights, Optimizer opt, double lr);
// A training loop of `steps` steps around a one-step module whose entry takes the batch inputs
// first (`batch_inputs` parameters: x, target, ...), then the weights and optimizer state, and
// returns (loss, new weights and state in parameter order). The loop's entry takes each batch input
// with a leading [steps] dim (step i reads slice i) and the initial weights and state, carries
// them through a while loop (known trip count) whose body is the step, and returns
// (final weights and state..., last loss). Shardings of the step carry over (a batch input's gain
// an unsplit leading dim).
Result<std::unique_ptr<Module>> WrapInTrainingLoop(const Module& step, int64_t steps, int64_t batch_inputs);

// Loss 0.5 * mean((out - target)^2) and its gradient with respect to `out`.
std::pair<Instruction*, Instruction*> MseLoss(Net& net, Instruction* out, Instruction* target);
// Adds the optimizer's state parameters: slot 0 for every weight, then slot 1 for every weight
// that has one (Adam: every m, then every v).
void AddOptimizerParameters(Builder& b, Optimizer opt, std::vector<Weight>& weights, int64_t* next_param);
void AccumulateGrad(Builder& b, Instruction** acc, Instruction* g);


// The settings the Transformer and the MLP share (both configs name them alike).
template <typename Config>
void ReadCommonParameters(ZooParams& p, Config& c) {
  c.batch = p.Int("batch");
  c.model = p.Int("model");
  c.hidden = p.Int("hidden");
  c.layers = p.Int("layers");
  c.backward = p.Bool("backward");
  c.optimizer = ReadOptimizer(p);
  c.learning_rate = p.Real("learning_rate");
  c.param_type = p.FloatType("dtype", PrimitiveType::kF32);
  c.act_type = p.FloatType("act_dtype", c.param_type);
  c.annotations = ReadAnnotationSet(p);
  c.mesh_x = p.Int("mesh_x");
  c.mesh_y = p.Int("mesh_y");
}

}  // namespace zoo
}  // namespace shardscope
