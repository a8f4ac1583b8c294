// The verifier (core/verifier.h): good modules pass, bad ones are rejected with a message naming
// the instruction and saying what was expected and found; no IR makes it crash.
#include <QtTest/QtTest>

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>

#include "core/ir/builder.h"
#include "core/ir/hlo_text.h"
#include "core/zoo/model_zoo.h"
#include "core/ir/verifier.h"
#include "tests/built_paths.h"

using namespace shardscope;

namespace {

constexpr auto F32 = PrimitiveType::kF32;
constexpr auto S32 = PrimitiveType::kS32;

// A small well-formed module: entry "main" computing (dot(x, w) + b, reduce-sum) with a while loop.
struct Sample {
  std::unique_ptr<Module> m = std::make_unique<Module>("sample");
  Computation* main = nullptr;
  Instruction *x = nullptr, *w = nullptr, *dot = nullptr, *sum = nullptr, *root = nullptr;
  Sample() {
    main = m->AddComputation("main", true);
    Builder b(main);
    x = b.Parameter(0, Shape(F32, {8, 4}), "x");
    w = b.Parameter(1, Shape(F32, {4, 16}), "w");
    dot = b.Dot(x, w, DotDims({1}, {0}), "dot.3");
    sum = b.Reduce(dot, b.ConstantScalar(F32, 0), {1}, ScalarAdd(*m, F32), "sum");
    root = b.Tuple({dot, sum}, "out");
    b.SetRoot(root);
    if (!b.ok()) qFatal("sample module failed to build: %s", b.status().error().message.c_str());
  }
};

std::string Reject(const Module& m, const VerifyOptions& o = {}) {
  Status s = VerifyModule(m, o);
  return s.ok() ? std::string("<accepted>") : s.error().message;
}

}  // namespace

class TestVerifier : public QObject {
  Q_OBJECT

 private slots:
  void acceptsGoodModules() {
    Sample s;
    QVERIFY(VerifyModule(*s.m).ok());
    for (const char* name : {"mlp", "transformer-layer", "transformer"}) {
      auto m = ZooBuild(name);
      QVERIFY2(m.ok(), m.ok() ? "" : m.error().message.c_str());
      Status st = VerifyModule(**m);
      QVERIFY2(st.ok(), st.ok() ? "" : st.error().message.c_str());
    }
  }

  // 1. Declared shape disagrees with the inferred one.
  void shapeMismatch() {
    Sample s;
    s.dot->set_shape(Shape(F32, {8, 8}));
    QCOMPARE(Reject(*s.m).substr(0, 60), std::string("main/dot.3: expected shape f32[8,16] for dot, found f32[8,8]").substr(0, 60));
    QVERIFY(Reject(*s.m).find("main/dot.3: expected shape f32[8,16] for dot, found f32[8,8]") == 0);
  }

  // 2. No entry computation.
  void noEntry() {
    Module m("empty");
    QCOMPARE(Reject(m), std::string("empty: module has no entry computation"));
  }

  // 3. A computation without a root.
  void noRoot() {
    Module m("noroot");
    Computation* c = m.AddComputation("main", true);
    Builder b(c);
    b.Parameter(0, Shape(F32, {2}));
    QCOMPARE(Reject(m), std::string("main: computation has no root instruction"));
  }

  // 4. Wrong operand count.
  void operandCount() {
    Sample s;
    Instruction* bad = s.main->AddInstruction(Opcode::kAdd, Shape(F32, {8, 16}), {s.dot}, "add.1");
    (void)bad;
    QCOMPARE(Reject(*s.m), std::string("main/add.1: add takes 2 operands, found 1"));
  }

  // 5. A reduce without its to_apply.
  void missingCalledComputation() {
    Sample s;
    s.sum->mutable_called_computations().clear();
    QCOMPARE(Reject(*s.m), std::string("main/sum: reduce takes 1 called computation, found 0"));
    s.sum->mutable_called_computations() = {nullptr};
    QCOMPARE(Reject(*s.m), std::string("main/sum: called computation 0 is missing"));
  }

