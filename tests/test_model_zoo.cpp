// The model zoo (core/model_zoo.h): modules verify, have the GSPMD §5.1 parameter shapes and the
// GSPMD Table 1 annotations (cases G1-G3 of reference/validation.md use these modules), gradients
// match finite differences, optimizer steps follow their formulas, and the CLI builds them.
#include <QtCore/QElapsedTimer>
#include <QtCore/QFile>
#include <QtCore/QFileInfo>
#include <QtCore/QProcess>
#include <QtCore/QTemporaryDir>
#include <QtTest/QtTest>

#include <cmath>
#include <random>
#include <set>
#include <string>

#include "core/eval/evaluator.h"
#include "core/eval/virtual_cluster.h"
#include "core/ir/hlo_text.h"
#include "core/zoo/model_zoo.h"
#include "core/ir/verifier.h"
#include "tests/built_paths.h"
#include "tests/zoo_partitioning.h"

using namespace shardscope;

namespace {

std::unique_ptr<Module> Build(std::string_view name, const ZooOverrides& o = {}) {
  auto m = ZooBuild(name, o);
  if (!m.ok()) {
    qWarning("%s", m.error().message.c_str());
    return nullptr;
  }
  return std::move(m).value();
}

HloSharding Parse(const char* text) {
  auto s = HloSharding::Parse(text);
  if (!s.ok()) qFatal("bad sharding text %s: %s", text, s.error().message.c_str());
  return *s;
}

int CountAnnotated(const Module& m) {
  int n = 0;
  for (const auto& c : m.computations())
    for (const auto& i : c->instructions())
      if (i->has_sharding()) ++n;
  return n;
}

std::string ShapeOf(const Module& m, const char* name) {
  Instruction* i = m.FindInstruction(name);
  return i ? i->shape().ToString(false) : std::string("<missing ") + name + ">";
}

// Random arguments for the entry parameters (LayerNorm scales near 1, Adam second moments >= 0;
// integers, e.g. token ids, uniform in [0, classes)).
std::vector<Tensor> RandomArgs(const Module& m, uint64_t seed, int64_t classes = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<Tensor> args;
  for (Instruction* p : m.entry()->parameters()) {
    std::vector<double> v(static_cast<size_t>(p->shape().ElementCount()));
    const std::string& n = p->name();
    const bool integer = !IsFloatingPoint(p->shape().type);
    for (auto& x : v) {
      x = u(rng);
      if (integer) x = std::floor((x + 1) / 2 * static_cast<double>(classes));
      if (n.find("scale") != std::string::npos) x = 1 + 0.3 * x;
      if (n.size() > 2 && n.compare(n.size() - 2, 2, "_v") == 0) x = std::abs(x);
    }
    auto t = Tensor::FromValues(p->shape().type, p->shape().dims, v);
    if (!t.ok()) qFatal("%s", t.error().message.c_str());
    args.push_back(std::move(t).value());
  }
  return args;
}

// Central finite differences of the loss (output 0) against the gradient outputs (1..): for each
// weight parameter (entry parameters from `first_weight`), `probes` random elements. Returns the
// worst relative error (relative to at least `floor`: the finite differences' own noise is about
// 1e-10 where the loss is of order 1).
double WorstGradientError(const Module& m, int64_t first_weight, int probes, std::string* where, double floor = 1e-6,
                          int64_t classes = 1) {
  std::vector<Tensor> args = RandomArgs(m, 7, classes);
  auto out = Evaluate(m, args);
  if (!out.ok()) qFatal("evaluate: %s", out.error().message.c_str());
  std::mt19937_64 rng(99);
  double worst = 0;
  const int64_t n_params = static_cast<int64_t>(m.entry()->parameters().size());
  for (int64_t pi = first_weight; pi < n_params; ++pi) {
    const Tensor& grad = out->element(1 + pi - first_weight);
    for (int t = 0; t < probes; ++t) {
      const int64_t idx = static_cast<int64_t>(rng() % static_cast<uint64_t>(args[static_cast<size_t>(pi)].size()));
      const double h = 1e-5;
      auto plus = args, minus = args;
      plus[static_cast<size_t>(pi)].SetDouble(idx, args[static_cast<size_t>(pi)].GetDouble(idx) + h);
      minus[static_cast<size_t>(pi)].SetDouble(idx, args[static_cast<size_t>(pi)].GetDouble(idx) - h);
      const double lp = Evaluate(m, plus)->element(0).GetDouble(0);
      const double lm = Evaluate(m, minus)->element(0).GetDouble(0);
      const double fd = (lp - lm) / (2 * h);
      const double an = grad.GetDouble(idx);
      const double rel = std::abs(fd - an) / std::max(floor, std::abs(fd) + std::abs(an));
      if (rel > worst) {
        worst = rel;
        *where = m.entry()->parameter(pi)->name() + "[" + std::to_string(idx) + "]: finite difference " +
                 QString::number(fd, 'g', 12).toStdString() + ", gradient " + QString::number(an, 'g', 12).toStdString();
      }
    }
  }
  return worst;
}

const ZooOverrides kSmallTransformer = {{"batch", "2"}, {"seq", "4"}, {"model", "8"}, {"heads", "2"},
                                        {"head_dim", "4"}, {"hidden", "16"}, {"dtype", "f64"}};

}  // namespace

class TestModelZoo : public QObject {
  Q_OBJECT

 private slots:
  void registry() {
    const auto models = ZooList();
    QCOMPARE(models.size(), size_t(9));
    QCOMPARE(models[0].name, std::string("mlp"));
    QCOMPARE(models[1].name, std::string("transformer-layer"));
    QCOMPARE(models[2].name, std::string("transformer"));
    QCOMPARE(models[3].name, std::string("resnet50"));
    QCOMPARE(models[4].name, std::string("unet3d"));
    QCOMPARE(models[5].name, std::string("moe-layer"));
    QCOMPARE(models[6].name, std::string("moe-transformer"));
    QCOMPARE(models[7].name, std::string("pipelined-transformer"));
    QCOMPARE(models[8].name, std::string("ncf"));
    QCOMPARE(std::string(kZooDefaultExample), std::string("transformer-layer"));
    auto value = [](const ZooModel& m, const std::string& k) {
      for (const auto& p : m.parameters)
        if (p.name == k) return p.default_value;
      return std::string("<none>");
    };
    QCOMPARE(value(models[1], "annotations"), std::string("finalized"));
    QCOMPARE(value(models[1], "mesh_x"), std::string("4"));
    QCOMPARE(value(models[1], "mesh_y"), std::string("4"));
    QCOMPARE(value(models[1], "layers"), std::string("1"));
    QCOMPARE(value(models[1], "backward"), std::string("0"));
    QCOMPARE(value(models[2], "backward"), std::string("1"));
    QCOMPARE(value(models[2], "optimizer"), std::string("adam"));
    auto mesh = ZooMesh("transformer-layer", {{"mesh_x", "2"}, {"mesh_y", "8"}});
    QVERIFY(mesh.ok());
    QCOMPARE(mesh->ToString(), std::string("X=2,Y=8"));
  }

