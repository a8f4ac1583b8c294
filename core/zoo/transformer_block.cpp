#include "core/zoo/transformer_block.h"

#include <cmath>
#include <string>

namespace shardscope::zoo {

namespace {

// Dimension lists of the prefix-free layer, moved behind `p` leading dims.
struct PrefixDims {
  int64_t p = 0;
  // Dims of the layer's own tensors: shifted by p.
  Dims At(const Dims& d) const {
    Dims r;
    for (int64_t x : d) r.push_back(x + p);
    return r;
  }
  // Batch dims of a dot / dims kept by a broadcast: the prefix dims, then the shifted ones.
  Dims Batch(const Dims& d) const {
    Dims r;
    for (int64_t i = 0; i < p; ++i) r.push_back(i);
    for (int64_t x : d) r.push_back(x + p);
    return r;
  }
  // A shape of the layer's own tensors behind the prefix of `like`.
  Dims Shape(Instruction* like, const Dims& own) const {
    Dims r;
    if (!like) return r;
    for (int64_t i = 0; i < p; ++i) r.push_back(like->shape().dim(i));
    r.insert(r.end(), own.begin(), own.end());
    return r;
  }
};

}  // namespace

TransformerBlockSaved TransformerBlockForward(Net& net, Instruction* h, const TransformerBlockWeights& w,
                                              const TransformerBlockConfig& c, const Table1Hook& annotate) {
  Builder& b = net.b();
  const PrefixDims P{c.prefix};
  const int64_t N = c.heads, D = c.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  TransformerBlockSaved sv;
  sv.x = h;
  annotate(h, Table1Tensor::kBSM, nullptr);  // the layer input activation
  {
    auto s = b.Scope("ln1");
    if (c.layernorm) sv.ln1 = LayerNormForward(net, h, w.ln1->value);
    sv.h1 = c.layernorm ? sv.ln1.y : h;
  }
  Instruction* attn_out = nullptr;
  {
    auto s = b.Scope("attention");
    Instruction* qkv = net.Dot(sv.h1, w.wqkv->value, P.Batch({}), P.Batch({}), P.At({2}), P.At({1}), "qkv");  // [B,S,3,N,D]
    annotate(qkv, Table1Tensor::kBSND, [](const Dims& d) { return Dims{d[0], d[1], -1, d[2], d[3]}; });
    const int64_t B = qkv ? qkv->shape().dim(c.prefix) : 0, S = qkv ? qkv->shape().dim(c.prefix + 1) : 0;
    auto part = [&](int64_t j, const char* n) {
      Dims starts(static_cast<size_t>(c.prefix), 0), limits = P.Shape(qkv, {B, S, j + 1, N, D});
      for (int64_t x : {int64_t{0}, int64_t{0}, j, int64_t{0}, int64_t{0}}) starts.push_back(x);
      Instruction* sl = b.Slice(qkv, starts, limits, {}, std::string(n) + "_slice");
      return b.Reshape(sl, P.Shape(qkv, {B, S, N, D}), n);
    };
    sv.q = part(0, "q");
    sv.k = part(1, "k");
    sv.v = part(2, "v");
    Instruction* scores = net.Dot(sv.q, sv.k, P.Batch({0, 2}), P.Batch({0, 2}), P.At({3}), P.At({3}), "scores");  // [B,N,S,T]
    Instruction* scaled = net.Scale(scores, scale, "scaled_scores");
    {
      auto sm = b.Scope("softmax");
      Instruction* mx = net.MaxOver(scaled, P.At({3}), "max");
      Instruction* e = b.Exp(b.Sub(scaled, net.Bcast(mx, scaled, P.Batch({0, 1, 2})), "shifted"), "exp");
      Instruction* den = net.Sum(e, P.At({3}), "sum");
      sv.p = b.Div(e, net.Bcast(den, e, P.Batch({0, 1, 2})), "probs");
    }
    sv.ctx = net.Dot(sv.p, sv.v, P.Batch({0, 1}), P.Batch({0, 2}), P.At({3}), P.At({1}), "context");   // [B,N,S,D]
    attn_out = net.Dot(sv.ctx, w.wo->value, P.Batch({}), P.Batch({}), P.At({1, 3}), P.At({0, 1}), "out");  // [B,S,M]
  }
  sv.x1 = b.Add(h, attn_out, "residual1");
  {
    auto s = b.Scope("ln2");
    if (c.layernorm) sv.ln2 = LayerNormForward(net, sv.x1, w.ln2->value);
    sv.h2 = c.layernorm ? sv.ln2.y : sv.x1;
  }
  Instruction* ffn_out = nullptr;
  {
    auto s = b.Scope("ffn");
    sv.hid = net.Dot(sv.h2, w.wi->value, P.Batch({}), P.Batch({}), P.At({2}), P.At({0}), "wi");  // [B,S,H]
    annotate(sv.hid, Table1Tensor::kBSH, nullptr);
    sv.relu = net.Relu(sv.hid, "relu");
    ffn_out = net.Dot(sv.relu, w.wout->value, P.Batch({}), P.Batch({}), P.At({2}), P.At({0}), "wo");  // [B,S,M]
  }
  sv.out = b.Add(sv.x1, ffn_out, "residual2");
  return sv;
}

Instruction* TransformerBlockBackward(Net& net, const TransformerBlockSaved& sv, TransformerBlockWeights& w,
                                      Instruction* dh, const TransformerBlockConfig& c) {
  Builder& b = net.b();
  const PrefixDims P{c.prefix};
  const int64_t N = c.heads, D = c.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const Dims none = P.Batch({});
  auto perm = [&](const Dims& own) { return P.Batch(own); };
  Instruction* dx1 = dh;  // residual2 passes the gradient through
  {
    auto s = b.Scope("ffn");
    Instruction* dffn = dh;
    AccumulateGrad(b, &w.wout->grad, net.Dot(sv.relu, dffn, none, none, P.At({0, 1}), P.At({0, 1}), "dwout"));  // [H,M]
    Instruction* drelu = net.Dot(dffn, w.wout->value, none, none, P.At({2}), P.At({1}), "drelu");              // [B,S,H]
    Instruction* dhid = net.ReluGrad(sv.hid, drelu, "dhidden");
    AccumulateGrad(b, &w.wi->grad, net.Dot(sv.h2, dhid, none, none, P.At({0, 1}), P.At({0, 1}), "dwi"));        // [M,H]
    Instruction* dh2 = net.Dot(dhid, w.wi->value, none, none, P.At({2}), P.At({1}), "dh2");                     // [B,S,M]
    Instruction* dres = dh2;
    if (c.layernorm) {
      auto s2 = b.Scope("ln2");
      Instruction* dg = nullptr;
      dres = LayerNormBackward(net, sv.ln2, w.ln2->value, dh2, &dg);
      AccumulateGrad(b, &w.ln2->grad, dg);
    }
    dx1 = b.Add(dh, dres, "dresidual1");
  }
  {
    auto s = b.Scope("attention");
    AccumulateGrad(b, &w.wo->grad, net.Dot(sv.ctx, dx1, none, none, P.At({0, 2}), P.At({0, 1}), "dwo"));   // [N,D,M]
    Instruction* dctx = b.Transpose(net.Dot(dx1, w.wo->value, none, none, P.At({2}), P.At({2})), perm({0, 2, 1, 3}),
                                    "dcontext");  // [B,N,S,D]
    Instruction* dp = net.Dot(dctx, sv.v, P.Batch({0, 1}), P.Batch({0, 2}), P.At({3}), P.At({3}), "dprobs");  // [B,N,S,T]
    Instruction* dv = b.Transpose(net.Dot(sv.p, dctx, P.Batch({0, 1}), P.Batch({0, 1}), P.At({2}), P.At({2})),
                                  perm({0, 2, 1, 3}), "dv");  // [B,T,N,D]
    Instruction* dscores = nullptr;
    {
      auto sm = b.Scope("softmax");
      Instruction* pdp = b.Mul(sv.p, dp);
      Instruction* rowsum = net.Sum(pdp, P.At({3}), "rowsum");
      Instruction* dscaled = b.Sub(pdp, b.Mul(sv.p, net.Bcast(rowsum, pdp, P.Batch({0, 1, 2}))), "dscaled");
      dscores = net.Scale(dscaled, scale, "dscores");
    }
    Instruction* dq = b.Transpose(net.Dot(dscores, sv.k, P.Batch({0, 1}), P.Batch({0, 2}), P.At({3}), P.At({1})),
                                  perm({0, 2, 1, 3}), "dq");  // [B,S,N,D]
    Instruction* dk = b.Transpose(net.Dot(dscores, sv.q, P.Batch({0, 1}), P.Batch({0, 2}), P.At({2}), P.At({1})),
                                  perm({0, 2, 1, 3}), "dk");  // [B,T,N,D]
    const int64_t B = dq ? dq->shape().dim(c.prefix) : 0, S = dq ? dq->shape().dim(c.prefix + 1) : 0;
    const Dims one = P.Shape(dq, {B, S, 1, N, D});
    Instruction* dqkv = b.Concatenate({b.Reshape(dq, one), b.Reshape(dk, one), b.Reshape(dv, one)}, c.prefix + 2,
                                      "dqkv");  // [B,S,3,N,D]
    AccumulateGrad(b, &w.wqkv->grad,
                   b.Transpose(net.Dot(sv.h1, dqkv, none, none, P.At({0, 1}), P.At({0, 1})), perm({1, 0, 2, 3}),
                               "dwqkv"));  // [3,M,N,D]
    Instruction* dh1 = net.Dot(dqkv, w.wqkv->value, none, none, P.At({2, 3, 4}), P.At({0, 2, 3}), "dh1");  // [B,S,M]
    Instruction* dres = dh1;
    if (c.layernorm) {
      auto s2 = b.Scope("ln1");
      Instruction* dg = nullptr;
      dres = LayerNormBackward(net, sv.ln1, w.ln1->value, dh1, &dg);
      AccumulateGrad(b, &w.ln1->grad, dg);
    }
    return b.Add(dx1, dres, "dx");
  }
}

}  // namespace shardscope::zoo
