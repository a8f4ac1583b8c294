// Shape inference (core/shape_inference.h) per op family, through the Builder (which infers every
// shape) and directly on hand-made instructions for ops whose shape is declared.
#include <QtTest/QtTest>

#include <memory>
#include <string>

#include "core/ir/builder.h"
#include "core/ir/shape_inference.h"

using namespace shardscope;

namespace {

constexpr auto F32 = PrimitiveType::kF32;
constexpr auto BF16 = PrimitiveType::kBF16;
constexpr auto S32 = PrimitiveType::kS32;
constexpr auto U8 = PrimitiveType::kU8;
constexpr auto PRED = PrimitiveType::kPred;

std::string Str(const Instruction* i) { return i ? i->shape().ToString(false) : std::string("<null>"); }

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A fresh module + entry builder per test.
struct Fixture {
  Module m{"test"};
  Builder b{m.AddComputation("entry", true)};
  int64_t next_param = 0;
  Instruction* P(const Shape& s, const std::string& name = "") { return b.Parameter(next_param++, s, name); }
  std::string error() const { return b.ok() ? std::string() : b.status().error().message; }
};

}  // namespace

class TestShapeInference : public QObject {
  Q_OBJECT

 private slots:
  void elementwiseUnary() {
    Fixture f;
    auto* x = f.P(Shape(F32, {2, 3}));
    QCOMPARE(Str(f.b.Exp(x)), std::string("f32[2,3]"));
    QCOMPARE(Str(f.b.Neg(x)), std::string("f32[2,3]"));
    QCOMPARE(Str(f.b.Unary(Opcode::kIsFinite, x)), std::string("pred[2,3]"));
    auto* c = f.P(Shape(PrimitiveType::kC64, {4}));
    QCOMPARE(Str(f.b.Abs(c)), std::string("f32[4]"));    // |complex| is real
    QCOMPARE(Str(f.b.Unary(Opcode::kReal, c)), std::string("f32[4]"));
    auto* i = f.P(Shape(S32, {5}));
    QCOMPARE(Str(f.b.Unary(Opcode::kPopcnt, i)), std::string("s32[5]"));
    QVERIFY(f.b.ok());
    QCOMPARE(f.b.Exp(i), nullptr);
    QVERIFY(Contains(f.error(), "exponential needs a floating-point or complex operand, found s32[5]"));
  }

  void elementwiseBinaryAndCompare() {
    Fixture f;
    auto* a = f.P(Shape(F32, {2, 3}));
    auto* b = f.P(Shape(F32, {2, 3}));
    auto* t = f.P(Shape(F32, {3, 2}));
    auto* s = f.P(Shape(S32, {2, 3}));
    QCOMPARE(Str(f.b.Add(a, b)), std::string("f32[2,3]"));
    QCOMPARE(Str(f.b.Compare(a, b, ComparisonDirection::kLt)), std::string("pred[2,3]"));
    QCOMPARE(Str(f.b.Binary(Opcode::kComplex, a, b)), std::string("c64[2,3]"));
    QCOMPARE(Str(f.b.Binary(Opcode::kShiftLeft, s, s)), std::string("s32[2,3]"));
    QVERIFY(f.b.ok());
    QCOMPARE(f.b.Add(a, t), nullptr);
    QVERIFY(Contains(f.error(), "add operands must have the same dimensions, found f32[2,3] and f32[3,2]"));

    Fixture g;
    auto* x = g.P(Shape(F32, {4}));
    auto* y = g.P(Shape(S32, {4}));
    QCOMPARE(g.b.Mul(x, y), nullptr);
    QVERIFY(Contains(g.error(), "multiply operands must have the same element type, found f32[4] and s32[4]"));

    Fixture h;
    auto* z = h.P(Shape(F32, {4}));
    QCOMPARE(h.b.Binary(Opcode::kAnd, z, z), nullptr);
    QVERIFY(Contains(h.error(), "and needs pred or integer operands"));
  }

  void selectClampConvert() {
    Fixture f;
    auto* p = f.P(Shape(PRED, {2, 3}));
    auto* a = f.P(Shape(F32, {2, 3}));
    auto* b = f.P(Shape(F32, {2, 3}));
    auto* ps = f.P(Shape::Scalar(PRED));
    auto* lo = f.P(Shape::Scalar(F32));
    QCOMPARE(Str(f.b.Select(p, a, b)), std::string("f32[2,3]"));
    QCOMPARE(Str(f.b.Select(ps, a, b)), std::string("f32[2,3]"));  // scalar predicate
    QCOMPARE(Str(f.b.Clamp(lo, a, lo)), std::string("f32[2,3]"));
    QCOMPARE(Str(f.b.Convert(a, BF16)), std::string("bf16[2,3]"));
    QCOMPARE(Str(f.b.BitcastConvert(a, U8)), std::string("u8[2,3,4]"));  // 32 bits -> 4 x 8 bits
    auto* bytes = f.P(Shape(U8, {5, 4}));
    QCOMPARE(Str(f.b.BitcastConvert(bytes, F32)), std::string("f32[5]"));
    QCOMPARE(Str(f.b.BitcastConvert(a, S32)), std::string("s32[2,3]"));
    QVERIFY(f.b.ok());
    auto* bad_bytes = f.P(Shape(U8, {5, 3}));
    QCOMPARE(f.b.BitcastConvert(bad_bytes, F32), nullptr);
    QVERIFY(Contains(f.error(), "needs a last dimension of 4"));

    Fixture g;
    auto* pp = g.P(Shape(PRED, {3, 2}));
    auto* x = g.P(Shape(F32, {2, 3}));
    QCOMPARE(g.b.Select(pp, x, x), nullptr);
    QVERIFY(Contains(g.error(), "select predicate pred[3,2] must have the dimensions of the branches f32[2,3]"));
  }