  // ZooOverridesForMesh: a mesh named beside a model sets the model's mesh settings (max-batch
  // --mesh); axes it does not name become 1; contradictions and unknown axes are errors.
  void overridesForMesh() {
    auto mesh = [](const char* text) { return DeviceMesh::Parse(text).value(); };
    auto t = ZooOverridesForMesh("transformer", {{"layers", "4"}}, mesh("X=8,Y=16"));
    QVERIFY2(t.ok(), t.ok() ? "" : t.error().message.c_str());
    QCOMPARE(t->at("mesh_x"), std::string("8"));
    QCOMPARE(t->at("mesh_y"), std::string("16"));
    QCOMPARE(t->at("layers"), std::string("4"));
    QCOMPARE(ZooMesh("transformer", *t)->ToString(), std::string("X=8,Y=16"));
    // Lower-case axis names; an axis the mesh does not name (Y) is one device.
    auto x = ZooOverridesForMesh("mlp", {}, mesh("x:128"));
    QVERIFY(x.ok());
    QCOMPARE(x->at("mesh_x"), std::string("128"));
    QCOMPARE(x->at("mesh_y"), std::string("1"));
    // The pipelined Transformer's L axis is its "stages" setting.
    auto p = ZooOverridesForMesh("pipelined-transformer", {}, mesh("L=4,X=2,Y=2"));
    QVERIFY2(p.ok(), p.ok() ? "" : p.error().message.c_str());
    QCOMPARE(p->at("stages"), std::string("4"));
    QCOMPARE(p->at("mesh_x"), std::string("2"));
    QCOMPARE(ZooMesh("pipelined-transformer", *p)->ToString(), std::string("L=4,X=2,Y=2"));
    // An axis of one device the model has no setting for changes nothing.
    QVERIFY(ZooOverridesForMesh("transformer", {}, mesh("X=4,Y=4,Z=1")).ok());
    // Errors: an axis the model cannot be sized on, a setting that contradicts the mesh, a model
    // whose other settings keep it from the mesh (the gshard MoE annotations are 1-D).
    auto z = ZooOverridesForMesh("transformer", {}, mesh("X=8,Z=16"));
    QVERIFY(!z.ok());
    QVERIFY2(z.error().message.find("no setting for mesh axis 'Z'") != std::string::npos, z.error().message.c_str());
    auto c = ZooOverridesForMesh("transformer", {{"mesh_x", "4"}}, mesh("X=8,Y=16"));
    QVERIFY(!c.ok());
    QVERIFY2(c.error().message.find("mesh_x=4 was set") != std::string::npos, c.error().message.c_str());
    auto g = ZooOverridesForMesh("moe-transformer", {}, mesh("X=8,Y=4"));
    QVERIFY(!g.ok());
    QVERIFY(!ZooOverridesForMesh("no-such-model", {}, mesh("X=2")).ok());
  }

  // The GUI's default example: one layer, B=8 S=16 M=64 N=8 D=16 H=256, 4x4 mesh, 2D finalized.
  void defaultExample() {
    auto m = Build(kZooDefaultExample);
    QVERIFY(m);
    QVERIFY(VerifyModule(*m).ok());
    QCOMPARE(m->num_partitions, int64_t(16));
    QCOMPARE(m->entry()->parameters().size(), size_t(7));
    QCOMPARE(ShapeOf(*m, "x"), std::string("f32[8,16,64]"));                 // BSM
    QCOMPARE(ShapeOf(*m, "layer0_ln1_scale"), std::string("f32[64]"));
    QCOMPARE(ShapeOf(*m, "layer0_wqkv"), std::string("f32[3,64,8,16]"));     // W_Q,W_K,W_V: MND, fused
    QCOMPARE(ShapeOf(*m, "layer0_wo"), std::string("f32[8,16,64]"));         // NDM
    QCOMPARE(ShapeOf(*m, "layer0_wi"), std::string("f32[64,256]"));          // MH
    QCOMPARE(ShapeOf(*m, "layer0_wout"), std::string("f32[256,64]"));        // HM
    QCOMPARE(ShapeOf(*m, "layer0_attention_qkv"), std::string("f32[8,16,3,8,16]"));  // BSND x3
    QCOMPARE(ShapeOf(*m, "layer0_attention_scores"), std::string("f32[8,8,16,16]"));
    QCOMPARE(ShapeOf(*m, "layer0_ffn_wi"), std::string("f32[8,16,256]"));    // BSH
    QCOMPARE(m->entry()->root()->shape().ToString(false), std::string("f32[8,16,64]"));
    QCOMPARE(CountAnnotated(*m), 7);  // GSPMD §5.1: "only requires 7 annotations"
  }

  // GSPMD Table 1 on a 4x4 mesh (X = major axis, devices row-major): cases G1, G2, G3 of
  // reference/validation.md are run on exactly these annotations.
  void table1Annotations_data() {
    QTest::addColumn<QString>("set");
    QTest::addColumn<QString>("bsm");
    QTest::addColumn<QString>("bsnd");
    QTest::addColumn<QString>("bsh");
    // BSM, BSND (on the fused [B,S,3,N,D]) and BSH per set; weights are the same in all sets.
    QTest::newRow("G1 2D Attempt 1") << "attempt1"
                                     << "{devices=[1,1,4,4]<=[16] last_tile_dim_replicate}"        // _,_,X
                                     << "{devices=[1,1,1,4,1,4]<=[4,4]T(1,0) last_tile_dim_replicate}"  // _,_,Y,_
                                     << "{devices=[1,1,4,4]<=[4,4]T(1,0) last_tile_dim_replicate}";  // _,_,Y
    QTest::newRow("G2 2D Attempt 2") << "attempt2"
                                     << "{devices=[4,1,1,4]<=[16] last_tile_dim_replicate}"        // X,_,_
                                     << "{devices=[4,1,1,4,1]<=[16]}"                              // X,_,Y,_
                                     << "{devices=[4,1,4]<=[16]}";                                 // X,_,Y
    QTest::newRow("G3 2D finalized") << "finalized"
                                     << "{devices=[4,1,4]<=[16]}"                                  // X,_,Y
                                     << "{devices=[4,1,1,4,1]<=[16]}"                              // X,_,Y,_
                                     << "{devices=[4,1,4]<=[16]}";                                 // X,_,Y
  }
  void table1Annotations() {
    QFETCH(QString, set);
    QFETCH(QString, bsm);
    QFETCH(QString, bsnd);
    QFETCH(QString, bsh);
    auto m = Build("transformer-layer", {{"annotations", set.toStdString()}});
    QVERIFY(m);
    auto sharding_of = [&](const char* name) {
      Instruction* i = m->FindInstruction(name);
      if (!i || !i->has_sharding()) qFatal("%s has no sharding", name);
      return *i->sharding();
    };
    QCOMPARE(CountAnnotated(*m), 7);
    // Weights: W_QKV X,Y,_ (fused leading 3 unsplit), W_O Y,_,X, W_in X,Y, W_out Y,X.
    QCOMPARE(sharding_of("layer0_wqkv"), Parse("{devices=[1,4,4,1]<=[16]}"));
    QCOMPARE(sharding_of("layer0_wo"), Parse("{devices=[4,1,4]<=[4,4]T(1,0)}"));
    QCOMPARE(sharding_of("layer0_wi"), Parse("{devices=[4,4]<=[16]}"));
    QCOMPARE(sharding_of("layer0_wout"), Parse("{devices=[4,4]<=[4,4]T(1,0)}"));
    // W_O: N split on Y, M on X: the tile holding N-part 1 and M-part 2 is device X=2,Y=1 -> 9.
    QCOMPARE(sharding_of("layer0_wo").tile_assignment()({1, 0, 2}), int64_t(9));
    QCOMPARE(sharding_of("x"), Parse(bsm.toStdString().c_str()));
    QCOMPARE(sharding_of("layer0_attention_qkv"), Parse(bsnd.toStdString().c_str()));
    QCOMPARE(sharding_of("layer0_ffn_wi"), Parse(bsh.toStdString().c_str()));
    // Per-device bytes: weights are 1/16 of the whole in every set (O(1/XY)).
    const Instruction* wi = m->FindInstruction("layer0_wi");
    QCOMPARE(wi->sharding()->BytesPerDevice(wi->shape()), int64_t(64 * 256 * 4 / 16));
    // The table itself.
    const auto s = *AnnotationSetFromName(set.toStdString());
    QCOMPARE(Table1DimsMapping(s, Table1Tensor::kWo), (std::vector<int64_t>{1, -1, 0}));
  }

