// Reference evaluator: every op family against hand-computed results (HLO text in, numbers out),
// XLA's edge semantics (index clamping, scatter out-of-bounds, integer division by zero, bf16
// rounding), and Errors (never crashes) for unsupported ops and bad arguments.
#include <QtTest>

#include <cmath>
#include <string>
#include <vector>

#include "core/eval/evaluator.h"
#include "core/ir/hlo_text.h"
#include "core/ir/ir.h"
#include "core/eval/tensor.h"

using namespace shardscope;

namespace {

Tensor T(PrimitiveType t, std::vector<int64_t> dims, std::vector<double> v) {
  auto r = Tensor::FromValues(t, std::move(dims), v);
  if (!r.ok()) qFatal("bad tensor: %s", r.error().message.c_str());
  return *r;
}
Tensor F32(std::vector<int64_t> dims, std::vector<double> v) { return T(PrimitiveType::kF32, std::move(dims), std::move(v)); }
Tensor S32(std::vector<int64_t> dims, std::vector<double> v) { return T(PrimitiveType::kS32, std::move(dims), std::move(v)); }

// Parses (with the verifier) and evaluates.
Result<Tensor> Eval(const std::string& text, const std::vector<Tensor>& args, bool verify = true) {
  ParseOptions po;
  po.verify = verify;
  auto m = ParseHloModule(text, "test.hlo", po);
  if (!m.ok()) return Error("parse: " + m.error().message);
  return Evaluate(**m, args);
}

std::string Diff(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  if (got.size() != want.size())
    return "size " + std::to_string(got.size()) + " != expected " + std::to_string(want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    if (!both_nan && !(std::fabs(got[i] - want[i]) <= tol))
      return "element " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", expected " + std::to_string(want[i]);
  }
  return {};
}

#define EXPECT_OK(r) QVERIFY2((r).ok(), (r).ok() ? "" : (r).error().message.c_str())
#define EXPECT_VALUES(tensor, ...)                                                     \
  do {                                                                                 \
    const std::string _d = Diff((tensor).ToDoubles(), std::vector<double>__VA_ARGS__, 1e-6); \
    QVERIFY2(_d.empty(), _d.c_str());                                                  \
  } while (0)
#define EXPECT_DIMS(tensor, ...) QCOMPARE((tensor).dims(), (std::vector<int64_t> __VA_ARGS__))

const char* kAdd = R"(
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
)";
const char* kMax = R"(
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
)";

}  // namespace

class TestEvaluator : public QObject {
  Q_OBJECT

 private slots:
  void tensorRoundsBf16AndWrapsInts() {
    // bf16 keeps 8 significant bits: 1 + 2^-8 is a tie and rounds to even (1.0); 1 + 3*2^-8 rounds
    // up to 1 + 2^-6.
    Tensor b(Shape(PrimitiveType::kBF16, {3}));
    b.SetDouble(0, 1.0 + std::ldexp(1.0, -8));
    b.SetDouble(1, 1.0 + 3 * std::ldexp(1.0, -8));
    b.SetDouble(2, 3.140625);
    EXPECT_VALUES(b, {1.0, 1.015625, 3.140625});
    Tensor s(Shape(PrimitiveType::kS8, {2}));
    s.SetInt(0, 130);   // wraps to -126
    s.SetInt(1, -129);  // wraps to 127
    EXPECT_VALUES(s, {-126, 127});
    Tensor u(Shape(PrimitiveType::kU8, {1}));
    u.SetInt(0, -1);
    EXPECT_VALUES(u, {255});
    Tensor f16(Shape(PrimitiveType::kF16, {1}));
    f16.SetDouble(0, 1.0 + std::ldexp(1.0, -12));  // below half an f16 ulp (2^-11): rounds to 1
    EXPECT_VALUES(f16, {1.0});
    QCOMPARE(ReducePrecisionF32(1.0f + std::ldexp(1.0f, -9), 8, 7), 1.0f);
    QVERIFY(!Tensor::FromValues(PrimitiveType::kF32, {2, 2}, {1, 2, 3}).ok());
    QVERIFY(!Tensor::FromValues(PrimitiveType::kC64, {1}, {1}).ok());
  }

  void tensorCopiesShareUntilWritten() {
    Tensor a = F32({3}, {1, 2, 3});
    Tensor b = a;
    QVERIFY(b.SharesBufferWith(a));
    b.SetDouble(1, 20);  // copy-on-write: a keeps its values
    QVERIFY(!b.SharesBufferWith(a));
    EXPECT_VALUES(a, {1, 2, 3});
    EXPECT_VALUES(b, {1, 20, 3});
    Tensor c = a;
    c.floats()[0] = 10;  // the raw accessor un-shares too
    EXPECT_VALUES(a, {1, 2, 3});
    EXPECT_VALUES(c, {10, 2, 3});
    Tensor t = Tensor::Tuple({a, c});
    QVERIFY(t.element(0).SharesBufferWith(a));
  }

  void elementwiseFloat() {
    auto r = Eval(R"(HloModule m
ENTRY e {
  a = f32[4] parameter(0)
  b = f32[4] parameter(1)
  add = f32[4] add(a, b)
  mul = f32[4] multiply(add, b)
  div = f32[4] divide(mul, a)
  mx = f32[4] maximum(div, b)
  ng = f32[4] negate(mx)
  ab = f32[4] abs(ng)
  ROOT t = (f32[4], f32[4], f32[4], f32[4]) tuple(add, mul, div, ab)
})",
                  {F32({4}, {1, 2, -4, 0.5}), F32({4}, {3, -1, 2, 8})});
    EXPECT_OK(r);
    QCOMPARE(r->element_count(), int64_t{4});
    EXPECT_VALUES(r->element(0), {4, 1, -2, 8.5});
    EXPECT_VALUES(r->element(1), {12, -1, -4, 68});
    EXPECT_VALUES(r->element(2), {12, -0.5, 1, 136});
    EXPECT_VALUES(r->element(3), {12, 0.5, 2, 136});