  void broadcastReshapeTranspose() {
    Fixture f;
    auto* v = f.P(Shape(F32, {3}));
    auto* m = f.P(Shape(F32, {2, 3, 4}));
    QCOMPARE(Str(f.b.Broadcast(v, {2, 3}, {1})), std::string("f32[2,3]"));
    QCOMPARE(Str(f.b.Broadcast(v, {3, 5, 7}, {0})), std::string("f32[3,5,7]"));
    QCOMPARE(Str(f.b.Reshape(m, {6, 4})), std::string("f32[6,4]"));
    QCOMPARE(Str(f.b.Reshape(m, {24})), std::string("f32[24]"));
    // result[i] = operand[perm[i]]
    QCOMPARE(Str(f.b.Transpose(m, {2, 0, 1})), std::string("f32[4,2,3]"));
    QVERIFY(f.b.ok());

    Fixture g;
    auto* w = g.P(Shape(F32, {3}));
    QCOMPARE(g.b.Broadcast(w, {2, 3}, {0}), nullptr);
    QVERIFY(Contains(g.error(), "broadcast maps operand dimension 0 (size 3) to result dimension 0 of size 2"));
    Fixture h;
    auto* y = h.P(Shape(F32, {2, 3}));
    QCOMPARE(h.b.Reshape(y, {5}), nullptr);
    QVERIFY(Contains(h.error(), "reshape from f32[2,3] (6 elements) to {5} (5 elements) changes the element count"));
    Fixture k;
    auto* z = k.P(Shape(F32, {2, 3}));
    QCOMPARE(k.b.Transpose(z, {0, 0}), nullptr);
    QVERIFY(Contains(k.error(), "transpose dimensions {0,0} repeats dimension 0"));
  }

  void sliceAndDynamicSlice() {
    Fixture f;
    auto* x = f.P(Shape(F32, {10, 8}));
    // [2:9:3] -> elements 2, 5, 8.
    QCOMPARE(Str(f.b.Slice(x, {2, 0}, {9, 8}, {3, 2})), std::string("f32[3,4]"));
    auto* i0 = f.P(Shape::Scalar(S32));
    auto* i1 = f.P(Shape::Scalar(S32));
    QCOMPARE(Str(f.b.DynamicSlice(x, {i0, i1}, {4, 8})), std::string("f32[4,8]"));
    auto* upd = f.P(Shape(F32, {3, 8}));
    QCOMPARE(Str(f.b.DynamicUpdateSlice(x, upd, {i0, i1})), std::string("f32[10,8]"));
    QVERIFY(f.b.ok());
    QCOMPARE(f.b.Slice(x, {0, 0}, {11, 8}), nullptr);
    QVERIFY(Contains(f.error(), "slice [0:11] in dimension 0 is out of bounds for size 10"));

    Fixture g;
    auto* y = g.P(Shape(F32, {10}));
    auto* j = g.P(Shape::Scalar(S32));
    QCOMPARE(g.b.DynamicSlice(y, {j}, {11}), nullptr);
    QVERIFY(Contains(g.error(), "dynamic_slice_sizes {11} exceed operand f32[10]"));
    Fixture h;
    auto* z = h.P(Shape(F32, {4, 4}));
    auto* k = h.P(Shape::Scalar(S32));
    QCOMPARE(h.b.DynamicSlice(z, {k}, {2, 2}), nullptr);  // one index for a rank-2 operand
    QVERIFY(Contains(h.error(), "dynamic-slice takes one scalar integer index per operand dimension (2)"));
  }