  void noAnnotationsAndOtherMeshes() {
    auto none = Build("transformer-layer", {{"annotations", "none"}});
    QVERIFY(none);
    QCOMPARE(CountAnnotated(*none), 0);
    auto m = Build("transformer-layer", {{"mesh_x", "2"}, {"mesh_y", "8"}, {"heads", "16"}});
    QVERIFY(m);
    QCOMPARE(m->num_partitions, int64_t(16));
    QCOMPARE(*m->FindInstruction("x")->sharding(), Parse("{devices=[2,1,8]<=[16]}"));
    QCOMPARE(*m->FindInstruction("layer0_wo")->sharding(), Parse("{devices=[8,1,2]<=[2,8]T(1,0)}"));
  }

  void mlpAnnotations() {
    auto m = Build("mlp", {{"backward", "0"}, {"optimizer", "none"}, {"layers", "3"}});
    QVERIFY(m);
    QCOMPARE(CountAnnotated(*m), 12);  // x (BM), W1 (MH), W2 (HM), hidden (BH) per layer
    QCOMPARE(ShapeOf(*m, "layer0_w1"), std::string("f32[64,256]"));
    QCOMPARE(ShapeOf(*m, "layer2_b2"), std::string("f32[64]"));
    QCOMPARE(*m->FindInstruction("x")->sharding(), Parse("{devices=[4,4]<=[16]}"));
    QCOMPARE(*m->FindInstruction("layer1_w2")->sharding(), Parse("{devices=[4,4]<=[4,4]T(1,0)}"));
    QCOMPARE(*m->FindInstruction("layer1_hidden")->sharding(), Parse("{devices=[4,4]<=[16]}"));
  }

  void stackedLayersAndScopes() {
    auto m = Build("transformer", {{"layers", "3"}, {"backward", "0"}, {"optimizer", "none"}});
    QVERIFY(m);
    QCOMPARE(CountAnnotated(*m), 21);
    // The input of layer 1 is the output of layer 0, annotated BSM.
    Instruction* l0_out = m->FindInstruction("layer0_residual2");
    QVERIFY(l0_out && l0_out->has_sharding());
    QCOMPARE(*l0_out->sharding(), Parse("{devices=[4,1,4]<=[16]}"));
    QCOMPARE(m->FindInstruction("layer2_ffn_wi")->op_name(), std::string("forward/layer2/ffn/wi"));
    QCOMPARE(m->FindInstruction("layer1_attention_qkv")->op_name(), std::string("forward/layer1/attention/qkv"));
    QCOMPARE(m->FindInstruction("layer1_attention_softmax_probs")->op_name(), std::string("forward/layer1/attention/softmax/probs"));

    auto t = Build("transformer", {{"layers", "2"}});
    QVERIFY(t);
    QVERIFY(t->FindInstruction("backward_layer1_ffn_dwi"));
    QCOMPARE(t->FindInstruction("backward_layer1_ffn_dwi")->op_name(), std::string("backward/layer1/ffn/dwi"));
    QCOMPARE(t->FindInstruction("optimizer_layer0_ffn_wi_new")->op_name(), std::string("optimizer/layer0/ffn/wi_new"));
    QCOMPARE(t->FindInstruction("backward_layer1_ln1_dscale")->op_name(), std::string("backward/layer1/ln1/dscale"));
  }

  // A training step's op_name scopes read like the model: forward/, loss/, backward/, optimizer/ at
  // the top, and backward and optimizer use the forward's scopes (backward/layer1/ln1 mirrors
  // forward/layer1/ln1, not backward/layer1/attention/ln1).
  void trainingStepScopesMirrorTheForward() {
    for (const char* name : {"transformer", "mlp", "moe-transformer", "resnet50", "unet3d"}) {
      auto m = Build(name, {{"backward", "1"}, {"optimizer", "adam"}});
      QVERIFY2(m, name);
      std::set<std::string> scopes[4];  // per phase: the scope paths below it
      const char* phases[] = {"forward", "loss", "backward", "optimizer"};
      for (const auto& inst : m->entry()->instructions()) {
        const std::string op = inst->op_name();
        if (op.empty()) {
          // Only the inputs, the weights (and their optimizer state) and the output tuple.
          QVERIFY2(inst->opcode() == Opcode::kParameter || inst->is_root(), (std::string(name) + ": " + inst->name()).c_str());
          continue;
        }
        const std::string phase = op.substr(0, op.find('/'));
        const std::string scope = op.substr(0, op.rfind('/'));
        int k = -1;
        for (int i = 0; i < 4; ++i)
          if (phase == phases[i]) k = i;
        QVERIFY2(k >= 0, (std::string(name) + ": " + inst->name() + " has op_name " + op).c_str());
        if (scope.size() > phase.size()) scopes[k].insert(scope.substr(phase.size() + 1));
      }
      QVERIFY2(!scopes[0].empty() && !scopes[2].empty() && !scopes[3].empty(), name);
      for (int k : {2, 3}) {
        for (const std::string& s : scopes[k]) {
          QVERIFY2(scopes[0].count(s), (std::string(name) + ": " + phases[k] + "/" + s + " has no forward/" + s).c_str());
        }
      }
    }
  }

  // The benchmark's 64-layer training step: tens of thousands of instructions, still verifying.
  void trainingStep64Layers() {
    QElapsedTimer timer;
    timer.start();
    auto m = Build("transformer", {{"layers", "64"}});
    QVERIFY(m);
    const qint64 build_ms = timer.elapsed();
    QVERIFY(m->instruction_count() > 20000);
    QCOMPARE(CountAnnotated(*m), 64 * 7);
    // Parameters: x, target, 6 weights per layer, Adam m and v for each weight.
    QCOMPARE(m->entry()->parameters().size(), size_t(2 + 64 * 6 * 3));
    // Outputs: loss, new weights, new m, new v.
    QCOMPARE(m->entry()->root()->shape().tuple.size(), size_t(1 + 64 * 6 * 3));
    QVERIFY(VerifyModule(*m).ok());
    qInfo("64-layer training step: %lld instructions, built and verified in %lld ms",
          static_cast<long long>(m->instruction_count()), static_cast<long long>(build_ms));
  }