    auto u = Eval(R"(HloModule m
ENTRY e {
  a = f32[4] parameter(0)
  e = f32[4] exponential(a)
  l = f32[4] log(e)
  s = f32[4] sqrt(e)
  t = f32[4] tanh(a)
  fl = f32[4] floor(a)
  rn = f32[4] round-nearest-even(a)
  ra = f32[4] round-nearest-afz(a)
  sg = f32[4] sign(a)
  lg = f32[4] logistic(a)
  ROOT r = (f32[4], f32[4], f32[4], f32[4], f32[4], f32[4], f32[4], f32[4]) tuple(l, s, t, fl, rn, ra, sg, lg)
})",
                  {F32({4}, {0, 2.5, -0.5, 1})});
    EXPECT_OK(u);
    QVERIFY(Diff(u->element(0).ToDoubles(), {0, 2.5, -0.5, 1}, 1e-6).empty());
    QVERIFY(Diff(u->element(1).ToDoubles(), {1, std::exp(1.25), std::exp(-0.25), std::exp(0.5)}, 1e-6).empty());
    QVERIFY(Diff(u->element(2).ToDoubles(), {0, std::tanh(2.5), std::tanh(-0.5), std::tanh(1.0)}, 1e-6).empty());
    EXPECT_VALUES(u->element(3), {0, 2, -1, 1});
    EXPECT_VALUES(u->element(4), {0, 2, -0.0, 1});   // ties to even: 2.5 -> 2, -0.5 -> -0
    EXPECT_VALUES(u->element(5), {0, 3, -1, 1});     // ties away from zero
    EXPECT_VALUES(u->element(6), {0, 1, -1, 1});
    QVERIFY(Diff(u->element(7).ToDoubles(), {0.5, 1 / (1 + std::exp(-2.5)), 1 / (1 + std::exp(0.5)), 1 / (1 + std::exp(-1.0))}, 1e-6).empty());
  }

  void integerSemantics() {
    auto r = Eval(R"(HloModule m
ENTRY e {
  a = s32[5] parameter(0)
  b = s32[5] parameter(1)
  d = s32[5] divide(a, b)
  m = s32[5] remainder(a, b)
  x = s32[5] multiply(a, a)
  sl = s32[5] shift-left(b, b)
  sr = s32[5] shift-right-arithmetic(a, b)
  srl = s32[5] shift-right-logical(a, b)
  ROOT t = (s32[5], s32[5], s32[5], s32[5], s32[5], s32[5]) tuple(d, m, x, sl, sr, srl)
})",
                  {S32({5}, {7, -7, 5, 65536, -8}), S32({5}, {2, 2, 0, 3, 1})});
    EXPECT_OK(r);
    EXPECT_VALUES(r->element(0), {3, -3, -1, 21845, -8});           // truncation; x / 0 = -1
    EXPECT_VALUES(r->element(1), {1, -1, 5, 1, 0});                 // sign of dividend; x % 0 = x
    EXPECT_VALUES(r->element(2), {49, 49, 25, 0, 64});              // 65536^2 wraps to 0 in s32
    EXPECT_VALUES(r->element(3), {8, 8, 0, 24, 2});
    EXPECT_VALUES(r->element(4), {1, -2, 5, 8192, -4});            // arithmetic: floor(-7 / 4)
    EXPECT_VALUES(r->element(5), {1, 1073741822, 5, 8192, 2147483644});  // logical: -7, -8 read as u32
  }

  void compareSelectClamp() {
    auto r = Eval(R"(HloModule m
ENTRY e {
  a = f32[3] parameter(0)
  b = f32[3] parameter(1)
  eq = pred[3] compare(a, b), direction=EQ
  ne = pred[3] compare(a, b), direction=NE
  lt = pred[3] compare(a, b), direction=LT
  le = pred[3] compare(a, b), direction=LE
  gt = pred[3] compare(a, b), direction=GT
  ge = pred[3] compare(a, b), direction=GE
  s = f32[3] select(lt, a, b)
  lo = f32[] constant(0)
  hi = f32[] constant(2.5)
  c = f32[3] clamp(lo, a, hi)
  ROOT t = (pred[3], pred[3], pred[3], pred[3], pred[3], pred[3], f32[3], f32[3]) tuple(eq, ne, lt, le, gt, ge, s, c)
})",
                  {F32({3}, {1, 2, 3}), F32({3}, {2, 2, -1})});
    EXPECT_OK(r);
    EXPECT_VALUES(r->element(0), {0, 1, 0});
    EXPECT_VALUES(r->element(1), {1, 0, 1});
    EXPECT_VALUES(r->element(2), {1, 0, 0});
    EXPECT_VALUES(r->element(3), {1, 1, 0});
    EXPECT_VALUES(r->element(4), {0, 0, 1});
    EXPECT_VALUES(r->element(5), {0, 1, 1});
    EXPECT_VALUES(r->element(6), {1, 2, -1});
    EXPECT_VALUES(r->element(7), {1, 2, 2.5});
  }

  void convertAndBitcast() {
    auto r = Eval(R"(HloModule m
ENTRY e {
  a = f32[4] parameter(0)
  i = s32[4] convert(a)
  u = u8[4] convert(a)
  b = bf16[4] convert(a)
  p = pred[4] convert(a)
  one = f32[] constant(1)
  bits = s32[] bitcast-convert(one)
  ROOT t = (s32[4], u8[4], bf16[4], pred[4], s32[]) tuple(i, u, b, p, bits)
})",
                  {F32({4}, {-2.7, 3.9, 1e10, 1.0078125})});
    EXPECT_OK(r);
    EXPECT_VALUES(r->element(0), {-2, 3, 2147483647, 1});  // truncate toward zero, saturate
    EXPECT_VALUES(r->element(1), {0, 3, 255, 1});
    // bf16: 1.0078125 = 1 + 2^-7 is representable; -2.7 -> -2.703125; 3.9 -> 3.90625.
    EXPECT_VALUES(r->element(2), {-2.703125, 3.90625, 9999220736.0, 1.0078125});
    EXPECT_VALUES(r->element(3), {1, 1, 1, 1});
    EXPECT_VALUES(r->element(4), {1065353216});  // 0x3f800000
  }

  void bf16ArithmeticRoundsEveryWrite() {
    auto r = Eval(R"(HloModule m
ENTRY e {
  a = bf16[2] parameter(0)
  b = bf16[2] parameter(1)
  ROOT s = bf16[2] add(a, b)
})",
                  {T(PrimitiveType::kBF16, {2}, {1, 256}), T(PrimitiveType::kBF16, {2}, {0.001953125, 1})});
    EXPECT_OK(r);
    // 1 + 2^-9 is below half a bf16 ulp at 1 (2^-8): stays 1; 256 + 1 = 257 rounds to even 256.
    EXPECT_VALUES(*r, {1, 256});
  }

  void constantsIotaBroadcastReshapeTranspose() {
    auto r = Eval(R"(HloModule m
ENTRY e {
  c = f32[2,3] constant({{1, 2, 3}, {4, 5, 6}})
  t = f32[3,2] transpose(c), dimensions={1,0}
  rs = f32[6] reshape(t)
  io = s32[2,3] iota(), iota_dimension=1
  v = f32[3] constant({10, 20, 30})
  bc = f32[2,3] broadcast(v), dimensions={1}
  sc = f32[] constant(7)
  bs = f32[2,2] broadcast(sc), dimensions={}
  ROOT tu = (f32[6], s32[2,3], f32[2,3], f32[2,2]) tuple(rs, io, bc, bs)
})",
                  {});
    EXPECT_OK(r);
    EXPECT_VALUES(r->element(0), {1, 4, 2, 5, 3, 6});
    EXPECT_VALUES(r->element(1), {0, 1, 2, 0, 1, 2});
    EXPECT_VALUES(r->element(2), {10, 20, 30, 10, 20, 30});
    EXPECT_VALUES(r->element(3), {7, 7, 7, 7});
  }

  void constantFromTextOnly() {
    // A module built in code with only Literal::text set (no parsed values).
    Module m("lit");
    Computation* c = m.AddComputation("main", true);
    Instruction* k = c->AddInstruction(Opcode::kConstant, Shape(PrimitiveType::kS32, {2, 2}), {}, "k");
    k->literal.text = "{ {1, -2}, {3, 4} }";
    Instruction* b = c->AddInstruction(Opcode::kConstant, Shape(PrimitiveType::kPred, {2}), {}, "b");
    b->literal.text = "{true, false}";
    c->set_root(c->AddInstruction(Opcode::kTuple, Shape::Tuple({k->shape(), b->shape()}), {k, b}));
    auto r = Evaluate(m, {});
    EXPECT_OK(r);
    EXPECT_VALUES(r->element(0), {1, -2, 3, 4});
    EXPECT_VALUES(r->element(1), {1, 0});
    k->literal.text = "{1, 2, 3}";  // wrong count: an Error, not a crash
    auto bad = Evaluate(m, {});
    QVERIFY(!bad.ok());
    QVERIFY(bad.error().message.find("%k") != std::string::npos);
  }

  void sliceConcatReversePad() {
    auto r = Eval(R"(HloModule m
ENTRY e {
  a = f32[6] parameter(0)
  s = f32[3] slice(a), slice={[1:6:2]}
  c = f32[9] concatenate(a, s), dimensions={0}
  rv = f32[6] reverse(a), dimensions={0}
  z = f32[] constant(0)
  x = f32[3] slice(a), slice={[0:3]}
  pi = f32[8] pad(x, z), padding=1_2_1
  pn = f32[3] pad(x, z), padding=-1_1
  ROOT t = (f32[3], f32[9], f32[6], f32[8], f32[3]) tuple(s, c, rv, pi, pn)
})",
                  {F32({6}, {1, 2, 3, 4, 5, 6})});
    EXPECT_OK(r);
    EXPECT_VALUES(r->element(0), {2, 4, 6});
    EXPECT_VALUES(r->element(1), {1, 2, 3, 4, 5, 6, 2, 4, 6});
    EXPECT_VALUES(r->element(2), {6, 5, 4, 3, 2, 1});
    EXPECT_VALUES(r->element(3), {0, 1, 0, 2, 0, 3, 0, 0});  // low 1, interior 1, high 2
    EXPECT_VALUES(r->element(4), {2, 3, 0});                 // negative low padding crops
  }

  void pad2D() {
    auto r = Eval(R"(HloModule m
ENTRY e {
  a = f32[2,2] parameter(0)
  v = f32[] constant(-1)
  ROOT p = f32[3,5] pad(a, v), padding=0_1x1_1_1
})",
                  {F32({2, 2}, {1, 2, 3, 4})});
    EXPECT_OK(r);
    EXPECT_VALUES(*r, {-1, 1, -1, 2, -1, -1, 3, -1, 4, -1, -1, -1, -1, -1, -1});
  }

  void dynamicSliceClampsStartIndices() {
    const char* text = R"(HloModule m
ENTRY e {
  a = f32[10] parameter(0)
  i = s32[] parameter(1)
  ROOT d = f32[4] dynamic-slice(a, i), dynamic_slice_sizes={4}
})";
    Tensor a = F32({10}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
    auto r = Eval(text, {a, S32({}, {8})});
    EXPECT_OK(r);
    EXPECT_VALUES(*r, {6, 7, 8, 9});  // start 8 clamped to 10 - 4 = 6
    r = Eval(text, {a, S32({}, {-3})});
    EXPECT_OK(r);
    EXPECT_VALUES(*r, {0, 1, 2, 3});
    r = Eval(text, {a, S32({}, {2})});
    EXPECT_OK(r);
    EXPECT_VALUES(*r, {2, 3, 4, 5});

    auto u = Eval(R"(HloModule m
ENTRY e {
  a = f32[2,4] parameter(0)
  u = f32[1,2] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT d = f32[2,4] dynamic-update-slice(a, u, i, j)
})",
                  {F32({2, 4}, {0, 0, 0, 0, 0, 0, 0, 0}), F32({1, 2}, {7, 8}), S32({}, {5}), S32({}, {3})});
    EXPECT_OK(u);
    EXPECT_VALUES(*u, {0, 0, 0, 0, 0, 0, 7, 8});  // (5,3) clamped to (1,2)
  }

  void dotMatrixAndBatch() {
    // [[1,2,3],[4,5,6]] . [[7,8],[9,10],[11,12]] = [[58,64],[139,154]]
    auto r = Eval(R"(HloModule m
ENTRY e {
  a = f32[2,3] parameter(0)
  b = f32[3,2] parameter(1)
  ROOT d = f32[2,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})",
                  {F32({2, 3}, {1, 2, 3, 4, 5, 6}), F32({3, 2}, {7, 8, 9, 10, 11, 12})});
    EXPECT_OK(r);
    EXPECT_VALUES(*r, {58, 64, 139, 154});

    // Contracting lhs dim 0 (A^T . B): A f32[3,2] = [[1,4],[2,5],[3,6]] gives the same product.
    r = Eval(R"(HloModule m
ENTRY e {
  a = f32[3,2] parameter(0)
  b = f32[3,2] parameter(1)
  ROOT d = f32[2,2] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}
})",
             {F32({3, 2}, {1, 4, 2, 5, 3, 6}), F32({3, 2}, {7, 8, 9, 10, 11, 12})});
    EXPECT_OK(r);
    EXPECT_VALUES(*r, {58, 64, 139, 154});

    // Batched: batch dim 0; batch 0 = I . [[1,2],[3,4]], batch 1 = [[0,1],[1,0]] . [[5,6],[7,8]].
    r = Eval(R"(HloModule m
ENTRY e {
  a = f32[2,2,2] parameter(0)
  b = f32[2,2,2] parameter(1)
  ROOT d = f32[2,2,2] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}
})",
             {F32({2, 2, 2}, {1, 0, 0, 1, 0, 1, 1, 0}), F32({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})});
    EXPECT_OK(r);
    EXPECT_VALUES(*r, {1, 2, 3, 4, 7, 8, 5, 6});

    // Integer dot; result dims are batch, lhs free, rhs free.
    r = Eval(R"(HloModule m
ENTRY e {
  a = s32[3] parameter(0)
  b = s32[3,2] parameter(1)
  ROOT d = s32[2] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}
})",
             {S32({3}, {1, 2, 3}), S32({3, 2}, {1, 1, 1, 2, 1, 3})});
    EXPECT_OK(r);
    EXPECT_VALUES(*r, {6, 14});
  }

  void convolution1D() {
    // x = [1,2,3,4,5], kernel [1,0,-1]: out[j] = x[j] - x[j+2].
    const char* text = R"(HloModule m
ENTRY e {
  x = f32[1,5,1] parameter(0)
  k = f32[3,1,1] parameter(1)
  ROOT c = f32[1,%d,1] convolution(x, k), window={size=3 %s}, dim_labels=b0f_0io->b0f
})";
    auto run = [&](int out, const char* win) {
      char buf[1024];
      std::snprintf(buf, sizeof(buf), text, out, win);
      return Eval(buf, {F32({1, 5, 1}, {1, 2, 3, 4, 5}), F32({3, 1, 1}, {1, 0, -1})});
    };
    auto r = run(3, "");
    EXPECT_OK(r);
    EXPECT_VALUES(*r, {-2, -2, -2});
    r = run(5, "pad=1_1");  // padded [0,1,2,3,4,5,0]
    EXPECT_OK(r);
    EXPECT_VALUES(*r, {-2, -2, -2, -2, 4});
    r = run(3, "pad=1_1 stride=2");
    EXPECT_OK(r);
    EXPECT_VALUES(*r, {-2, -2, 4});
    r = run(1, "rhs_dilate=2");  // taps x[0], x[2], x[4]: 1 - 5
    EXPECT_OK(r);
    EXPECT_VALUES(*r, {-4});
    r = run(3, "rhs_reversal=1");  // kernel [-1,0,1]
    EXPECT_OK(r);
    EXPECT_VALUES(*r, {2, 2, 2});

    // lhs_dilate=2 (transposed conv): [1,0,2,0,3] with kernel [1,1] -> [1,2,2,3].
    auto t = Eval(R"(HloModule m
ENTRY e {
  x = f32[1,3,1] parameter(0)
  k = f32[2,1,1] parameter(1)
  ROOT c = f32[1,4,1] convolution(x, k), window={size=2 lhs_dilate=2}, dim_labels=b0f_0io->b0f
})",
                  {F32({1, 3, 1}, {1, 2, 3}), F32({2, 1, 1}, {1, 1})});
    EXPECT_OK(t);
    EXPECT_VALUES(*t, {1, 2, 2, 3});
  }

  void convolutionFeatureGroupsAndLayouts() {
    // Depthwise: 2 channels, feature_group_count=2; channel 0 kernel [1,1], channel 1 kernel [1,-1].
    // Input bf0 layout: x[b=0, f, w].
    auto r = Eval(R"(HloModule m
ENTRY e {
  x = f32[1,2,3] parameter(0)
  k = f32[2,1,2] parameter(1)
  ROOT c = f32[1,2,2] convolution(x, k), window={size=2}, dim_labels=bf0_0io->bf0, feature_group_count=2
})",
                  {F32({1, 2, 3}, {1, 2, 3, 10, 20, 40}), F32({2, 1, 2}, {1, 1, 1, -1})});
    EXPECT_OK(r);
    // channel 0: [1+2, 2+3] = [3,5]; channel 1: [10-20, 20-40] = [-10,-20]
    EXPECT_VALUES(*r, {3, 5, -10, -20});

    // 2-D conv, 2 input features, 1 output feature, 2x2 kernel of ones on a 3x3 input: window sums.
    std::vector<double> img(18);
    for (int i = 0; i < 9; ++i) {
      img[static_cast<size_t>(2 * i)] = i + 1;  // feature 0
      img[static_cast<size_t>(2 * i + 1)] = 1;  // feature 1
    }
    auto r2 = Eval(R"(HloModule m
ENTRY e {
  x = f32[1,3,3,2] parameter(0)
  k = f32[2,2,2,1] parameter(1)
  ROOT c = f32[1,2,2,1] convolution(x, k), window={size=2x2}, dim_labels=b01f_01io->b01f
})",
                   {F32({1, 3, 3, 2}, img), F32({2, 2, 2, 1}, std::vector<double>(8, 1.0))});
    EXPECT_OK(r2);
    EXPECT_VALUES(*r2, {1 + 2 + 4 + 5 + 4, 2 + 3 + 5 + 6 + 4, 4 + 5 + 7 + 8 + 4, 5 + 6 + 8 + 9 + 4});
  }

  void convolutionBatchGroups() {
    // batch_group_count=2: output feature f convolves input batch f with kernel feature f.
    auto r = Eval(R"(HloModule m
ENTRY e {
  x = f32[2,1,3] parameter(0)
  k = f32[2,1,2] parameter(1)
  ROOT c = f32[1,2,2] convolution(x, k), window={size=2}, dim_labels=bf0_0io->bf0, batch_group_count=2
})",
                  {F32({2, 1, 3}, {1, 2, 3, 10, 20, 30}), F32({2, 1, 2}, {1, 1, 1, -1})});
    EXPECT_OK(r);
    EXPECT_VALUES(*r, {3, 5, -10, -10});
  }

  void convolutionFastPathMatchesReferenceLoop() {
    // Float convolutions run as im2col + GEMM, integer ones as a direct loop: on integer-valued
    // inputs both must give identical results for every window feature.
    const char* windows[] = {"size=3x2", "size=3x2 stride=2x1 pad=1_2x0_1", "size=3x2 lhs_dilate=2x1 rhs_dilate=1x2 pad=1_1x1_1",
                             "size=3x2 rhs_reversal=1x0 stride=1x2"};
    std::vector<double> xv(2 * 5 * 4 * 4), kv(3 * 2 * 2 * 6);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<double>((i * 7) % 11) - 5;
    for (size_t i = 0; i < kv.size(); ++i) kv[i] = static_cast<double>((i * 5) % 7) - 3;
    for (const char* w : windows) {
      for (const char* type : {"f32", "s32"}) {
        std::string t = R"(HloModule m
ENTRY e {
  x = T[2,5,4,4] parameter(0)
  k = T[3,2,2,6] parameter(1)
  ROOT c = T[2,OUT,6] convolution(x, k), window={WIN}, dim_labels=b01f_01io->b01f, feature_group_count=2
})";
        auto subst = [&](const std::string& from, const std::string& to) {
          for (size_t p; (p = t.find(from)) != std::string::npos;) t.replace(p, from.size(), to);
        };
        subst("WIN", w);
        // Output spatial sizes for each window above.
        const std::string out = std::string(w) == "size=3x2" ? "3,3" : std::string(w).find("stride=2x1") != std::string::npos ? "3,4"
                              : std::string(w).find("lhs_dilate") != std::string::npos ? "9,4" : "3,2";
        subst("OUT", out);
        subst("T[", std::string(type) + "[");
        const PrimitiveType pt = std::string(type) == "f32" ? PrimitiveType::kF32 : PrimitiveType::kS32;
        auto r = Eval(t, {T(pt, {2, 5, 4, 4}, xv), T(pt, {3, 2, 2, 6}, kv)});
        QVERIFY2(r.ok(), (std::string(w) + ": " + (r.ok() ? "" : r.error().message)).c_str());
        static Tensor float_result;
        if (pt == PrimitiveType::kF32) {
          float_result = *r;
        } else {
          const std::string d = Diff(r->ToDoubles(), float_result.ToDoubles(), 0);
          QVERIFY2(d.empty(), (std::string(w) + ": " + d).c_str());
          double sum_abs = 0;
          for (double v : r->ToDoubles()) sum_abs += std::fabs(v);
          QVERIFY(sum_abs > 0);
        }
      }
    }
  }

  void reduceFastAndGeneralPaths() {
    const std::string text = std::string("HloModule m\n") + kAdd + kMax + R"(
sumsq {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  bb = f32[] multiply(b, b)
  ROOT s = f32[] add(a, bb)
}
ENTRY e {
  x = f32[2,3] parameter(0)
  z = f32[] constant(0)
  ninf = f32[] constant(-inf)
  s1 = f32[2] reduce(x, z), dimensions={1}, to_apply=add
  m0 = f32[3] reduce(x, ninf), dimensions={0}, to_apply=max
  sq = f32[2] reduce(x, z), dimensions={1}, to_apply=sumsq
  all = f32[] reduce(x, z), dimensions={0,1}, to_apply=add
  ROOT t = (f32[2], f32[3], f32[2], f32[]) tuple(s1, m0, sq, all)
})";
    auto r = Eval(text, {F32({2, 3}, {1, 2, 3, 4, 5, 6})});
    EXPECT_OK(r);
    EXPECT_VALUES(r->element(0), {6, 15});
    EXPECT_VALUES(r->element(1), {4, 5, 6});
    EXPECT_VALUES(r->element(2), {14, 77});
    EXPECT_VALUES(r->element(3), {21});
  }

  void variadicReduceArgmax() {
    auto r = Eval(R"(HloModule m
argmax {
  av = f32[] parameter(0)
  ai = s32[] parameter(1)
  bv = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(bv, av), direction=GT
  v = f32[] select(gt, bv, av)
  i = s32[] select(gt, bi, ai)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
ENTRY e {
  x = f32[2,4] parameter(0)
  idx = s32[2,4] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  m1 = s32[] constant(-1)
  ROOT r = (f32[2], s32[2]) reduce(x, idx, ninf, m1), dimensions={1}, to_apply=argmax
})",
                  {F32({2, 4}, {3, 9, 2, 9, 0, -1, 5, 4})});
    EXPECT_OK(r);
    EXPECT_VALUES(r->element(0), {9, 5});
    EXPECT_VALUES(r->element(1), {1, 2});  // first maximum wins
  }

  void reduceWindowAndSelectAndScatter() {
    const std::string text = std::string("HloModule m\n") + kAdd + kMax + R"(
ENTRY e {
  x = f32[6] parameter(0)
  ninf = f32[] constant(-inf)
  z = f32[] constant(0)
  mp = f32[3] reduce-window(x, ninf), window={size=2 stride=2}, to_apply=max
  sp = f32[6] reduce-window(x, z), window={size=3 pad=1_1}, to_apply=add
  ROOT t = (f32[3], f32[6]) tuple(mp, sp)
})";
    auto r = Eval(text, {F32({6}, {1, 3, 2, 4, 5, 0})});
    EXPECT_OK(r);
    EXPECT_VALUES(r->element(0), {3, 4, 5});
    EXPECT_VALUES(r->element(1), {4, 6, 9, 11, 9, 5});

    // Max-pool gradient: the source value goes to the argmax of each window.
    const std::string sas = std::string("HloModule m\n") + kAdd + R"(