  void padConcatenateReverse() {
    Fixture f;
    auto* x = f.P(Shape(F32, {3, 4}));
    auto* zero = f.b.ConstantScalar(F32, 0);
    // dim 0: 1 + 3 + 2 (interior 1 between 3 elements) + 2 = 8; dim 1: -1 + 4 + 0 = 3.
    QCOMPARE(Str(f.b.Pad(x, zero, {{1, 2, 1}, {-1, 0, 0}})), std::string("f32[8,3]"));
    auto* y = f.P(Shape(F32, {5, 4}));
    QCOMPARE(Str(f.b.Concatenate({x, y, x}, 0)), std::string("f32[11,4]"));
    QCOMPARE(Str(f.b.Reverse(x, {0, 1})), std::string("f32[3,4]"));
    QVERIFY(f.b.ok());
    QCOMPARE(f.b.Pad(x, zero, {{0, 0, -1}, {0, 0, 0}}), nullptr);
    QVERIFY(Contains(f.error(), "interior padding in dimension 0 must be >= 0, found -1"));

    Fixture g;
    auto* a = g.P(Shape(F32, {3, 4}));
    auto* b = g.P(Shape(F32, {3, 5}));
    QCOMPARE(g.b.Concatenate({a, b}, 0), nullptr);
    QVERIFY(Contains(g.error(), "concatenate operand 1 f32[3,5] differs from operand 0 f32[3,4] in dimension 1"));
  }

  void dot() {
    Fixture f;
    auto* a = f.P(Shape(F32, {2, 3}));
    auto* b = f.P(Shape(F32, {3, 4}));
    QCOMPARE(Str(f.b.Dot(a, b, DotDims({1}, {0}))), std::string("f32[2,4]"));
    // Batch dims first, then lhs non-contracting, then rhs non-contracting.
    auto* q = f.P(Shape(F32, {8, 16, 4, 32}));  // [B,S,N,D]
    auto* k = f.P(Shape(F32, {8, 12, 4, 32}));  // [B,T,N,D]
    QCOMPARE(Str(f.b.Dot(q, k, DotDims({3}, {3}, {0, 2}, {0, 2}))),
             std::string("f32[8,4,16,12]"));
    // Outer product (no contraction) and result type override.
    auto* u = f.P(Shape(BF16, {5}));
    auto* v = f.P(Shape(BF16, {6}));
    QCOMPARE(Str(f.b.DotAs(u, v, {}, F32)), std::string("f32[5,6]"));
    QVERIFY(f.b.ok());
    QCOMPARE(f.b.Dot(a, a, DotDims({1}, {0})), nullptr);
    QVERIFY(Contains(f.error(), "dot contracting dimension sizes differ: lhs f32[2,3] dim 1 (size 3) vs rhs f32[2,3] dim 0 (size 2)"));

    Fixture g;
    auto* x = g.P(Shape(F32, {2, 3}));
    QCOMPARE(g.b.Dot(x, x, DotDims({2}, {1})), nullptr);
    QVERIFY(Contains(g.error(), "dot lhs_contracting_dims {2} has dimension 2 out of range for rank 2"));
  }

  void convolution() {
    // NHWC input, HWIO kernel: dim_labels=b01f_01io->b01f.
    ConvolutionDimensionNumbers dn;
    dn.input_batch = 0; dn.input_feature = 3; dn.input_spatial = {1, 2};
    dn.kernel_input_feature = 2; dn.kernel_output_feature = 3; dn.kernel_spatial = {0, 1};
    dn.output_batch = 0; dn.output_feature = 3; dn.output_spatial = {1, 2};
    auto window = [](int64_t size, int64_t stride, int64_t pad, int64_t lhs_dilate = 1) {
      Window w;
      for (int i = 0; i < 2; ++i) {
        WindowDimension d;
        d.size = size; d.stride = stride; d.padding_low = pad; d.padding_high = pad; d.base_dilation = lhs_dilate;
        w.dims.push_back(d);
      }
      return w;
    };
    Fixture f;
    auto* in = f.P(Shape(F32, {1, 5, 5, 2}));
    auto* k = f.P(Shape(F32, {3, 3, 2, 4}));
    QCOMPARE(Str(f.b.Convolution(in, k, dn, window(3, 1, 1))), std::string("f32[1,5,5,4]"));  // "same"
    QCOMPARE(Str(f.b.Convolution(in, k, dn, window(3, 2, 0))), std::string("f32[1,2,2,4]"));  // (5-3)/2+1
    // lhs dilation 2: 5 -> 9, window 3 -> 7.
    QCOMPARE(Str(f.b.Convolution(in, k, dn, window(3, 1, 0, 2))), std::string("f32[1,7,7,4]"));
    // feature_group_count 2: 4 input features in 2 groups of 2.
    auto* in4 = f.P(Shape(F32, {1, 5, 5, 4}));
    QCOMPARE(Str(f.b.Convolution(in4, k, dn, window(3, 1, 1), 2)), std::string("f32[1,5,5,4]"));
    // batch_group_count 2: batch 4 -> 2.
    auto* in_b4 = f.P(Shape(F32, {4, 5, 5, 2}));
    QCOMPARE(Str(f.b.Convolution(in_b4, k, dn, window(3, 1, 1), 1, 2)), std::string("f32[2,5,5,4]"));
    QVERIFY(f.b.ok());
    QCOMPARE(f.b.Convolution(in4, k, dn, window(3, 1, 1)), nullptr);
    QVERIFY(Contains(f.error(), "convolution input features / feature_group_count (4/1) must equal the kernel input features (2)"));
  }