  // 6. Parameter numbers not dense / duplicated.
  void parameterNumbers() {
    Sample s;
    s.w->parameter_number = 2;
    QCOMPARE(Reject(*s.m), std::string("main: parameter numbers must be dense: parameter 1 is missing (found parameter 2)"));
    s.w->parameter_number = 0;
    QCOMPARE(Reject(*s.m), std::string("main/w: parameter number 0 is used by more than one parameter"));
  }

  // 7. Attribute out of range (broadcast dimensions).
  void broadcastDimensionOutOfRange() {
    Sample s;
    Builder b(s.main);
    Instruction* bc = b.Broadcast(s.sum, {8, 3}, {0}, "bcast");
    QVERIFY(bc);
    bc->dimensions = {2};
    QCOMPARE(Reject(*s.m), std::string("main/bcast: broadcast dimensions {2} has dimension 2 out of range for rank 2"));
  }

  // 8. Slice bounds.
  void sliceOutOfBounds() {
    Sample s;
    Builder b(s.main);
    Instruction* sl = b.Slice(s.dot, {0, 0}, {8, 16}, {}, "sl");
    QVERIFY(sl);
    sl->slice.limits = {8, 17};
    QCOMPARE(Reject(*s.m),
             std::string("main/sl: slice [0:17] in dimension 1 is out of bounds for size 16 (need 0 <= start <= limit <= size)"));
  }

  // 9. Tiled sharding of the wrong rank.
  void shardingRank() {
    Sample s;
    s.m->num_partitions = 4;
    s.sum->set_sharding(HloSharding::Tile(TileAssignment::Iota({2, 2})));
    QCOMPARE(Reject(*s.m),
             std::string("main/sum: sharding {devices=[2,2]<=[4]} tiles 2 dimensions but the shape f32[8] has rank 1"));
    VerifyOptions no_shardings;
    no_shardings.check_shardings = false;
    QVERIFY(VerifyModule(*s.m, no_shardings).ok());
  }

  // 10. Sharding naming a device beyond num_partitions.
  void shardingDevices() {
    Sample s;
    s.m->num_partitions = 2;
    s.x->set_sharding(HloSharding::Tile(TileAssignment::Explicit({2, 1}, {0, 3})));
    QCOMPARE(Reject(*s.m), std::string("main/x: sharding {devices=[2,1]0,3} names device 3, outside the module's 2 partitions"));
    s.x->set_sharding(HloSharding::AssignDevice(5));
    QVERIFY(Reject(*s.m).find("main/x: sharding {maximal device=5} names device 5") == 0);
  }

  // 11. Tuple sharding with the wrong number of leaves.
  void tupleShardingLeaves() {
    Sample s;
    s.root->set_sharding(HloSharding::Tuple({HloSharding::Replicate()}));
    QCOMPARE(Reject(*s.m),
             std::string("main/out: tuple sharding has 1 element but the shape (f32[8,16], f32[8]) has 2 leaf arrays"));
    s.root->set_sharding(HloSharding::Tuple({HloSharding::Replicate(), HloSharding::Replicate()}));
    QVERIFY(VerifyModule(*s.m).ok());
  }

  // 12. Operand used before its definition (a cycle in the making).
  void useBeforeDef() {
    Sample s;
    Builder b(s.main);
    Instruction* later = b.Neg(s.dot, "later");
    s.dot->ReplaceOperand(0, later);  // dot now uses an instruction defined after it
    QCOMPARE(Reject(*s.m), std::string("main/dot.3: operand 0 (later) is used before it is defined (or the graph has a cycle)"));
  }