  void gradientsMatchFiniteDifferences() {
    ZooOverrides t = kSmallTransformer;
    t["layers"] = "2";
    t["optimizer"] = "none";
    auto tr = Build("transformer", t);
    QVERIFY(tr);
    std::string where;
    double worst = WorstGradientError(*tr, 2, 3, &where);
    qInfo("transformer (2 layers, LayerNorm): worst relative gradient error %.3g", worst);
    QVERIFY2(worst < 1e-5, where.c_str());

    t["layernorm"] = "0";
    auto tr_noln = Build("transformer", t);
    QVERIFY(tr_noln);
    worst = WorstGradientError(*tr_noln, 2, 3, &where);
    QVERIFY2(worst < 1e-5, where.c_str());

    auto mlp = Build("mlp", {{"batch", "3"}, {"model", "4"}, {"hidden", "6"}, {"layers", "2"}, {"optimizer", "none"},
                             {"dtype", "f64"}, {"annotations", "none"}});
    QVERIFY(mlp);
    worst = WorstGradientError(*mlp, 2, 4, &where);
    qInfo("mlp: worst relative gradient error %.3g", worst);
    QVERIFY2(worst < 1e-5, where.c_str());
  }

  void optimizerSteps() {
    ZooOverrides base = kSmallTransformer;
    base["learning_rate"] = "0.125";
    base["optimizer"] = "none";
    auto grads_m = Build("transformer", base);
    base["optimizer"] = "sgd";
    auto sgd_m = Build("transformer", base);
    QVERIFY(grads_m && sgd_m);
    // Same inputs: the SGD module's parameters are a prefix of none's? Both take x, target, weights.
    QCOMPARE(grads_m->entry()->parameters().size(), sgd_m->entry()->parameters().size());
    auto args = RandomArgs(*grads_m, 3);
    auto g = Evaluate(*grads_m, args);
    auto s = Evaluate(*sgd_m, args);
    QVERIFY(g.ok() && s.ok());
    const int64_t n_w = static_cast<int64_t>(args.size()) - 2;
    for (int64_t k = 0; k < n_w; ++k) {
      const Tensor& w = args[static_cast<size_t>(2 + k)];
      for (int64_t i = 0; i < w.size(); i += 7) {
        const double expect = w.GetDouble(i) - 0.125 * g->element(1 + k).GetDouble(i);
        QVERIFY(std::abs(s->element(1 + k).GetDouble(i) - expect) < 1e-12);
      }
    }
    QCOMPARE(s->element(0).GetDouble(0), g->element(0).GetDouble(0));  // same loss

    base["optimizer"] = "adam";
    auto adam_m = Build("transformer", base);
    QVERIFY(adam_m);
    auto aargs = RandomArgs(*adam_m, 3);  // same x/target/weights (same seed), then m and v
    for (int64_t k = 0; k < 2 + n_w; ++k) QVERIFY(aargs[static_cast<size_t>(k)].Identical(args[static_cast<size_t>(k)]));
    auto a = Evaluate(*adam_m, aargs);
    QVERIFY(a.ok());
    for (int64_t k = 0; k < n_w; ++k) {
      const Tensor& w = aargs[static_cast<size_t>(2 + k)];
      const Tensor& m0 = aargs[static_cast<size_t>(2 + n_w + k)];
      const Tensor& v0 = aargs[static_cast<size_t>(2 + 2 * n_w + k)];
      for (int64_t i = 0; i < w.size(); i += 5) {
        const double gr = g->element(1 + k).GetDouble(i);
        const double m1 = 0.9 * m0.GetDouble(i) + 0.1 * gr;
        const double v1 = 0.999 * v0.GetDouble(i) + 0.001 * gr * gr;
        const double w1 = w.GetDouble(i) - 0.125 * m1 / (std::sqrt(v1) + 1e-8);
        QVERIFY(std::abs(a->element(1 + k).GetDouble(i) - w1) < 1e-9);
        QVERIFY(std::abs(a->element(1 + n_w + k).GetDouble(i) - m1) < 1e-12);
        QVERIFY(std::abs(a->element(1 + 2 * n_w + k).GetDouble(i) - v1) < 1e-12);
      }
    }
  }

  void mixedPrecision() {
    auto m = Build("transformer", {{"act_dtype", "bf16"}, {"layers", "1"}, {"optimizer", "sgd"}});
    QVERIFY(m);
    QCOMPARE(ShapeOf(*m, "x"), std::string("bf16[8,16,64]"));
    QCOMPARE(ShapeOf(*m, "layer0_wqkv"), std::string("f32[3,64,8,16]"));
    QCOMPARE(ShapeOf(*m, "layer0_attention_qkv"), std::string("bf16[8,16,3,8,16]"));
    // Updated weights keep the parameter type.
    const Shape& root = m->entry()->root()->shape();
    QCOMPARE(root.tuple[2].ToString(false), std::string("f32[3,64,8,16]"));
  }

  void roundTripThroughHloText() {
    for (const char* name : {"mlp", "transformer-layer", "transformer", "resnet50", "unet3d", "moe-layer", "moe-transformer"}) {
      auto m = Build(name);
      QVERIFY(m);
      const std::string text = PrintHloModule(*m);
      auto back = ParseHloModule(text, name);
      QVERIFY2(back.ok(), back.ok() ? "" : back.error().message.c_str());
      std::string why;
      QVERIFY2(ModulesEqual(*m, **back, &why), why.c_str());
    }
  }

  void buildErrors() {
    auto unknown = ZooBuild("vgg");
    QVERIFY(!unknown.ok());
    QCOMPARE(unknown.error().message, std::string("unknown zoo model 'vgg' (models: mlp, transformer-layer, transformer, resnet50, unet3d, moe-layer, "
                                                   "moe-transformer, pipelined-transformer, ncf)"));
    auto bad_key = ZooBuild("mlp", {{"depth", "3"}});
    QVERIFY(!bad_key.ok());
    QVERIFY(bad_key.error().message.rfind("model mlp has no parameter 'depth' (parameters: batch, model,", 0) == 0);
    auto bad_value = ZooBuild("transformer", {{"layers", "many"}});
    QCOMPARE(bad_value.error().message, std::string("parameter layers must be an integer, found 'many'"));
    auto bad_set = ZooBuild("transformer", {{"annotations", "attempt3"}});
    QVERIFY(bad_set.error().message.find("annotations must be none, attempt1, attempt2, finalized or data-parallel") != std::string::npos);
    auto no_bwd = ZooBuild("transformer", {{"backward", "0"}});  // default optimizer adam
    QCOMPARE(no_bwd.error().message, std::string("transformer: an optimizer step needs backward=1"));
    auto zero = ZooBuild("transformer-layer", {{"heads", "0"}});
    QCOMPARE(zero.error().message, std::string("transformer-layer: heads must be >= 1, found 0"));
    auto huge = ZooBuild("transformer-layer", {{"seq", "16777216"}, {"batch", "4096"}});
    QVERIFY(!huge.ok());
    QVERIFY(huge.error().message.find("more than 2^50 elements") != std::string::npos);
    auto blocks = ZooBuild("resnet50", {{"blocks", "3,x"}});
    QCOMPARE(blocks.error().message, std::string("parameter blocks must be comma-separated integers, found '3,x'"));
    auto levels = ZooBuild("unet3d", {{"image", "100"}});
    QCOMPARE(levels.error().message, std::string("unet3d: image = 100 must be a multiple of 2^(levels-1) = 8"));
    auto set = ZooBuild("resnet50", {{"annotations", "finalized"}});
    QCOMPARE(set.error().message, std::string("parameter annotations must be none, data or spatial, found 'finalized'"));
  }