  void reduceAndVariadicReduce() {
    Fixture f;
    auto* x = f.P(Shape(F32, {2, 3, 4}));
    auto* zero = f.b.ConstantScalar(F32, 0);
    QCOMPARE(Str(f.b.Reduce(x, zero, {0, 2}, ScalarAdd(f.m, F32))), std::string("f32[3]"));
    QCOMPARE(Str(f.b.Reduce(x, zero, {0, 1, 2}, ScalarAdd(f.m, F32))), std::string("f32[]"));
    // Variadic (argmax-style) reduce over (f32, s32) pairs.
    Computation* argmax = f.m.AddComputation("argmax");
    {
      Builder r(argmax);
      auto* av = r.Parameter(0, Shape::Scalar(F32));
      auto* ai = r.Parameter(1, Shape::Scalar(S32));
      auto* bv = r.Parameter(2, Shape::Scalar(F32));
      auto* bi = r.Parameter(3, Shape::Scalar(S32));
      auto* take_a = r.Compare(av, bv, ComparisonDirection::kGe);
      r.SetRoot(r.Tuple({r.Select(take_a, av, bv), r.Select(take_a, ai, bi)}));
      QVERIFY(r.ok());
    }
    auto* idx = f.b.Iota(Shape(S32, {2, 3, 4}), 2);
    auto* izero = f.b.ConstantScalar(S32, 0);
    QCOMPARE(Str(f.b.Reduce({x, idx}, {zero, izero}, {2}, argmax)), std::string("(f32[2,3], s32[2,3])"));
    QVERIFY(f.b.ok());
    // A reducer with the wrong arity.
    QCOMPARE(f.b.Reduce(x, zero, {1}, argmax), nullptr);
    QVERIFY(Contains(f.error(), "reduce to_apply computation argmax must take 2 parameters, found 4"));
    Fixture g;
    auto* y = g.P(Shape(F32, {2, 3}));
    QCOMPARE(g.b.Reduce(y, g.b.ConstantScalar(F32, 0), {2}, ScalarAdd(g.m, F32)), nullptr);
    QVERIFY(Contains(g.error(), "reduce dimensions {2} has dimension 2 out of range for rank 2"));
  }

  void windowedOps() {
    auto win = [](std::vector<int64_t> size, std::vector<int64_t> stride, std::vector<int64_t> pad = {}) {
      Window w;
      for (size_t i = 0; i < size.size(); ++i) {
        WindowDimension d;
        d.size = size[i]; d.stride = stride[i];
        if (!pad.empty()) d.padding_low = d.padding_high = pad[i];
        w.dims.push_back(d);
      }
      return w;
    };
    Fixture f;
    auto* x = f.P(Shape(F32, {4, 6}));
    auto* init = f.b.ConstantScalar(F32, 0);
    QCOMPARE(Str(f.b.ReduceWindow(x, init, win({2, 3}, {2, 3}), ScalarMax(f.m, F32))), std::string("f32[2,2]"));
    // padding 1 each side: (4+2-3)/1+1 = 4, (6+2-3)/1+1 = 6.
    QCOMPARE(Str(f.b.ReduceWindow(x, init, win({3, 3}, {1, 1}, {1, 1}), ScalarAdd(f.m, F32))), std::string("f32[4,6]"));
    // select-and-scatter (max-pool gradient): source has the windowed shape.
    auto* src = f.P(Shape(F32, {2, 3}));
    Computation* ge = ScalarComparator(f.m, F32, ComparisonDirection::kGe);
    QCOMPARE(Str(f.b.SelectAndScatter(x, src, init, win({2, 2}, {2, 2}), ge, ScalarAdd(f.m, F32))), std::string("f32[4,6]"));
    QVERIFY(f.b.ok());
    auto* bad_src = f.P(Shape(F32, {3, 3}));
    QCOMPARE(f.b.SelectAndScatter(x, bad_src, init, win({2, 2}, {2, 2}), ge, ScalarAdd(f.m, F32)), nullptr);
    QVERIFY(Contains(f.error(), "select-and-scatter source must be f32[2,3] (the windowed operand), found f32[3,3]"));
  }

