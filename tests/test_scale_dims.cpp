// A module's dimensions scaled by k (core/ir/scale_dims.h; the whole-model issue's "scale this
// module's dims by k"): the same program at k times its sizes, shardings kept, for simulating at
// real size what was annotated and verified small.
#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <string>

#include "app/pipeline/partition.h"
#include "app/pipeline/propagate.h"
#include "core/ir/hlo_text.h"
#include "core/ir/scale_dims.h"
#include "core/zoo/zoo.h"
#include "built_paths.h"
#include "cli_test_support.h"
#include "simulator/schedule.h"

using namespace shardscope;
using shardscope::sim::CountModuleFlops;

namespace {

std::unique_ptr<Module> Parse(const std::string& text) {
  auto m = ParseHloModule(text, "test.hlo");
  if (!m.ok()) qFatal("%s", m.error().message.c_str());
  return std::move(m).value();
}

std::string ShapeOf(const Module& m, const std::string& name) {
  const Instruction* i = m.FindInstruction(name);
  return i ? i->shape().ToString(false) : "(no " + name + ")";
}

std::unique_ptr<Module> Zoo(const std::string& model, ZooOverrides settings = {}) {
  auto m = ZooBuild(model, settings);
  if (!m.ok()) qFatal("%s", m.error().message.c_str());
  return std::move(m).value();
}

}  // namespace