  void cli() {
    const QString cli = QString::fromUtf8(SHARDSCOPE_CLI_PATH);
    if (!QFileInfo::exists(cli)) QSKIP("shardscope-cli not built");
    QProcess list;
    list.start(cli, {"zoo", "list"});
    QVERIFY(list.waitForFinished(60000));
    QCOMPARE(list.exitCode(), 0);
    const QString out = QString::fromUtf8(list.readAllStandardOutput());
    QVERIFY(out.contains("transformer-layer (default example)"));
    QVERIFY(out.contains("annotations=finalized"));

    QTemporaryDir dir;
    const QString file = dir.filePath("t.hlo");
    QProcess build;
    build.start(cli, {"zoo", "build", "transformer", "--set", "layers=2", "--set", "annotations=attempt1", "-o", file});
    QVERIFY(build.waitForFinished(60000));
    QCOMPARE(build.exitCode(), 0);
    QFile f(file);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const std::string text = f.readAll().toStdString();
    auto parsed = ParseHloModule(text, "t.hlo");
    QVERIFY2(parsed.ok(), parsed.ok() ? "" : parsed.error().message.c_str());
    QCOMPARE(CountAnnotated(**parsed), 14);
    QCOMPARE(*(*parsed)->FindInstruction("x")->sharding(), Parse("{devices=[1,1,4,4]<=[16] last_tile_dim_replicate}"));

    QProcess bad;
    bad.start(cli, {"zoo", "build", "transformer", "--set", "layers"});
    QVERIFY(bad.waitForFinished(60000));
    QCOMPARE(bad.exitCode(), 2);
    QVERIFY(QString::fromUtf8(bad.readAllStandardError()).contains("--set expects KEY=VALUE"));
  }

  // ResNet-50 at its real sizes: torchvision's resnet50 has 25,557,032 weights (convolutions,
  // BatchNorm scales and offsets, the classifier with its bias); the shapes of He et al. Table 1.
  void resnet50RealSizes() {
    auto m = Build("resnet50", {{"optimizer", "none"}});
    QVERIFY(m);
    int64_t weights = 0, n_weights = 0;
    for (Instruction* p : m->entry()->parameters()) {
      if (p->name() == "x" || p->name() == "labels") continue;
      weights += p->shape().ElementCount();
      ++n_weights;
    }
    QCOMPARE(weights, int64_t(25557032));
    QCOMPARE(n_weights, int64_t(161));  // stem 3, 16 blocks x 9, 4 projections x 3, classifier 2
    QCOMPARE(ShapeOf(*m, "x"), std::string("f32[64,224,224,3]"));
    QCOMPARE(ShapeOf(*m, "stem_conv"), std::string("f32[64,112,112,64]"));
    QCOMPARE(ShapeOf(*m, "stem_pool"), std::string("f32[64,56,56,64]"));
    QCOMPARE(ShapeOf(*m, "stage1_block0_out"), std::string("f32[64,56,56,256]"));
    QCOMPARE(ShapeOf(*m, "stage2_block0_conv2_conv"), std::string("f32[64,28,28,128]"));  // stride in the 3x3
    QCOMPARE(ShapeOf(*m, "stage4_block2_out"), std::string("f32[64,7,7,2048]"));
    QCOMPARE(ShapeOf(*m, "head_logits"), std::string("f32[64,1000]"));
    QCOMPARE(ShapeOf(*m, "stage3_block5_conv3_w"), std::string("f32[1,1,256,1024]"));
    // Data parallel: only the inputs are annotated, the batch over the 8 devices of X.
    QCOMPARE(CountAnnotated(*m), 2);
    QCOMPARE(*m->FindInstruction("x")->sharding(), Parse("{devices=[8,1,1,1]<=[8]}"));
    // The gradient outputs have the weights' shapes.
    QCOMPARE(m->entry()->root()->shape().tuple.size(), size_t(1 + 161));
    // LARS keeps one momentum per weight.
    auto lars = Build("resnet50");
    QVERIFY(lars);
    QCOMPARE(lars->entry()->parameters().size(), size_t(2 + 2 * 161));
    QCOMPARE(lars->entry()->root()->shape().tuple.size(), size_t(1 + 2 * 161));
    QCOMPARE(ShapeOf(*lars, "head_fc_w_m"), std::string("f32[2048,1000]"));
    auto spatial = Build("resnet50", {{"annotations", "spatial"}, {"mesh_x", "2"}, {"mesh_y", "4"}});
    QVERIFY(spatial);
    QCOMPARE(*spatial->FindInstruction("x")->sharding(), Parse("{devices=[2,4,1,1]<=[8]}"));
  }

  // The 3-D U-Net at GSPMD Table 8's sizes: 128^3 images, Çiçek et al.'s channel counts.
  void unet3dShapes() {
    auto m = Build("unet3d", {{"mesh_y", "16"}});
    QVERIFY(m);
    QCOMPARE(m->num_partitions, int64_t(16));
    QCOMPARE(ShapeOf(*m, "x"), std::string("f32[4,128,128,128,1]"));
    QCOMPARE(ShapeOf(*m, "down0_convb_conv"), std::string("f32[4,128,128,128,64]"));
    QCOMPARE(ShapeOf(*m, "down0_pool"), std::string("f32[4,64,64,64,64]"));
    QCOMPARE(ShapeOf(*m, "down3_convb_conv"), std::string("f32[4,16,16,16,512]"));
    QCOMPARE(ShapeOf(*m, "up2_upconv_conv"), std::string("f32[4,32,32,32,512]"));
    QCOMPARE(ShapeOf(*m, "up2_concat"), std::string("f32[4,32,32,32,768]"));
    QCOMPARE(ShapeOf(*m, "up0_convb_conv"), std::string("f32[4,128,128,128,64]"));
    QCOMPARE(ShapeOf(*m, "final_conv"), std::string("f32[4,128,128,128,3]"));
    QCOMPARE(ShapeOf(*m, "up1_upconv_w"), std::string("f32[2,2,2,256,256]"));
    // Only the inputs carry annotations: the batch on X (1 way) and the depth on Y (16 ways).
    QCOMPARE(CountAnnotated(*m), 2);
    QCOMPARE(*m->FindInstruction("x")->sharding(), Parse("{devices=[1,16,1,1,1]<=[16]}"));
  }