  void gatherAndScatter() {
    Fixture f;
    // Embedding lookup: operand [V=3, E=4], 5 indices -> [5,4].
    auto* table = f.P(Shape(F32, {3, 4}));
    auto* ids = f.P(Shape(S32, {5}));
    GatherDimensionNumbers g;
    g.offset_dims = {1};
    g.collapsed_slice_dims = {0};
    g.start_index_map = {0};
    g.index_vector_dim = 1;  // == rank of indices: implicit trailing index vector of size 1
    QCOMPARE(Str(f.b.Gather(table, ids, g, {1, 4})), std::string("f32[5,4]"));
    // Two-coordinate indices [2,6,2] into [3,4,5], slices of [1,1,5] collapsed twice -> [2,6,5].
    auto* cube = f.P(Shape(F32, {3, 4, 5}));
    auto* idx2 = f.P(Shape(S32, {2, 6, 2}));
    GatherDimensionNumbers g2;
    g2.offset_dims = {2};
    g2.collapsed_slice_dims = {0, 1};
    g2.start_index_map = {0, 1};
    g2.index_vector_dim = 2;
    QCOMPARE(Str(f.b.Gather(cube, idx2, g2, {1, 1, 5})), std::string("f32[2,6,5]"));
    // Offset dim placed first: output dims {0} are offsets, the rest batch.
    GatherDimensionNumbers g3 = g2;
    g3.offset_dims = {0};
    QCOMPARE(Str(f.b.Gather(cube, idx2, g3, {1, 1, 3})), std::string("f32[3,2,6]"));
    QVERIFY(f.b.ok());
    QCOMPARE(f.b.Gather(table, ids, g, {2, 4}), nullptr);
    QVERIFY(Contains(f.error(), "gather collapses operand dimension 0 whose slice size is 2 (must be <= 1)"));

    Fixture s;
    auto* operand = s.P(Shape(F32, {3, 4}));
    auto* sidx = s.P(Shape(S32, {5}));
    auto* updates = s.P(Shape(F32, {5, 4}));
    ScatterDimensionNumbers sd;
    sd.update_window_dims = {1};
    sd.inserted_window_dims = {0};
    sd.scatter_dims_to_operand_dims = {0};
    sd.index_vector_dim = 1;
    QCOMPARE(Str(s.b.Scatter(operand, sidx, updates, sd, ScalarAdd(s.m, F32))), std::string("f32[3,4]"));
    QVERIFY(s.b.ok());
    auto* bad_updates = s.P(Shape(F32, {6, 4}));
    QCOMPARE(s.b.Scatter(operand, sidx, bad_updates, sd, ScalarAdd(s.m, F32)), nullptr);
    QVERIFY(Contains(s.error(), "scatter update dimension 0 (size 6) must equal the indices' batch dimension size 5"));
  }

  // Batching dims pair an operand dimension with an indices dimension of the same size (XLA's
  // gather/scatter with operand_batching_dims). A fuzzing finding (fuzz/corpus/pipeline_text/
  // gather-batching-sizes-differ.hlo): a 9-row operand batched against 10 index rows verified, and
  // its partitioned program then computed something else.
  void batchingDimsMustHaveEqualSizes() {
    Fixture f;
    auto* operand = f.P(Shape(F32, {2, 3, 4}));
    auto* idx = f.P(Shape(S32, {2, 5}));
    auto* idx_bad = f.P(Shape(S32, {3, 5}));
    GatherDimensionNumbers g;
    g.offset_dims = {2};
    g.collapsed_slice_dims = {1};
    g.operand_batching_dims = {0};
    g.start_indices_batching_dims = {0};
    g.start_index_map = {1};
    g.index_vector_dim = 2;
    QCOMPARE(Str(f.b.Gather(operand, idx, g, {1, 1, 4})), std::string("f32[2,5,4]"));
    QVERIFY(f.b.ok());
    QCOMPARE(f.b.Gather(operand, idx_bad, g, {1, 1, 4}), nullptr);
    QVERIFY(Contains(f.error(), "gather operand batching dimension 0 (size 2) and start_indices batching dimension 0 (size 3) must have the same size"));

    Fixture s;
    auto* input = s.P(Shape(F32, {2, 3, 4}));
    auto* sidx = s.P(Shape(S32, {2, 5}));
    auto* sidx_bad = s.P(Shape(S32, {3, 5}));
    auto* updates = s.P(Shape(F32, {2, 5, 4}));
    auto* updates_bad = s.P(Shape(F32, {3, 5, 4}));
    ScatterDimensionNumbers sd;
    sd.update_window_dims = {2};
    sd.inserted_window_dims = {1};
    sd.input_batching_dims = {0};
    sd.scatter_indices_batching_dims = {0};
    sd.scatter_dims_to_operand_dims = {1};
    sd.index_vector_dim = 2;
    QCOMPARE(Str(s.b.Scatter(input, sidx, updates, sd, ScalarAdd(s.m, F32))), std::string("f32[2,3,4]"));
    QVERIFY(s.b.ok());
    QCOMPARE(s.b.Scatter(input, sidx_bad, updates_bad, sd, ScalarAdd(s.m, F32)), nullptr);
    QVERIFY(Contains(s.error(), "scatter input batching dimension 0 (size 2) and indices batching dimension 0 (size 3) must have the same size"));
  }