  // 13. Operand from another computation.
  void crossComputationOperand() {
    Sample s;
    Computation* other = s.m->AddComputation("other");
    Builder b(other);
    Instruction* p = b.Parameter(0, Shape(F32, {8, 16}), "p");
    other->AddInstruction(Opcode::kAdd, Shape(F32, {8, 16}), {p, s.dot}, "mixed");
    other->set_root(p);
    QCOMPARE(Reject(*s.m), std::string("other/mixed: operand 1 (dot.3) is not in computation other"));
  }

  // 14. Recursion through call.
  void recursion() {
    Sample s;
    Computation* f = s.m->AddComputation("f");
    Builder b(f);
    Instruction* p = b.Parameter(0, Shape(F32, {2}), "p");
    Instruction* call = f->AddInstruction(Opcode::kCall, Shape(F32, {2}), {p}, "self_call");
    call->mutable_called_computations() = {f};
    f->set_root(call);
    QCOMPARE(Reject(*s.m), std::string("f: computation calls itself, directly or through other computations (recursion is not allowed)"));
  }

  // 15. While loop whose body changes the state shape, and a reducer of the wrong signature.
  void whileAndReducerSignatures() {
    Sample s;
    Computation* cond = s.m->AddComputation("cond");
    { Builder b(cond); b.Parameter(0, Shape(S32, {})); b.SetRoot(b.ConstantScalar(PrimitiveType::kPred, 1)); }
    Computation* body = s.m->AddComputation("body");
    { Builder b(body); b.SetRoot(b.Convert(b.Parameter(0, Shape(S32, {})), F32)); }
    Builder b(s.main);
    Instruction* init = b.ConstantScalar(S32, 0, "init");
    Instruction* loop = s.main->AddInstruction(Opcode::kWhile, Shape(S32, {}), {init}, "loop");
    loop->mutable_called_computations() = {cond, body};
    QCOMPARE(Reject(*s.m), std::string("main/loop: while body body returns f32[], which differs from the loop state s32[]"));

    Sample t;
    Computation* mul3 = t.m->AddComputation("mul3");
    { Builder c(mul3); auto* a = c.Parameter(0, Shape::Scalar(F32)); c.Parameter(1, Shape::Scalar(F32)); c.Parameter(2, Shape::Scalar(F32)); c.SetRoot(a); }
    t.sum->mutable_called_computations() = {mul3};
    QCOMPARE(Reject(*t.m), std::string("main/sum: reduce to_apply computation mul3 must take 2 parameters, found 3"));
  }

  // 16. Dot dimension numbers out of range; get-tuple-element index out of range.
  void dotAndTupleIndex() {
    Sample s;
    s.dot->dot_dims.lhs_contracting = {5};
    QCOMPARE(Reject(*s.m), std::string("main/dot.3: dot lhs_contracting_dims {5} has dimension 5 out of range for rank 2"));
    Sample t;
    Builder b(t.main);
    Instruction* g = b.GetTupleElement(t.root, 1, "gte");
    g->tuple_index = -1;
    QCOMPARE(Reject(*t.m), std::string("main/gte: get-tuple-element index -1 out of range for a tuple of 2 elements"));
  }

  // 17. A constant whose values don't fill its shape.
  void constantValueCount() {
    Sample s;
    Builder b(s.main);
    Instruction* c = b.Constant(Shape(F32, {3}), {1, 2, 3}, "c3");
    c->literal.values.pop_back();
    QCOMPARE(Reject(*s.m), std::string("main/c3: constant has 2 values but its shape f32[3] holds 3 elements"));
  }

  // 18. Collective with inconsistent groups.
  void collectiveGroups() {
    Sample s;
    s.m->num_partitions = 4;
    Builder b(s.main);
    Instruction* ag = b.AllGather(s.sum, 0, CollectiveAttributes{{{0, 1}, {2, 3}}, 1, true}, "ag");
    QVERIFY(ag);
    QCOMPARE(ag->shape().ToString(false), std::string("f32[16]"));
    ag->replica_groups.groups = {{0, 1}, {1, 2}};
    QCOMPARE(Reject(*s.m), std::string("main/ag: replica_groups contain id 1 twice"));
  }