  // GShard's MoE: the expert dimension on the expert weights and the einsums, the capacity
  // C = 2N/(G E), the annotations of each set.
  void moeShapesAndAnnotations() {
    auto m = Build("moe-transformer", {{"batch", "8"}, {"seq", "16"}, {"experts", "8"}, {"mesh_x", "4"}});
    QVERIFY(m);
    QCOMPARE(ShapeOf(*m, "layer1_wg"), std::string("f32[32,8]"));             // ME
    QCOMPARE(ShapeOf(*m, "layer1_expert_wi"), std::string("f32[8,32,64]"));  // EMH
    QCOMPARE(ShapeOf(*m, "layer1_expert_wo"), std::string("f32[8,64,32]"));   // EHM
    QVERIFY(!m->FindInstruction("layer0_wg"));                                // layer 0 is dense
    QCOMPARE(ShapeOf(*m, "layer0_wi"), std::string("f32[32,64]"));
    // G = 4 groups of N/G = 32 tokens; C = 2 * 32 / 8 = 8.
    QCOMPARE(ShapeOf(*m, "layer1_moe_inputs"), std::string("f32[4,32,32]"));                  // GSM
    QCOMPARE(ShapeOf(*m, "layer1_moe_gating_dispatch_mask"), std::string("f32[4,32,8,8]"));  // GSEC
    QCOMPARE(ShapeOf(*m, "layer1_moe_dispatched"), std::string("f32[8,4,8,32]"));             // EGCM
    QCOMPARE(ShapeOf(*m, "layer1_moe_experts_wi"), std::string("f32[8,4,8,64]"));             // EGCH
    QCOMPARE(*m->FindInstruction("layer1_expert_wi")->sharding(), Parse("{devices=[4,1,1]<=[4]}"));
    QCOMPARE(*m->FindInstruction("layer1_moe_dispatched")->sharding(), Parse("{devices=[4,1,1,1]<=[4]}"));
    QCOMPARE(*m->FindInstruction("layer1_moe_expert_outputs_by_group")->sharding(), Parse("{devices=[1,4,1,1]<=[4]}"));
    QCOMPARE(*m->FindInstruction("layer0_wqkv")->sharding(), Parse("{replicated}"));
    QCOMPARE(*m->FindInstruction("x")->sharding(), Parse("{devices=[4,1,1]<=[4]}"));
    auto hybrid = Build("moe-transformer", {{"annotations", "hybrid"}, {"mesh_x", "2"}, {"mesh_y", "2"}});
    QVERIFY(hybrid);
    QCOMPARE(*hybrid->FindInstruction("layer1_expert_wi")->sharding(), Parse("{devices=[2,1,2]<=[4]}"));  // E on X, H on Y
    QCOMPARE(*hybrid->FindInstruction("layer0_wi")->sharding(), Parse("{devices=[2,2]<=[4]}"));           // Table 1 MH
    QCOMPARE(*hybrid->FindInstruction("x")->sharding(), Parse("{devices=[2,1,2]<=[4]}"));                 // BSM X,_,Y
    auto capacity = Build("moe-layer", {{"capacity", "3"}, {"backward", "0"}});
    QVERIFY(capacity);
    QCOMPARE(ShapeOf(*capacity, "layer0_moe_dispatched"), std::string("f32[4,4,3,32]"));
  }

  void unetAndMoeGradients() {
    auto unet = Build("unet3d", {{"batch", "2"}, {"image", "4"}, {"width", "1"}, {"levels", "2"}, {"classes", "2"},
                                 {"channels", "2"}, {"optimizer", "none"}, {"dtype", "f64"}, {"annotations", "none"}});
    QVERIFY(unet);
    std::string where;
    double worst = WorstGradientError(*unet, 2, 2, &where, 1e-4);
    qInfo("unet3d (2 levels): worst relative gradient error %.3g", worst);
    QVERIFY2(worst < 1e-5, where.c_str());
    // The MoE's gradients include the gating's (combine weights and the load-balancing loss).
    auto moe = Build("moe-transformer", {{"batch", "4"}, {"seq", "4"}, {"model", "4"}, {"heads", "2"}, {"head_dim", "2"},
                                         {"hidden", "6"}, {"experts", "4"}, {"mesh_x", "2"}, {"optimizer", "none"},
                                         {"aux_loss_weight", "0.5"}, {"dtype", "f64"}});
    QVERIFY(moe);
    worst = WorstGradientError(*moe, 2, 3, &where, 1e-4);
    qInfo("moe-transformer (dense + MoE layer): worst relative gradient error %.3g", worst);
    QVERIFY2(worst < 1e-5, where.c_str());
  }