  void sortTupleAndControlFlow() {
    Fixture f;
    auto* keys = f.P(Shape(F32, {10}));
    auto* vals = f.P(Shape(S32, {10}));
    Computation* cmp = f.m.AddComputation("cmp");
    {
      Builder c(cmp);
      auto* a = c.Parameter(0, Shape::Scalar(F32));
      auto* b = c.Parameter(1, Shape::Scalar(F32));
      c.Parameter(2, Shape::Scalar(S32));
      c.Parameter(3, Shape::Scalar(S32));
      c.SetRoot(c.Compare(a, b, ComparisonDirection::kLt));
    }
    QCOMPARE(Str(f.b.Sort({keys, vals}, 0, cmp)), std::string("(f32[10], s32[10])"));
    auto* t = f.b.Tuple({keys, vals});
    QCOMPARE(Str(t), std::string("(f32[10], s32[10])"));
    QCOMPARE(Str(f.b.GetTupleElement(t, 1)), std::string("s32[10]"));

    // while: counter loop over (s32[], f32[10]).
    const Shape state = Shape::Tuple({Shape::Scalar(S32), Shape(F32, {10})});
    Computation* cond = f.m.AddComputation("cond");
    {
      Builder c(cond);
      auto* p = c.Parameter(0, state);
      c.SetRoot(c.Compare(c.GetTupleElement(p, 0), c.ConstantScalar(S32, 5), ComparisonDirection::kLt));
    }
    Computation* body = f.m.AddComputation("body");
    {
      Builder c(body);
      auto* p = c.Parameter(0, state);
      auto* i = c.GetTupleElement(p, 0);
      c.SetRoot(c.Tuple({c.Add(i, c.ConstantScalar(S32, 1)), c.GetTupleElement(p, 1)}));
    }
    auto* init = f.b.Tuple({f.b.ConstantScalar(S32, 0), keys});
    QCOMPARE(Str(f.b.While(init, cond, body)), std::string("(s32[], f32[10])"));

    // conditional with a pred selector and call.
    Computation* neg = f.m.AddComputation("neg");
    { Builder c(neg); c.SetRoot(c.Neg(c.Parameter(0, Shape(F32, {10})))); }
    Computation* id = f.m.AddComputation("id");
    { Builder c(id); c.SetRoot(c.Copy(c.Parameter(0, Shape(F32, {10})))); }
    auto* pred = f.P(Shape::Scalar(PRED));
    QCOMPARE(Str(f.b.Conditional(pred, {keys, keys}, {neg, id})), std::string("f32[10]"));
    QCOMPARE(Str(f.b.Call(neg, {keys})), std::string("f32[10]"));
    QVERIFY(f.b.ok());

    QCOMPARE(f.b.GetTupleElement(t, 2), nullptr);
    QVERIFY(Contains(f.error(), "get-tuple-element index 2 out of range for a tuple of 2 elements"));

    Fixture g;
    auto* k2 = g.P(Shape(F32, {10}));
    Computation* bad_body = g.m.AddComputation("bad_body");
    { Builder c(bad_body); c.SetRoot(c.Slice(c.Parameter(0, Shape(F32, {10})), {0}, {5})); }
    Computation* cond2 = g.m.AddComputation("cond2");
    { Builder c(cond2); c.Parameter(0, Shape(F32, {10})); c.SetRoot(c.ConstantScalar(PRED, 0)); }
    QCOMPARE(g.b.While(k2, cond2, bad_body), nullptr);
    QVERIFY(Contains(g.error(), "while body bad_body returns f32[5], which differs from the loop state f32[10]"));
  }

  void leavesAndOwnShapes() {
    Fixture f;
    QCOMPARE(Str(f.b.Iota(Shape(S32, {4, 8}), 1)), std::string("s32[4,8]"));
    QCOMPARE(Str(f.b.Constant(Shape(F32, {2, 2}), {1, 2, 3, 4})), std::string("f32[2,2]"));
    QCOMPARE(Str(f.b.PartitionId()), std::string("u32[]"));
    QCOMPARE(Str(f.b.ReplicaId()), std::string("u32[]"));
    auto* x = f.P(Shape(F32, {4}));
    // custom-call and bitcast keep their declared shape.
    QCOMPARE(Str(f.b.CustomCall("MyKernel", {x}, Shape::Tuple({Shape(F32, {2}), Shape(S32, {})}))),
             std::string("(f32[2], s32[])"));
    QCOMPARE(Str(f.b.Bitcast(x, Shape(S32, {2, 2}))), std::string("s32[2,2]"));
    auto* t = f.b.Tuple({x});
    QCOMPARE(Str(f.b.OptimizationBarrier(t)), std::string("(f32[4])"));
    auto* tok = f.b.AfterAll({});
    QCOMPARE(Str(tok), std::string("token[]"));
    QCOMPARE(Str(f.b.AfterAll({tok, tok})), std::string("token[]"));
    QVERIFY(f.b.ok());
    QCOMPARE(f.b.Iota(Shape(S32, {4}), 1), nullptr);
    QVERIFY(Contains(f.error(), "iota_dimension 1 out of range for s32[4]"));
  }