class TestScaleDims : public QObject {
  Q_OBJECT
 private slots:
  // Every rule once: a parameter's dimensions scale, a broadcast's new ones follow the add they
  // meet, a reshape merges (its dimension grows 16x) and splits back (as the parameter the result
  // is added to says), a dot contracts the scaled width, a slice scales its bounds, a constant's
  // dimension keeps its size. Shardings stay on.
  void rulesOnAHandWrittenModule() {
    auto m = Parse(R"(HloModule m, num_partitions=4
ENTRY e {
  x = f32[8,16,32] parameter(0), sharding={devices=[4,1,1]<=[4]}
  w = f32[32,64] parameter(1), sharding={replicated}
  pair = f32[2] parameter(2)
  table = f32[3] constant({1, 2, 3})
  c = f32[] constant(1)
  b = f32[8,16,32] broadcast(c), dimensions={}
  sum = f32[8,16,32] add(x, b)
  flat = f32[128,32] reshape(sum)
  y = f32[128,64] dot(flat, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  back = f32[8,16,64] reshape(y)
  z = f32[8,16,64] parameter(3)
  tied = f32[8,16,64] add(back, z)
  half = f32[8,8,64] slice(tied), slice={[0:8], [4:12], [0:64]}
  t3 = f32[3] multiply(table, table)
  ROOT out = (f32[8,8,64], f32[2], f32[3]) tuple(half, pair, t3)
})");
    auto s = ScaleModuleDims(*m, 4);
    QVERIFY2(s.ok(), s.ok() ? "" : s.error().message.c_str());
    const Module& r = *s->module;
    QCOMPARE(ShapeOf(r, "x"), std::string("f32[32,64,128]"));
    QCOMPARE(ShapeOf(r, "b"), std::string("f32[32,64,128]"));
    QCOMPARE(ShapeOf(r, "flat"), std::string("f32[2048,128]"));   // 8 x 16 merged: grew 16x
    QCOMPARE(ShapeOf(r, "y"), std::string("f32[2048,256]"));
    QCOMPARE(ShapeOf(r, "back"), std::string("f32[32,64,256]"));  // split back as z, which it meets, says
    QCOMPARE(ShapeOf(r, "half"), std::string("f32[32,32,256]"));  // [4:12] -> [16:48]
    QCOMPARE(r.FindInstruction("half")->slice.starts[1], int64_t{16});
    QCOMPARE(ShapeOf(r, "pair"), std::string("f32[8]"));   // 2 >= min_dim 2: scaled
    QCOMPARE(ShapeOf(r, "table"), std::string("f32[3]"));  // a constant's data
    QVERIFY(r.FindInstruction("x")->has_sharding());
    QCOMPARE(r.FindInstruction("x")->sharding()->ToString(), m->FindInstruction("x")->sharding()->ToString());
    QCOMPARE(s->scaled_parameter_dims, int64_t{9});
    QCOMPARE(s->kept_parameter_dims, int64_t{0});
    // min_dim 3 keeps the pair.
    ScaleDimsOptions o;
    o.min_dim = 3;
    auto kept = ScaleModuleDims(*m, 4, o);
    QVERIFY(kept.ok());
    QCOMPARE(ShapeOf(*kept->module, "pair"), std::string("f32[2]"));
    QCOMPARE(kept->kept_parameter_dims, int64_t{1});
  }

  // A parameter dimension that meets a constant's keeps its size; one a convolution kernel's
  // window fixes too (ResNet-50's 3x3 and 7x7 kernels stay, its images and channels grow).
  void constantsAndWindowsKeepTheirSize() {
    auto m = Parse(R"(HloModule m
ENTRY e {
  x = f32[4,3] parameter(0)
  bias = f32[3] constant({1, 2, 3})
  bb = f32[4,3] broadcast(bias), dimensions={1}
  ROOT y = f32[4,3] add(x, bb)
})");
    auto s = ScaleModuleDims(*m, 2);
    QVERIFY2(s.ok(), s.ok() ? "" : s.error().message.c_str());
    QCOMPARE(ShapeOf(*s->module, "y"), std::string("f32[8,3]"));
    QCOMPARE(s->kept_parameter_dims, int64_t{1});

    auto resnet = Zoo("resnet50");
    auto r = ScaleModuleDims(*resnet, 2);
    QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
    int64_t convs = 0;
    for (const auto& c : r->module->computations())
      for (const auto& i : c->instructions()) {
        if (i->opcode() != Opcode::kConvolution) continue;
        const Instruction* kernel = i->operand(1);
        if (kernel->opcode() == Opcode::kReverse) kernel = kernel->operand(0);  // the data gradient's flipped weight
        if (kernel->opcode() != Opcode::kParameter) {
          // A weight-gradient convolution's kernel is an activation gradient: its extent grows.
          const Instruction* before = resnet->FindInstruction(kernel->name());
          QVERIFY(before);
          for (int64_t d : i->conv_dims.kernel_spatial)
            QCOMPARE(kernel->shape().dim(d), before->shape().dim(d) >= 2 ? 2 * before->shape().dim(d) : int64_t{1});
          continue;
        }
        ++convs;
        const Instruction* before = resnet->FindInstruction(kernel->name());
        QVERIFY(before);
        for (int64_t d : i->conv_dims.kernel_spatial) QCOMPARE(kernel->shape().dim(d), before->shape().dim(d));
        QCOMPARE(kernel->shape().dim(i->conv_dims.kernel_output_feature),
                 2 * before->shape().dim(i->conv_dims.kernel_output_feature));
      }
    QVERIFY(convs > 50);
  }

  // Scaled, the module is still the same computation: GSPMD Table 1's finalized MLP scaled by 2 is
  // partitioned over its 16 devices and its SPMD program matches the scaled module numerically;
  // its FLOPs grow 8x (batch, width and hidden size each doubled).
  void scaledModulePartitionsAndVerifies() {
    auto mlp = Zoo("mlp");
    auto s = ScaleModuleDims(*mlp, 2);
    QVERIFY2(s.ok(), s.ok() ? "" : s.error().message.c_str());
    QCOMPARE(s->kept_parameter_dims, int64_t{0});
    const double before = CountModuleFlops(*mlp), after = CountModuleFlops(*s->module);
    QVERIFY2(after > 7.5 * before && after < 8.5 * before, qPrintable(QString("%1 -> %2").arg(before).arg(after)));
    auto p = pipeline::Propagate(*s->module, pipeline::StandardPropagationOptions());
    QVERIFY2(p.ok(), p.ok() ? "" : p.error().message.c_str());
    auto part = pipeline::Partition(*s->module);
    QVERIFY2(part.ok(), part.ok() ? "" : part.error().message.c_str());
    const auto v = pipeline::Verify(*s->module, *part->module, 16);
    QCOMPARE(v.state, VerificationVerdict::State::kMatch);
  }

  // The other way (ScaleDimsOptions::shrink): a Transformer step at 64 x 256 tokens, width 512 and
  // hidden 2048, propagated on its 4x4 mesh, shrinks each class of dimensions to the smallest
  // divisor that keeps every tiled sharding even and is at least min_dim: the batch split 4 ways to
  // 8 (min_dim 8) and to 4 (min_dim 2: the tiles), the width split 4 ways to 8 and 4; the shardings
  // stay on every instruction, the instruction count stays, and the shrunk module partitions and
  // verifies. Shrinking takes no scale and no factors.
  void shrinkKeepsTheShardingsEven() {
    auto m = Zoo("transformer", {{"layers", "2"}, {"batch", "64"}, {"seq", "256"}, {"model", "512"},
                                 {"hidden", "2048"}, {"heads", "8"}, {"head_dim", "64"}});
    auto p = pipeline::Propagate(*m, pipeline::StandardPropagationOptions());
    QVERIFY2(p.ok(), p.ok() ? "" : p.error().message.c_str());
    QCOMPARE(ShapeOf(*m, "x"), std::string("f32[64,256,512]"));
    const std::string x_sharding = m->FindInstruction("x")->sharding()->ToString();
    for (int64_t min_dim : {8, 2}) {
      ScaleDimsOptions o;
      o.shrink = true;
      o.min_dim = min_dim;
      auto s = ScaleModuleDims(*m, 1, o);
      QVERIFY2(s.ok(), s.ok() ? "" : s.error().message.c_str());
      QCOMPARE(s->module->instruction_count(), m->instruction_count());
      const Instruction* x = s->module->FindInstruction("x");
      QVERIFY(x && x->has_sharding());
      QCOMPARE(x->sharding()->ToString(), x_sharding);  // [I_X, J, K_Y]: batch and width split 4 ways
      const int64_t b = x->shape().dim(0), w = x->shape().dim(2);
      QCOMPARE(b, min_dim == 8 ? int64_t{8} : int64_t{4});
      QCOMPARE(w, min_dim == 8 ? int64_t{8} : int64_t{4});
      QCOMPARE(x->shape().dim(1), min_dim == 8 ? int64_t{8} : int64_t{2});  // the sequence, not split
      // Every tiled sharding still splits its dimensions evenly.
      for (const auto& c : s->module->computations())
        for (const auto& i : c->instructions()) {
          if (!i->has_sharding() || !i->shape().IsArray() || !i->sharding()->IsTiled()) continue;
          for (int64_t d = 0; d < i->shape().rank(); ++d)
            QVERIFY2(i->shape().dim(d) % i->sharding()->DimensionTiles(d) == 0, i->name().c_str());
        }
      auto part = pipeline::Partition(*s->module);
      QVERIFY2(part.ok(), part.ok() ? "" : part.error().message.c_str());
      const auto v = pipeline::Verify(*s->module, *part->module, 16, pipeline::VerifyOptions::Unlimited(1));
      QVERIFY2(v.state == VerificationVerdict::State::kMatch, (v.reason + v.report.detail.substr(0, 300)).c_str());
    }
    ScaleDimsOptions both;
    both.shrink = true;
    QVERIFY(!ScaleModuleDims(*m, 2, both).ok());
    both.factors = {{"x:0", 2}};
    QVERIFY(!ScaleModuleDims(*m, 1, both).ok());
  }

  // The pipelined Transformer's structure stays: its stages (the shifting buffer of 4, a slice of 3
  // of them and one more concatenated) and its layers per stage keep their counts, since scaling
  // them would make the buffer's shift disagree with itself; the widths and the batch grow.
  void pipelinedTransformerKeepsItsStages() {
    auto m = Zoo("pipelined-transformer", {{"backward", "1"}});
    auto s = ScaleModuleDims(*m, 2);
    QVERIFY2(s.ok(), s.ok() ? "" : s.error().message.c_str());
    QVERIFY(s->kept_parameter_dims > 0);
    QVERIFY(s->scaled_parameter_dims > 0);
    const Instruction* before = m->FindInstruction("forward_body/state.1");
    const Instruction* after = s->module->FindInstruction("forward_body/state.1");
    QVERIFY(before && after);
    QCOMPARE(after->shape().dim(0), before->shape().dim(0));          // stages
    QCOMPARE(after->shape().dim(1), 2 * before->shape().dim(1));      // microbatch size
    QCOMPARE(after->shape().dim(3), 2 * before->shape().dim(3));      // model width
    QVERIFY(CountModuleFlops(*s->module) > 4 * CountModuleFlops(*m));
  }

  // The fused q/k/v dimension (3) of a Transformer layer's weight is rebuilt by a concatenate in
  // the backward pass, so it keeps its size, in every layer: one attempt finds all eight conflicts
  // and the second succeeds (one attempt per layer made a 64-layer step take 13 s to scale).
  void everyConflictFoundInOneAttempt() {
    auto m = Zoo("transformer", {{"layers", "8"}, {"backward", "1"}, {"optimizer", "adam"}});
    auto s = ScaleModuleDims(*m, 2);
    QVERIFY2(s.ok(), s.ok() ? "" : s.error().message.c_str());
    QCOMPARE(s->attempts, 2);
    QCOMPARE(s->kept_because.size(), size_t{8});
    for (const std::string& why : s->kept_because) QVERIFY2(why.find("attention_dqkv") != std::string::npos, why.c_str());
    QCOMPARE(ShapeOf(*s->module, "layer7_wqkv"), std::string("f32[3,128,16,32]"));
  }

  // An embedding lookup (gather) keeps its index vector and grows its table, ids and rows; a
  // depthwise convolution keeps one input feature per group and takes twice the groups; a
  // custom-call that only marks its operand (same shape in and out) scales with it.
  void gatherDepthwiseAndMarkers() {
    auto m = Parse(R"(HloModule m
ENTRY e {
  table = f32[32,16] parameter(0)
  ids = s32[8,4,1] parameter(1)
  rows = f32[8,4,16] gather(table, ids), offset_dims={2}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=2, slice_sizes={1,16}
  x = f32[4,16,16,8] parameter(2)
  k = f32[3,3,1,8] parameter(3)
  y = f32[4,16,16,8] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=8
  marked = f32[4,16,16,8] custom-call(y), custom_call_target="ShardBarrierFrom"
  ROOT out = (f32[8,4,16], f32[4,16,16,8]) tuple(rows, marked)
})");
    auto s = ScaleModuleDims(*m, 2);
    QVERIFY2(s.ok(), s.ok() ? "" : s.error().message.c_str());
    const Module& r = *s->module;
    QCOMPARE(ShapeOf(r, "table"), std::string("f32[64,32]"));
    QCOMPARE(ShapeOf(r, "ids"), std::string("s32[16,8,1]"));
    QCOMPARE(ShapeOf(r, "rows"), std::string("f32[16,8,32]"));
    QCOMPARE(r.FindInstruction("rows")->gather_slice_sizes, (std::vector<int64_t>{1, 32}));
    QCOMPARE(ShapeOf(r, "k"), std::string("f32[3,3,1,16]"));
    QCOMPARE(r.FindInstruction("y")->feature_group_count, int64_t{16});
    QCOMPARE(ShapeOf(r, "marked"), std::string("f32[8,32,32,16]"));
  }

  // XLA's own test modules (../shared/conformance): what scales, scales (the verifier checks each);
  // the rest is refused with a message naming the instruction — no crash.
  void conformanceModules() {
    const QString root = QString(SHARDSCOPE_SHARED_DIR) + "/conformance";
    if (!QDir(root).exists()) QSKIP("../shared/conformance is absent");
    int parsed = 0, scaled = 0, spmd_cases = 0, shrunk_ok = 0, shrunk_changed = 0, shrunk_partitioned = 0,
        original_partitioned = 0;
    QDirIterator it(root, {"*.hlo"}, QDir::Files, QDirIterator::Subdirectories);
    while (it.hasNext()) {
      const QString path = it.next();
      QFile f(path);
      QVERIFY(f.open(QIODevice::ReadOnly));
      auto m = ParseHloModule(f.readAll().toStdString(), path.toStdString());
      if (!m.ok()) continue;
      ++parsed;
      if (path.contains("/spmd/")) {
        // Shrunk (the small twin of any module), with the shardings the case gives: the result
        // is checked by the verifier inside, and it partitions like the original.
        ++spmd_cases;
        ScaleDimsOptions o;
        o.shrink = true;
        auto shrunk = ScaleModuleDims(**m, 1, o);
        if (shrunk.ok()) {
          ++shrunk_ok;
          shrunk_changed += PrintHloModule(*shrunk->module) != PrintHloModule(**m) ? 1 : 0;
          const bool original_partitions = pipeline::Partition(**m).ok();
          if (original_partitions && pipeline::Partition(*shrunk->module).ok()) ++shrunk_partitioned;
          if (original_partitions) ++original_partitioned;
        }
      }
      auto s = ScaleModuleDims(**m, 2);
      if (s.ok()) {
        ++scaled;
        continue;
      }
      QVERIFY2(s.error().message.find('%') != std::string::npos || s.error().message.find("scaling") != std::string::npos,
               s.error().message.c_str());
    }
    qInfo("%d of %d conformance modules scale by 2", scaled, parsed);
    qInfo("%d of %d SPMD cases shrink with their shardings (%d change), %d of the %d that partition still partition",
          shrunk_ok, spmd_cases, shrunk_changed, shrunk_partitioned, original_partitioned);
    // 356 of 413 shrink (288 change; the rest are as small as their shardings allow), and every one
    // that partitions still does (2026-12-03).
    QVERIFY2(shrunk_ok * 10 >= spmd_cases * 8, qPrintable(QString("%1 of %2").arg(shrunk_ok).arg(spmd_cases)));
    QCOMPARE(shrunk_partitioned, original_partitioned);
    // 555 of 618 on 2026-12-03; the rest hold collectives, infeeds, opaque custom-calls (TopK,
    // block-scaled dots), batch-grouped convolutions.
    QVERIFY2(scaled * 10 >= parsed * 8, qPrintable(QString("%1 of %2").arg(scaled).arg(parsed)));
  }

  // One dimension alone (the batch ×4, every other size kept): the factor goes to the dimension's
  // whole class — the labels' batch follows the inputs'. The classes are listed for the user by
  // parameter and dimension; members of one class cannot take different factors.
  void singleDimensionFactors() {
    auto m = Parse(R"(HloModule m
ENTRY e {
  x = f32[8,16,32] parameter(0)
  w = f32[32,32] parameter(1)
  labels = f32[8,16,32] parameter(2)
  y = f32[8,16,32] dot(x, w), lhs_contracting_dims={2}, rhs_contracting_dims={0}
  ROOT d = f32[8,16,32] subtract(y, labels)
})");
    auto classes = EntryParameterDimensionClasses(*m);
    QVERIFY2(classes.ok(), classes.ok() ? "" : classes.error().message.c_str());
    // Batch, sequence, the contracted width (x's and w's rows), the output width (w's columns, the labels').
    QCOMPARE(classes->size(), size_t{4});
    QCOMPARE((*classes)[0].size, int64_t{8});
    QCOMPARE((*classes)[0].dims, (std::vector<std::string>{"x:0", "labels:0"}));
    QCOMPARE((*classes)[2].dims, (std::vector<std::string>{"x:2", "w:0"}));
    QCOMPARE((*classes)[3].dims, (std::vector<std::string>{"w:1", "labels:2"}));
    ScaleDimsOptions o;
    o.factors["labels:0"] = 4;
    auto s = ScaleModuleDims(*m, 1, o);
    QVERIFY2(s.ok(), s.ok() ? "" : s.error().message.c_str());
    QCOMPARE(ShapeOf(*s->module, "x"), std::string("f32[32,16,32]"));
    QCOMPARE(ShapeOf(*s->module, "w"), std::string("f32[32,32]"));
    QCOMPARE(ShapeOf(*s->module, "d"), std::string("f32[32,16,32]"));
    QCOMPARE(s->scaled_parameter_dims, int64_t{2});
    // With k: the given factor for its class, k for the others.
    auto both = ScaleModuleDims(*m, 2, o);
    QVERIFY(both.ok());
    QCOMPARE(ShapeOf(*both->module, "x"), std::string("f32[32,32,64]"));
    o.factors["x:0"] = 2;
    auto clash = ScaleModuleDims(*m, 1, o);
    QVERIFY(!clash.ok());
    QVERIFY2(clash.error().message.find("same dimension") != std::string::npos, clash.error().message.c_str());
    ScaleDimsOptions unknown;
    unknown.factors["z:0"] = 2;
    QVERIFY(!ScaleModuleDims(*m, 1, unknown).ok());
    unknown.factors = {{"x:3", 2}};
    QVERIFY2(ScaleModuleDims(*m, 1, unknown).error().message.find("no dimension 3") != std::string::npos,
             ScaleModuleDims(*m, 1, unknown).error().message.c_str());
  }

  // The CLI: `simulate --scale-dims K` and `--scale-dim PARAM:DIM=F`, with their errors.
  void simulateCli() {
    QTemporaryDir dir;
    const QString file = dir.filePath("sd.hlo");
    {
      QFile f(file);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write("HloModule m, num_partitions=4\nENTRY e {\n  x = f32[256,512] parameter(0), sharding={devices=[4,1]<=[4]}\n"
              "  w = f32[512,1024] parameter(1), sharding={replicated}\n"
              "  ROOT y = f32[256,1024] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n");
    }
    auto flops = [&](const QStringList& extra) {
      const auto r = shardscope::testing::RunCli(QStringList{"simulate", file, "--chip", "tpu-v4", "--mesh", "X=4", "--json"} + extra);
      if (r.code != 0) return -1.0;
      const QString json = r.out.section('\n', 0, 0);
      const int at = json.indexOf("\"total_flops\":");
      return json.mid(at + 14).section(',', 0, 0).toDouble();
    };
    const double base = flops({});
    QVERIFY(base > 0);
    QCOMPARE(flops({"--scale-dim", "x:0=8"}), 8 * base);
    QCOMPARE(flops({"--scale-dims", "2", "--scale-dim", "x:0=8"}), 32 * base);  // 8 x 2 x 2
    const auto bad = shardscope::testing::RunCli({"simulate", file, "--chip", "tpu-v4", "--mesh", "X=4", "--scale-dim", "x:9=2"});
    QCOMPARE(bad.code, 2);
    QVERIFY2(bad.err.contains("has no dimension 9"), qPrintable(bad.err));
    const auto usage = shardscope::testing::RunCli({"simulate", file, "--chip", "tpu-v4", "--mesh", "X=4", "--scale-dim", "x:0"});
    QVERIFY(usage.code != 0);
    QVERIFY2(usage.err.contains("PARAMETER:DIM=FACTOR"), qPrintable(usage.err));
  }

  // What cannot be scaled says where: a collective (the module is already partitioned), a custom
  // call whose result is its own (not its one operand's shape, which scales with it), a scale below 1.
  void errorsNameTheInstruction() {
    auto m = Parse(R"(HloModule m, num_partitions=2
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[8] parameter(0)
  ROOT r = f32[8] all-reduce(x), replica_groups={{0,1}}, to_apply=sum
})");
    auto s = ScaleModuleDims(*m, 2);
    QVERIFY(!s.ok());
    QVERIFY2(s.error().message.find("%r") != std::string::npos, s.error().message.c_str());
    QVERIFY2(s.error().message.find("all-reduce") != std::string::npos, s.error().message.c_str());
    auto c = Parse(R"(HloModule m
ENTRY e {
  x = f32[8] parameter(0)
  ROOT r = f32[4] custom-call(x), custom_call_target="my_kernel"
})");
    auto cs = ScaleModuleDims(*c, 2);
    QVERIFY(!cs.ok());
    QVERIFY2(cs.error().message.find("my_kernel") != std::string::npos, cs.error().message.c_str());
    QVERIFY(!ScaleModuleDims(*c, 0).ok());
    auto one = ScaleModuleDims(*c->Clone(), 1);
    QVERIFY(!one.ok());  // the custom call is refused whatever the scale
  }
};

QTEST_GUILESS_MAIN(TestScaleDims)
#include "test_scale_dims.moc"