  // The paper's language model (GSPMD §5.1, "the vocabulary size is 32000"): vocab > 0 takes token
  // ids and labels, adds the embedding table E [V,M] (a one-hot matmul) and the softmax weight W_s
  // [M,V] as weights, annotated as Figure 2's caption says (Y partitions the vocabulary, X is data
  // parallelism) with the weights also split over X like Table 1's.
  void vocabularyLayers() {
    ZooOverrides o = kSmallTransformer;
    o["vocab"] = "32";
    o["layers"] = "2";
    o["mesh_x"] = "2";
    o["mesh_y"] = "2";
    o["optimizer"] = "none";
    auto m = Build("transformer", o);
    QVERIFY(m);
    QVERIFY(VerifyModule(*m).ok());
    const auto& params = m->entry()->parameters();
    QCOMPARE(params.size(), size_t(2 + 1 + 2 * 6 + 1));
    QCOMPARE(params[0]->name(), std::string("ids"));
    QCOMPARE(params[1]->name(), std::string("labels"));
    QCOMPARE(params[2]->name(), std::string("embedding_table"));
    QCOMPARE(params.back()->name(), std::string("softmax_weight"));
    QCOMPARE(ShapeOf(*m, "ids"), std::string("s32[2,4]"));
    QCOMPARE(ShapeOf(*m, "labels"), std::string("s32[2,4]"));
    QCOMPARE(ShapeOf(*m, "embedding_table"), std::string("f64[32,8]"));   // V, M
    QCOMPARE(ShapeOf(*m, "softmax_weight"), std::string("f64[8,32]"));    // M, V
    QCOMPARE(ShapeOf(*m, "embedding_one_hot"), std::string("f64[2,4,32]"));
    QCOMPARE(ShapeOf(*m, "embedding_lookup"), std::string("f64[2,4,8]"));
    QCOMPARE(ShapeOf(*m, "softmax_logits"), std::string("f64[2,4,32]"));
    QVERIFY(!m->FindInstruction("x") && !m->FindInstruction("target"));
    // Outputs: the loss, then a gradient per weight in parameter order (dE first, dW_s last).
    const Shape& root = m->entry()->root()->shape();
    QCOMPARE(root.tuple.size(), size_t(1 + 1 + 2 * 6 + 1));
    QCOMPARE(root.tuple[1].ToString(false), std::string("f64[32,8]"));
    QCOMPARE(root.tuple.back().ToString(false), std::string("f64[8,32]"));
    // Annotations: 7 per layer + E, W_s, the tokens' and the labels' one-hots and the logits.
    QCOMPARE(CountAnnotated(*m), 2 * 7 + 5);
    auto sharding_of = [&](const Module& mod, const char* name) {
      Instruction* i = mod.FindInstruction(name);
      if (!i || !i->has_sharding()) qFatal("%s has no sharding", name);
      return *i->sharding();
    };
    QCOMPARE(sharding_of(*m, "embedding_table"), Parse("{devices=[2,2]<=[2,2]T(1,0)}"));  // V on Y, M on X
    QCOMPARE(sharding_of(*m, "softmax_weight"), Parse("{devices=[2,2]<=[4]}"));           // M on X, V on Y
    for (const char* bsv : {"embedding_one_hot", "softmax_logits", "loss_label_one_hot"})
      QCOMPARE(sharding_of(*m, bsv), Parse("{devices=[2,1,2]<=[4]}"));                   // B on X, V on Y
    QCOMPARE(sharding_of(*m, "embedding_lookup"), Parse("{devices=[2,1,2]<=[4]}"));      // the layer input: BSM
    QCOMPARE(VocabularyDimsMapping(AnnotationSet::kFinalized, VocabularyTensor::kEmbedding), (std::vector<int64_t>{1, 0}));
    QVERIFY(VocabularyDimsMapping(AnnotationSet::kNone, VocabularyTensor::kBSV).empty());

    // Data parallelism: the vocabulary weights replicated, the batch over every device.
    o["annotations"] = "data-parallel";
    auto dp = Build("transformer", o);
    QVERIFY(dp);
    QCOMPARE(sharding_of(*dp, "embedding_table"), HloSharding::Replicate());
    QCOMPARE(sharding_of(*dp, "softmax_weight"), HloSharding::Replicate());
    QCOMPARE(sharding_of(*dp, "softmax_logits"), Parse("{devices=[4,1,1]<=[4]}"));

    // Mixed precision: the one-hot and the logits dot in the activation type, the softmax and its
    // cross-entropy in f32, the logits' gradient back in the activation type.
    auto bf = Build("transformer", {{"act_dtype", "bf16"}, {"layers", "1"}, {"optimizer", "sgd"}, {"vocab", "100"}});
    QVERIFY(bf);
    QCOMPARE(ShapeOf(*bf, "embedding_table"), std::string("f32[100,64]"));
    QCOMPARE(ShapeOf(*bf, "embedding_one_hot"), std::string("bf16[8,16,100]"));
    QCOMPARE(ShapeOf(*bf, "softmax_logits"), std::string("bf16[8,16,100]"));
    QCOMPARE(ShapeOf(*bf, "softmax_logits_f32"), std::string("f32[8,16,100]"));
    QCOMPARE(ShapeOf(*bf, "backward_softmax_dlogits"), std::string("bf16[8,16,100]"));
    QCOMPARE(ShapeOf(*bf, "backward_embedding_dtable"), std::string("bf16[100,64]"));
    QCOMPARE(bf->entry()->root()->shape().tuple[0].ToString(false), std::string("f32[]"));
    QCOMPARE(bf->entry()->root()->shape().tuple[1].ToString(false), std::string("f32[100,64]"));  // E updated, f32

    // Forward only: embedding, layers and the f32 logits as the root; no labels.
    auto fwd = Build("transformer-layer", {{"vocab", "100"}, {"act_dtype", "bf16"}});
    QVERIFY(fwd);
    QCOMPARE(fwd->entry()->parameters().size(), size_t(1 + 1 + 6 + 1));
    QVERIFY(!fwd->FindInstruction("labels"));
    QCOMPARE(fwd->entry()->root()->shape().ToString(false), std::string("f32[8,16,100]"));

    auto bad = ZooBuild("transformer", {{"vocab", "-1"}});
    QVERIFY(!bad.ok());
    QCOMPARE(bad.error().message, std::string("transformer: vocab must be 0 (no vocabulary layers) or between 1 and 16777216, found -1"));
  }

  // The loss is the softmax cross-entropy of the logits against the labels, averaged over the B*S
  // tokens (recomputed here from the forward-only module's logits), and its gradients, E's and
  // W_s's included, match finite differences.
  void vocabularyLossAndGradients() {
    ZooOverrides o = kSmallTransformer;
    o["vocab"] = "11";
    o["layers"] = "2";
    o["optimizer"] = "none";
    auto train = Build("transformer", o);
    o["backward"] = "0";
    auto fwd = Build("transformer", o);
    QVERIFY(train && fwd);
    const std::vector<Tensor> args = RandomArgs(*train, 5, 11);
    std::vector<Tensor> fwd_args = args;
    fwd_args.erase(fwd_args.begin() + 1);  // no labels
    auto t = Evaluate(*train, args);
    auto f = Evaluate(*fwd, fwd_args);
    QVERIFY(t.ok() && f.ok());
    const Tensor& logits = *f;  // the root: the logits alone
    QCOMPARE(logits.shape().ToString(false), std::string("f64[2,4,11]"));
    const Tensor& labels = args[1];
    std::set<int64_t> seen;
    double expect = 0;
    for (int64_t tok = 0; tok < 2 * 4; ++tok) {
      double mx = -INFINITY, sum = 0;
      for (int64_t v = 0; v < 11; ++v) mx = std::max(mx, logits.GetDouble(tok * 11 + v));
      for (int64_t v = 0; v < 11; ++v) sum += std::exp(logits.GetDouble(tok * 11 + v) - mx);
      const int64_t label = static_cast<int64_t>(labels.GetDouble(tok));
      QVERIFY(label >= 0 && label < 11);
      seen.insert(label);
      expect += mx + std::log(sum) - logits.GetDouble(tok * 11 + label);
    }
    expect /= 2 * 4;
    QVERIFY(seen.size() > 3);  // the labels are spread over the vocabulary
    const double loss = t->element(0).GetDouble(0);
    qInfo("vocabulary 11: loss %.12g, by hand %.12g", loss, expect);
    QVERIFY(loss > 0);
    QVERIFY2(std::abs(loss - expect) < 1e-9 * std::max(1.0, std::abs(expect)), std::to_string(loss - expect).c_str());

    std::string where;
    const double worst = WorstGradientError(*train, 2, 3, &where, 1e-6, 11);
    qInfo("transformer with vocabulary (2 layers): worst relative gradient error %.3g", worst);
    QVERIFY2(worst < 1e-5, where.c_str());
  }