  void tokenOps() {
    Module m("tok");
    Computation* c = m.AddComputation("entry", true);
    Builder b(c);
    auto* x = b.Parameter(0, Shape(F32, {4}));
    auto* tok = b.AfterAll({});
    // infeed / recv: own shape; outfeed: token; send: (data, u32[], token); recv-done: (data, token).
    auto* infeed = b.AddOp(Opcode::kInfeed, {tok}, nullptr, Shape::Tuple({Shape(F32, {4}), Shape::Token()}));
    QCOMPARE(Str(infeed), std::string("(f32[4], token[])"));
    QCOMPARE(Str(b.AddOp(Opcode::kOutfeed, {x, tok}, nullptr)), std::string("token[]"));
    auto* send = b.AddOp(Opcode::kSend, {x, tok}, [](Instruction* i) { i->channel_id = 1; });
    QCOMPARE(Str(send), std::string("(f32[4], u32[], token[])"));
    QCOMPARE(Str(b.AddOp(Opcode::kSendDone, {send}, nullptr)), std::string("token[]"));
    auto* recv = b.AddOp(Opcode::kRecv, {tok}, nullptr,
                         Shape::Tuple({Shape(F32, {4}), Shape::Scalar(PrimitiveType::kU32), Shape::Token()}));
    QCOMPARE(Str(b.AddOp(Opcode::kRecvDone, {recv}, nullptr)), std::string("(f32[4], token[])"));
    auto* lo = b.ConstantScalar(F32, 0);
    auto* hi = b.ConstantScalar(F32, 1);
    QCOMPARE(Str(b.AddOp(Opcode::kRng, {lo, hi}, nullptr, Shape(F32, {3, 3}))), std::string("f32[3,3]"));
    QVERIFY2(b.ok(), b.ok() ? "" : b.status().error().message.c_str());
    QCOMPARE(b.AddOp(Opcode::kOutfeed, {x, x}, nullptr), nullptr);
    QVERIFY(Contains(b.status().error().message, "outfeed operand 1 must be a token, found f32[4]"));
  }

  void collectives() {
    Module m("coll");
    m.num_partitions = 8;
    Computation* c = m.AddComputation("entry", true);
    Builder b(c);
    auto* x = b.Parameter(0, Shape(F32, {2, 8}));
    Computation* add = ScalarAdd(m, F32);
    CollectiveAttributes pairs{{{0, 1}, {2, 3}, {4, 5}, {6, 7}}, 1, true};
    CollectiveAttributes quads{{{0, 1, 2, 3}, {4, 5, 6, 7}}, 2, true};
    QCOMPARE(Str(b.AllReduce(x, add, pairs)), std::string("f32[2,8]"));
    // all-gather grows the dimension by the group size, reduce-scatter shrinks it.
    QCOMPARE(Str(b.AllGather(x, 0, pairs)), std::string("f32[4,8]"));
    QCOMPARE(Str(b.AllGather(x, 1, quads)), std::string("f32[2,32]"));
    QCOMPARE(Str(b.ReduceScatter(x, 1, add, quads)), std::string("f32[2,2]"));
    QCOMPARE(Str(b.AllToAll(x, 1, quads)), std::string("f32[2,8]"));
    QCOMPARE(Str(b.CollectivePermute(x, {{0, 1}, {1, 2}, {2, 0}}, 3)), std::string("f32[2,8]"));
    // No groups, channel id, no global ids: replicas (1) x partitions (8) take part.
    CollectiveAttributes all{{}, 4, false};
    QCOMPARE(Str(b.AllGather(b.Parameter(1, Shape(F32, {3})), 0, all)), std::string("f32[24]"));
    QVERIFY2(b.ok(), b.ok() ? "" : b.status().error().message.c_str());

    QCOMPARE(b.ReduceScatter(b.Parameter(2, Shape(F32, {6})), 0, add, quads), nullptr);
    QVERIFY(Contains(b.status().error().message,
                     "reduce-scatter dimension 0 of f32[6] is not divisible by the group size 4"));

    Module m2("coll2");
    Builder b2(m2.AddComputation("entry", true));
    auto* y = b2.Parameter(0, Shape(F32, {4}));
    QCOMPARE(b2.CollectivePermute(y, {{0, 1}, {2, 1}}), nullptr);
    QVERIFY(Contains(b2.status().error().message, "collective-permute target 1 appears twice"));
    Module m3("coll3");
    Builder b3(m3.AddComputation("entry", true));
    auto* z = b3.Parameter(0, Shape(F32, {4}));
    QCOMPARE(b3.AllGather(z, 0, CollectiveAttributes{{{0, 1}, {2}}, 1, true}), nullptr);
    QVERIFY(Contains(b3.status().error().message, "replica_groups have different sizes (2 and 1)"));
  }