ge {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=GE
}
ENTRY e {
  x = f32[6] parameter(0)
  s = f32[3] parameter(1)
  z = f32[] constant(0)
  ROOT r = f32[6] select-and-scatter(x, s, z), window={size=2 stride=2}, select=ge, scatter=add
})";
    auto g = Eval(sas, {F32({6}, {1, 3, 2, 4, 5, 0}), F32({3}, {10, 20, 30})});
    EXPECT_OK(g);
    EXPECT_VALUES(*g, {0, 10, 0, 20, 30, 0});
  }

  void gatherRowsWithClamping() {
    const char* text = R"(HloModule m
ENTRY e {
  a = f32[3,3] parameter(0)
  i = s32[2] parameter(1)
  ROOT g = f32[2,3] gather(a, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,3}
})";
    Tensor a = F32({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
    auto r = Eval(text, {a, S32({2}, {2, 0})});
    EXPECT_OK(r);
    EXPECT_VALUES(*r, {7, 8, 9, 1, 2, 3});
    r = Eval(text, {a, S32({2}, {5, -1})});  // clamped to rows 2 and 0
    EXPECT_OK(r);
    EXPECT_VALUES(*r, {7, 8, 9, 1, 2, 3});

    // 2-D point gather with an explicit index vector dim: picks a[1,2] and a[2,0].
    auto p = Eval(R"(HloModule m
ENTRY e {
  a = f32[3,3] parameter(0)
  i = s32[2,2] parameter(1)
  ROOT g = f32[2] gather(a, i), offset_dims={}, collapsed_slice_dims={0,1}, start_index_map={0,1}, index_vector_dim=1, slice_sizes={1,1}
})",
                  {a, S32({2, 2}, {1, 2, 2, 0})});
    EXPECT_OK(p);
    EXPECT_VALUES(*p, {6, 7});
  }

  // A dot with an integer result of float operands converts the operands first and sums in the
  // result type (as XLA's evaluator does): [1.7, -2.5] . [2.9, 1.0] is 1*2 + (-2)*1 = 0, not
  // trunc(2.43) = 2. A fuzzing finding: converting only the sum made a dot split along its
  // contracting dim (partial dots, then an all-reduce) compute something else.
  void dotWithIntegerResultConvertsOperands() {
    auto r = Eval(R"(HloModule m
ENTRY e {
  a = f32[1,2] parameter(0)
  b = f32[2,1] parameter(1)
  ROOT d = s32[1,1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})",
                  {F32({1, 2}, {1.7f, -2.5f}), F32({2, 1}, {2.9f, 1.0f})});
    EXPECT_OK(r);
    QCOMPARE(r->GetInt(0), int64_t{0});
  }

  // A collapsed dim of slice size 0 (XLA allows 0 or 1) makes every slice empty: the result is
  // zeros and nothing is read (a fuzzing finding: the evaluator read past the operand).
  void gatherCollapsedSliceSizeZero() {
    auto r = Eval(R"(HloModule m
ENTRY e {
  a = f32[2,3] parameter(0)
  i = s32[2] parameter(1)
  ROOT g = f32[2,3] gather(a, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={0,3}
})",
                  {F32({2, 3}, {1, 2, 3, 4, 5, 6}), S32({2}, {0, 1})});
    EXPECT_OK(r);
    EXPECT_VALUES(*r, {0, 0, 0, 0, 0, 0});
  }

  void scatterAddOverwriteAndOutOfBounds() {
    const std::string text = std::string("HloModule m\n") + kAdd + R"(
ENTRY e {
  a = f32[4] parameter(0)
  i = s32[4,1] parameter(1)
  u = f32[4] parameter(2)
  ROOT s = f32[4] scatter(a, i, u), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
})";
    auto r = Eval(text, {F32({4}, {1, 1, 1, 1}), S32({4, 1}, {1, 3, 1, 9}), F32({4}, {10, 20, 30, 40})});
    EXPECT_OK(r);
    EXPECT_VALUES(*r, {1, 41, 1, 21});  // index 9 is out of bounds: skipped

    const std::string ow = R"(HloModule m