  // All of XLA's own conformance modules that parse must verify (they are valid XLA HLO).
  void conformanceCorpusVerifies() {
    const std::filesystem::path root = std::filesystem::path(SHARDSCOPE_SHARED_DIR) / "conformance" / "xla";
    if (!std::filesystem::exists(root)) QSKIP("../shared/conformance is not available");
    int parsed = 0, verified = 0;
    std::string first_failure;
    for (const char* sub : {"propagation", "spmd"}) {
      for (const auto& e : std::filesystem::directory_iterator(root / sub)) {
        if (e.path().extension() != ".hlo") continue;
        std::ifstream in(e.path());
        std::stringstream ss;
        ss << in.rdbuf();
        ParseOptions po;
        po.verify = false;
        auto m = ParseHloModule(ss.str(), e.path().filename().string(), po);
        if (!m.ok()) continue;  // parser coverage is tested elsewhere
        ++parsed;
        Status st = VerifyModule(**m);
        if (st.ok()) ++verified;
        else if (first_failure.empty()) first_failure = e.path().filename().string() + ": " + st.error().message;
      }
    }
    qInfo("conformance: %d modules parsed, %d verified", parsed, verified);
    QVERIFY(parsed > 500);
    QVERIFY2(verified == parsed, first_failure.c_str());
  }

  // Random attribute corruption of real modules: the verifier reports errors, never crashes.
  void neverCrashesOnCorruptedIr() {
    std::mt19937_64 rng(1234);
    auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
    auto junk = [&]() -> int64_t {
      static const int64_t values[] = {-5, -1, 0, 1, 2, 3, 7, 100, int64_t{1} << 40};
      return values[pick(9)];
    };
    auto junk_vec = [&]() {
      std::vector<int64_t> v(static_cast<size_t>(pick(5)));
      for (auto& x : v) x = junk();
      return v;
    };
    int rejected = 0, total = 0;
    for (int iter = 0; iter < 300; ++iter) {
      auto built = ZooBuild(iter % 2 ? "mlp" : "transformer-layer", {{"batch", "4"}, {"model", "8"}, {"hidden", "8"}});
      QVERIFY(built.ok());
      Module& m = **built;
      std::vector<Instruction*> all;
      for (const auto& c : m.computations())
        for (const auto& i : c->instructions()) all.push_back(i.get());
      for (int k = 0; k < 3; ++k) {
        Instruction* i = all[static_cast<size_t>(pick(static_cast<int64_t>(all.size())))];
        switch (pick(12)) {
          case 0: i->dimensions = junk_vec(); break;
          case 1: i->tuple_index = junk(); break;
          case 2: i->slice.starts = junk_vec(); i->slice.limits = junk_vec(); break;
          case 3: i->dot_dims.lhs_contracting = junk_vec(); i->dot_dims.rhs_batch = junk_vec(); break;
          case 4: i->mutable_called_computations() = {nullptr}; break;
          case 5: i->parameter_number = junk(); break;
          case 6: i->set_shape(Shape(F32, junk_vec())); break;
          case 7: i->padding.assign(static_cast<size_t>(pick(3)), PaddingDim{junk(), junk(), junk()}); break;
          case 8: i->replica_groups.groups = {junk_vec(), junk_vec()}; i->channel_id = junk(); break;
          case 9: i->gather_slice_sizes = junk_vec(); i->gather_dims.offset_dims = junk_vec(); break;
          case 10: i->window.dims.assign(static_cast<size_t>(pick(3)), WindowDimension{junk(), junk(), junk(), junk(), junk(), junk(), false}); break;
          case 11: i->set_shape(Shape::Tuple({Shape(S32, junk_vec())})); break;
        }
      }
      ++total;
      if (!VerifyModule(m).ok()) ++rejected;
    }
    QVERIFY(rejected > total / 2);  // most corruptions are caught
  }
};

QTEST_GUILESS_MAIN(TestVerifier)
#include "test_verifier.moc"