  // The partitioned language model on virtual devices equals the unpartitioned one (token ids
  // drawn within the vocabulary), and its vocabulary dims are reduced, never gathered: the
  // softmax's max and sum over V (split on Y) are all-reduces of [B/X, S] over Y, and no device
  // holds logits over the whole vocabulary.
  void vocabularyPartitions_data() {
    QTest::addColumn<QString>("set");
    QTest::addColumn<int>("mx");
    QTest::addColumn<int>("my");
    QTest::newRow("finalized 2x2") << "finalized" << 2 << 2;
    QTest::newRow("finalized 2x4") << "finalized" << 2 << 4;
    QTest::newRow("attempt2 2x2") << "attempt2" << 2 << 2;
    QTest::newRow("data-parallel 2x2") << "data-parallel" << 2 << 2;
  }
  void vocabularyPartitions() {
    QFETCH(QString, set);
    QFETCH(int, mx);
    QFETCH(int, my);
    const int64_t B = 4, S = 4, V = 32;
    const ZooOverrides o = {{"batch", "4"}, {"seq", "4"}, {"model", "8"}, {"heads", "4"}, {"head_dim", "2"},
                            {"hidden", "16"}, {"layers", "1"}, {"vocab", "32"}, {"optimizer", "sgd"},
                            {"learning_rate", "0.5"}, {"annotations", set.toStdString()},
                            {"mesh_x", std::to_string(mx)}, {"mesh_y", std::to_string(my)}};
    NumericVerifyOptions vo;
    vo.int_min = 0;
    vo.int_max = V - 1;
    vo.int_full_range_share = 0;
    std::string why;
    auto r = testing::PartitionZooModel("transformer", o, &why, nullptr, 17, vo);
    QVERIFY2(r, why.c_str());
    qInfo("%s: max |error| %.3g", qPrintable(set), r->max_abs_error);

    // The loss itself: the unpartitioned one against device 0's (replicated) loss.
    const Module& orig = *r->annotated;
    const int64_t n = mx * my;
    const std::vector<Tensor> args = MakeRandomArguments(*orig.entry(), 17, vo);
    auto ref = Evaluate(orig, args);
    QVERIFY(ref.ok());
    std::vector<std::vector<Tensor>> per_device(static_cast<size_t>(n));
    for (int64_t d = 0; d < n; ++d)
      for (size_t i = 0; i < args.size(); ++i) {
        const Instruction* p = orig.entry()->parameter(static_cast<int64_t>(i));
        auto shard = ShardForDevice(args[i], p->has_sharding() ? *p->sharding() : HloSharding::Replicate(), d);
        QVERIFY(shard.ok());
        per_device[static_cast<size_t>(d)].push_back(std::move(shard).value());
      }
    auto spmd = RunSpmd(*r->spmd.module, n, per_device);
    QVERIFY2(spmd.ok(), spmd.ok() ? "" : spmd.error().message.c_str());
    const double loss = ref->element(0).GetDouble(0);
    qInfo("%s %dx%d: loss %.9g unpartitioned, %.9g partitioned", qPrintable(set), mx, my, loss,
          (*spmd)[0].element(0).GetDouble(0));
    QVERIFY(loss > 0);
    for (int64_t d = 0; d < n; ++d)
      QVERIFY(std::abs((*spmd)[static_cast<size_t>(d)].element(0).GetDouble(0) - loss) < 1e-4 * std::max(1.0, loss));

    const std::string collectives = testing::DescribeCollectives(r->spmd);
    if (set == "data-parallel") {
      // Everything is whole per device but the batch: only reductions (the gradients, the loss).
      for (const auto& c : r->spmd.collectives)
        QVERIFY2(c.kind == Opcode::kAllReduce, collectives.c_str());
      return;
    }
    // Groups along Y of an X x Y mesh (device = x * Y + y).
    std::string along_y = "{";
    for (int x = 0; x < mx; ++x) {
      along_y += x ? ",{" : "{";
      for (int y = 0; y < my; ++y) along_y += (y ? "," : "") + std::to_string(x * my + y);
      along_y += "}";
    }
    along_y += "}";
    int softmax_reductions = 0;
    for (const auto& c : r->spmd.collectives) {
      if (c.origin != "loss_max" && c.origin != "loss_sum") continue;
      ++softmax_reductions;
      QCOMPARE(c.kind, Opcode::kAllReduce);
      QCOMPARE(c.bytes_per_device, int64_t(B / mx * S * 4));  // f32 [B/X, S]
      QCOMPARE(c.replica_groups, along_y);
    }
    QVERIFY2(softmax_reductions == 2, collectives.c_str());
    for (const auto& c : r->spmd.collectives)
      QVERIFY2(!(c.kind == Opcode::kAllGather && (c.origin.rfind("loss_", 0) == 0 || c.origin == "softmax_logits_f32")),
               collectives.c_str());
    // No instruction of the partitioned program spans the whole vocabulary of a batch shard.
    for (const auto& inst : r->spmd.module->entry()->instructions()) {
      const Shape& sh = inst->shape();
      QVERIFY2(!(sh.rank() == 3 && sh.dim(1) == S && sh.dim(2) == V), inst->name().c_str());
    }
  }

  void resnetGradientsAndLars() {
    const ZooOverrides small = {{"batch", "2"}, {"image", "16"}, {"channels", "2"}, {"classes", "5"}, {"width", "2"},
                                {"blocks", "1,2"}, {"dtype", "f64"}, {"annotations", "none"}};
    ZooOverrides o = small;
    o["optimizer"] = "none";
    auto grads_m = Build("resnet50", o);
    QVERIFY(grads_m);
    std::string where;
    const double worst = WorstGradientError(*grads_m, 2, 2, &where, 1e-4);
    qInfo("resnet (2 stages): worst relative gradient error %.3g", worst);
    QVERIFY2(worst < 1e-5, where.c_str());
    {
      // BatchNorm over groups of one example (bn_batch = 1): the backward pass through the grouped
      // statistics is right too.
      ZooOverrides grouped = o;
      grouped["bn_batch"] = "1";
      auto grouped_m = Build("resnet50", grouped);
      QVERIFY(grouped_m);
      const double worst_grouped = WorstGradientError(*grouped_m, 2, 2, &where, 1e-4);
      qInfo("resnet, per-example BatchNorm: worst relative gradient error %.3g", worst_grouped);
      QVERIFY2(worst_grouped < 1e-5, where.c_str());
    }

    // LARS: for a matrix, trust = eta |w| / (|g| + wd |w|), m' = mu m + lr trust (g + wd w),
    // w' = w - m'; for a vector plain momentum.
    o["optimizer"] = "lars";
    o["learning_rate"] = "0.5";
    auto lars_m = Build("resnet50", o);
    QVERIFY(lars_m);
    auto args = RandomArgs(*lars_m, 5);
    const int64_t n_w = (static_cast<int64_t>(args.size()) - 2) / 2;
    std::vector<Tensor> grad_args(args.begin(), args.begin() + 2 + n_w);
    auto g = Evaluate(*grads_m, grad_args);
    auto l = Evaluate(*lars_m, args);
    QVERIFY(g.ok() && l.ok());
    for (int64_t k = 0; k < n_w; ++k) {
      const Tensor& w = args[static_cast<size_t>(2 + k)];
      const Tensor& m0 = args[static_cast<size_t>(2 + n_w + k)];
      const Tensor& gr = g->element(1 + k);
      double wn = 0, gn = 0;
      for (int64_t i = 0; i < w.size(); ++i) {
        wn += w.GetDouble(i) * w.GetDouble(i);
        gn += gr.GetDouble(i) * gr.GetDouble(i);
      }
      wn = std::sqrt(wn);
      gn = std::sqrt(gn);
      const bool matrix = w.shape().rank() > 1;
      const double trust = matrix ? 0.001 * wn / (gn + 1e-4 * wn) : 1.0;
      for (int64_t i = 0; i < w.size(); ++i) {
        const double step = matrix ? trust * (gr.GetDouble(i) + 1e-4 * w.GetDouble(i)) : gr.GetDouble(i);
        const double m1 = 0.9 * m0.GetDouble(i) + 0.5 * step;
        QVERIFY(std::abs(l->element(1 + n_w + k).GetDouble(i) - m1) < 1e-12);
        QVERIFY(std::abs(l->element(1 + k).GetDouble(i) - (w.GetDouble(i) - m1)) < 1e-12);
      }
    }
  }
};

QTEST_GUILESS_MAIN(TestModelZoo)
#include "test_model_zoo.moc"