assign {
  a = f32[] parameter(0)
  ROOT b = f32[] parameter(1)
}
ENTRY e {
  a = f32[3,2] parameter(0)
  i = s32[1] parameter(1)
  u = f32[1,2] parameter(2)
  ROOT s = f32[3,2] scatter(a, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=assign
})";
    auto w = Eval(ow, {F32({3, 2}, {0, 0, 0, 0, 0, 0}), S32({1}, {2}), F32({1, 2}, {5, 6})});
    EXPECT_OK(w);
    EXPECT_VALUES(*w, {0, 0, 0, 0, 5, 6});
  }

  void sortSingleAndMultiOperand() {
    auto r = Eval(R"(HloModule m
lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT r = pred[] compare(a, b), direction=LT
}
ENTRY e {
  k = f32[2,3] parameter(0)
  v = s32[2,3] parameter(1)
  ROOT s = (f32[2,3], s32[2,3]) sort(k, v), dimensions={1}, to_apply=lt
})",
                  {F32({2, 3}, {3, 1, 2, 0, -5, 7}), S32({2, 3}, {30, 10, 20, 0, 1, 2})});
    EXPECT_OK(r);
    EXPECT_VALUES(r->element(0), {1, 2, 3, -5, 0, 7});
    EXPECT_VALUES(r->element(1), {10, 20, 30, 1, 0, 2});

    // A comparator the fast path does not recognise: descending by absolute value.
    auto g = Eval(R"(HloModule m
absgt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  aa = f32[] abs(a)
  ab = f32[] abs(b)
  ROOT r = pred[] compare(aa, ab), direction=GT
}
ENTRY e {
  k = f32[5] parameter(0)
  ROOT s = f32[5] sort(k), dimensions={0}, to_apply=absgt
})",
                  {F32({5}, {1, -4, 2, -3, 0.5})});
    EXPECT_OK(g);
    EXPECT_VALUES(*g, {-4, -3, 2, 1, 0.5});
  }

  void sortWithXlaTotalOrderComparator() {
    // The comparator XLA's TopK lowering uses: bf16 keys mapped to sortable s32 via bitcasts.
    // It runs as a compiled scalar program (convert, bitcast-convert, u32 wrap-around, select).
    auto r = Eval(R"(HloModule m
gt {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ia = s32[] parameter(2)
  ib = s32[] parameter(3)
  fa = f32[] convert(a)
  sa = s32[] bitcast-convert(fa)
  z = s32[] constant(0)
  na = pred[] compare(sa, z), direction=LT
  mx = u32[] constant(2147483647)
  ua = u32[] bitcast-convert(fa)
  da = u32[] subtract(mx, ua)
  ka0 = s32[] bitcast-convert(da)
  ka = s32[] select(na, ka0, sa)
  fb = f32[] convert(b)
  sb = s32[] bitcast-convert(fb)
  nb = pred[] compare(sb, z), direction=LT
  ub = u32[] bitcast-convert(fb)
  db = u32[] subtract(mx, ub)
  kb0 = s32[] bitcast-convert(db)
  kb = s32[] select(nb, kb0, sb)
  ROOT c = pred[] compare(ka, kb), direction=GT
}
ENTRY e {
  k = bf16[5] parameter(0)
  i = s32[5] iota(), iota_dimension=0
  ROOT s = (bf16[5], s32[5]) sort(k, i), dimensions={0}, to_apply=gt
})",
                  {T(PrimitiveType::kBF16, {5}, {0.5, -1, 3, -2, 0})});
    EXPECT_OK(r);
    EXPECT_VALUES(r->element(0), {3, 0.5, 0, -1, -2});
    EXPECT_VALUES(r->element(1), {2, 0, 4, 1, 3});
  }

  void computationsThatDoNotCompileStillRun() {
    // A reducer and a comparator that call another computation take the general path (a full
    // evaluation per element) and give the same results as the compiled ones above.
    auto r = Eval(R"(HloModule m
sq {
  x = f32[] parameter(0)
  ROOT y = f32[] multiply(x, x)
}
sumsq {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  bb = f32[] call(b), to_apply=sq
  ROOT s = f32[] add(a, bb)
}
absgt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  aa = f32[] call(a), to_apply=sq
  ab = f32[] call(b), to_apply=sq
  ROOT r = pred[] compare(aa, ab), direction=GT
}
ENTRY e {
  x = f32[2,3] parameter(0)
  z = f32[] constant(0)
  r = f32[2] reduce(x, z), dimensions={1}, to_apply=sumsq
  k = f32[5] parameter(1)
  s = f32[5] sort(k), dimensions={0}, to_apply=absgt
  ROOT t = (f32[2], f32[5]) tuple(r, s)
})",
                  {F32({2, 3}, {1, 2, 3, 4, 5, 6}), F32({5}, {1, -4, 2, -3, 0.5})});
    EXPECT_OK(r);
    EXPECT_VALUES(r->element(0), {14, 77});
    EXPECT_VALUES(r->element(1), {-4, -3, 2, 1, 0.5});
  }

  void whileConditionalCall() {
    // sum of i for i in [0, 10) = 45
    auto r = Eval(R"(HloModule m
cond {
  p = (s32[], s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(10)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  s = s32[] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  s1 = s32[] add(s, i)
  ROOT t = (s32[], s32[]) tuple(i1, s1)
}
ENTRY e {
  z = s32[] constant(0)
  init = (s32[], s32[]) tuple(z, z)
  w = (s32[], s32[]) while(init), condition=cond, body=body
  ROOT s = s32[] get-tuple-element(w), index=1
})",
                  {});
    EXPECT_OK(r);
    EXPECT_VALUES(*r, {45});

    const char* cond_text = R"(HloModule m
neg {
  x = f32[] parameter(0)
  ROOT n = f32[] negate(x)
}
dbl {
  x = f32[] parameter(0)
  ROOT d = f32[] add(x, x)
}
sq {
  x = f32[] parameter(0)
  ROOT d = f32[] multiply(x, x)
}
ENTRY e {
  b = s32[] parameter(0)
  x = f32[] parameter(1)
  c = f32[] conditional(b, x, x, x), branch_computations={neg, dbl, sq}
  ROOT r = f32[] call(c), to_apply=dbl
})";
    auto c0 = Eval(cond_text, {S32({}, {0}), F32({}, {3})});
    EXPECT_OK(c0);
    EXPECT_VALUES(*c0, {-6});
    auto c2 = Eval(cond_text, {S32({}, {2}), F32({}, {3})});
    EXPECT_OK(c2);
    EXPECT_VALUES(*c2, {18});
    auto c9 = Eval(cond_text, {S32({}, {9}), F32({}, {3})});  // out of range: last branch
    EXPECT_OK(c9);
    EXPECT_VALUES(*c9, {18});
  }

  void shardingCustomCallsAndIds() {
    auto r = Eval(R"(HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  s = f32[4] custom-call(x), custom_call_target="Sharding", sharding={devices=[2]0,1}
  ob = f32[4] opt-barrier(s)
  pid = u32[] partition-id()
  rid = u32[] replica-id()
  ROOT t = (f32[4], u32[], u32[]) tuple(ob, pid, rid)
})",
                  {F32({4}, {1, 2, 3, 4})});
    EXPECT_OK(r);
    EXPECT_VALUES(r->element(0), {1, 2, 3, 4});
    EXPECT_VALUES(r->element(1), {0});
    EXPECT_VALUES(r->element(2), {0});
  }

  void topKAndRotateCustomCalls() {
    auto r = Eval(R"(HloModule m
ENTRY e {
  x = f32[2,5] parameter(0)
  t = (f32[2,3], s32[2,3]) custom-call(x), custom_call_target="TopK"
  y = f32[6] parameter(1)
  rr = f32[6] custom-call(y), custom_call_target="_SPMDInternalOp_RotateRight", backend_config="dimension=0,amount=2"
  v = f32[2,3] get-tuple-element(t), index=0
  i = s32[2,3] get-tuple-element(t), index=1
  ROOT o = (f32[2,3], s32[2,3], f32[6]) tuple(v, i, rr)
})",
                  {F32({2, 5}, {1, 5, 3, 5, 2, 0, -1, 4, 2, 9}), F32({6}, {0, 1, 2, 3, 4, 5})});
    EXPECT_OK(r);
    EXPECT_VALUES(r->element(0), {5, 5, 3, 9, 4, 2});
    EXPECT_VALUES(r->element(1), {1, 3, 2, 4, 2, 3});  // ties: lower index first
    EXPECT_VALUES(r->element(2), {4, 5, 0, 1, 2, 3});  // result[i] = y[(i - 2) mod 6]
  }

  void rngIsSeeded() {
    const char* text = R"(HloModule m
ENTRY e {
  a = f32[] constant(2)
  b = f32[] constant(3)
  ROOT r = f32[64] rng(a, b), distribution=rng_uniform
})";
    auto m = ParseHloModule(text);
    EXPECT_OK(m);
    EvalOptions o;
    o.rng_seed = 7;
    auto r1 = Evaluate(**m, {}, o);
    auto r2 = Evaluate(**m, {}, o);
    o.rng_seed = 8;
    auto r3 = Evaluate(**m, {}, o);
    EXPECT_OK(r1);
    EXPECT_OK(r3);
    QVERIFY(r1->Identical(*r2));
    QVERIFY(!r1->Identical(*r3));
    for (double v : r1->ToDoubles()) QVERIFY(v >= 2 && v < 3);
  }

  void errorsInsteadOfCrashes() {
    // Unsupported op: the message names the op and the instruction.
    auto r = Eval(R"(HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  ROOT f = f32[4] custom-call(x), custom_call_target="MyKernel"
})",
                  {F32({4}, {1, 2, 3, 4})});
    QVERIFY(!r.ok());
    QVERIFY2(r.error().message.find("MyKernel") != std::string::npos, r.error().message.c_str());
    QVERIFY2(r.error().message.find("%f") != std::string::npos, r.error().message.c_str());

    Module m("generic");
    Computation* c = m.AddComputation("main", true);
    Instruction* p = c->AddInstruction(Opcode::kParameter, Shape(PrimitiveType::kF32, {4}), {}, "p");
    p->parameter_number = 0;
    c->set_root(c->AddGeneric("fft", Shape(PrimitiveType::kF32, {4}), {p}, "my_fft"));
    auto g = Evaluate(m, {F32({4}, {1, 2, 3, 4})});
    QVERIFY(!g.ok());
    QVERIFY2(g.error().message.find("'fft'") != std::string::npos && g.error().message.find("%my_fft") != std::string::npos,
             g.error().message.c_str());

    // Wrong argument shape / count.
    auto bad = Evaluate(m, {F32({3}, {1, 2, 3})});
    QVERIFY(!bad.ok());
    QVERIFY2(bad.error().message.find("f32[4]") != std::string::npos, bad.error().message.c_str());
    QVERIFY(!Evaluate(m, {}).ok());

    // An inconsistent hand-built module (transpose with a bad permutation) is an Error too.
    Module m2("bad");
    Computation* c2 = m2.AddComputation("main", true);
    Instruction* q = c2->AddInstruction(Opcode::kParameter, Shape(PrimitiveType::kF32, {2, 3}), {}, "q");
    q->parameter_number = 0;
    Instruction* t = c2->AddInstruction(Opcode::kTranspose, Shape(PrimitiveType::kF32, {3, 2}), {q}, "t");
    t->dimensions = {0, 0};
    c2->set_root(t);
    QVERIFY(!Evaluate(m2, {F32({2, 3}, {1, 2, 3, 4, 5, 6})}).ok());
    // Complex results are refused.
    Module m3("cplx");
    Computation* c3 = m3.AddComputation("main", true);
    Instruction* k = c3->AddInstruction(Opcode::kConstant, Shape(PrimitiveType::kC64, {1}), {}, "k");
    k->literal.text = "{(1,0)}";
    c3->set_root(k);
    auto cx = Evaluate(m3, {});
    QVERIFY(!cx.ok());
    QVERIFY(cx.error().message.find("c64") != std::string::npos);
  }

  void whileIterationLimit() {
    auto m = ParseHloModule(R"(HloModule m
cond {
  p = s32[] parameter(0)
  ROOT t = pred[] constant(true)
}
body {
  p = s32[] parameter(0)
  ROOT q = s32[] copy(p)
}
ENTRY e {
  z = s32[] constant(0)
  ROOT w = s32[] while(z), condition=cond, body=body
})");
    EXPECT_OK(m);
    EvalOptions o;
    o.max_while_iterations = 100;
    auto r = Evaluate(**m, {}, o);
    QVERIFY(!r.ok());
    QVERIFY2(r.error().message.find("100 iterations") != std::string::npos, r.error().message.c_str());
  }
};

QTEST_APPLESS_MAIN(TestEvaluator)
#include "test_evaluator.moc"