  // InferShape on instructions the builder would not make (declared-shape checks, bad operands).
  void directInference() {
    Module m("direct");
    Computation* c = m.AddComputation("entry", true);
    Builder b(c);
    auto* x = b.Parameter(0, Shape(F32, {2, 3}));
    // A broadcast declares its result dims; its element type comes from the operand.
    Instruction* bc = c->AddInstruction(Opcode::kBroadcast, Shape(BF16, {4, 2, 3}), {x});
    bc->dimensions = {1, 2};
    auto r = InferShape(*bc);
    QVERIFY(r.ok());
    QCOMPARE(r->ToString(false), std::string("f32[4,2,3]"));
    // add with one operand.
    Instruction* bad = c->AddInstruction(Opcode::kAdd, Shape(F32, {2, 3}), {x});
    auto r2 = InferShape(*bad);
    QVERIFY(!r2.ok());
    QCOMPARE(r2.error().message, std::string("add takes 2 operands, found 1"));
    // kGeneric keeps its own shape.
    Instruction* gen = c->AddGeneric("fft", Shape(PrimitiveType::kC64, {2, 3}), {x});
    QCOMPARE(InferShape(*gen)->ToString(false), std::string("c64[2,3]"));
    // reduce whose to_apply is missing.
    Instruction* red = c->AddInstruction(Opcode::kReduce, Shape(F32, {2}), {x, b.ConstantScalar(F32, 0)});
    red->dimensions = {1};
    auto r3 = InferShape(*red);
    QVERIFY(!r3.ok());
    QVERIFY(Contains(r3.error().message, "reduce needs 1 called computation (to_apply), found 0"));
    red->mutable_called_computations() = {nullptr};
    QVERIFY(Contains(InferShape(*red).error().message, "reduce to_apply computation is missing"));
  }

  void builderScopesAndErrors() {
    Module m("scopes");
    Builder b(m.AddComputation("entry", true));
    auto* x = b.Parameter(0, Shape(F32, {4, 8}), "x");
    auto* w = b.Parameter(1, Shape(F32, {8, 2}), "w");
    Instruction* y = nullptr;
    {
      auto s1 = b.Scope("layer0");
      auto s2 = b.Scope("ffn");
      QCOMPARE(b.CurrentScope(), std::string("layer0/ffn"));
      y = b.Dot(x, w, DotDims({1}, {0}), "wi");
    }
    QCOMPARE(b.CurrentScope(), std::string());
    QVERIFY(y);
    QCOMPARE(y->op_name(), std::string("layer0/ffn/wi"));
    QCOMPARE(y->name(), std::string("wi"));
    b.set_scoped_names(true);
    {
      auto s = b.Scope("layer1/attention");
      auto* z = b.Neg(y);
      QCOMPARE(z->name(), std::string("layer1_attention_negate"));
      QCOMPARE(z->op_name(), std::string("layer1/attention/negate"));
    }
    {
      // An op_name-only scope: in the metadata, not in the name.
      auto phase = b.OpNameScope("forward");
      auto s = b.Scope("layer2");
      auto* z = b.Neg(y);
      QCOMPARE(b.CurrentScope(), std::string("forward/layer2"));
      QCOMPARE(z->name(), std::string("layer2_negate"));
      QCOMPARE(z->op_name(), std::string("forward/layer2/negate"));
    }
    // Errors: the first is kept, later null operands are quiet.
    auto* bad = b.Add(x, w);
    QCOMPARE(bad, nullptr);
    auto* chained = b.Neg(bad);
    QCOMPARE(chained, nullptr);
    QVERIFY(!b.ok());
    QVERIFY(Contains(b.status().error().message, "add (add): add operands must have the same dimensions"));
    // Nothing was left behind by the failed op.
    for (const auto& inst : b.computation()->instructions()) QVERIFY(inst->opcode() != Opcode::kAdd);
    // Parameters must come in order.
    Module m2("params");
    Builder b2(m2.AddComputation("entry", true));
    QCOMPARE(b2.Parameter(1, Shape(F32, {1})), nullptr);
    QVERIFY(Contains(b2.status().error().message, "parameters must be added in order; the next parameter number is 0"));
  }

  void literalText() {
    QCOMPARE(FormatLiteralText(Shape::Scalar(F32), {0.25}), std::string("0.25"));
    QCOMPARE(FormatLiteralText(Shape(F32, {3}), {1, -2.5, 3}), std::string("{1, -2.5, 3}"));
    QCOMPARE(FormatLiteralText(Shape(S32, {2, 2}), {1, 2, 3, 4}), std::string("{ {1, 2}, {3, 4} }"));
    QCOMPARE(FormatLiteralText(Shape(PRED, {2}), {1, 0}), std::string("{true, false}"));
    QCOMPARE(FormatLiteralText(Shape::Scalar(F32), {-INFINITY}), std::string("-inf"));
    Module m("c");
    Builder b(m.AddComputation("entry", true));
    auto* c = b.Constant(Shape(F32, {2}), {0.1, 7});
    QVERIFY(c);
    QCOMPARE(c->literal.text, std::string("{0.1, 7}"));
    QCOMPARE(c->literal.values.size(), size_t(2));
    QCOMPARE(c->literal.values[0], static_cast<double>(0.1f));  // rounded to f32
  }
};

QTEST_APPLESS_MAIN(TestShapeInference)
#include "test_shape_inference.moc"
