// Verification at real sizes on a small twin (app/pipeline/small_twin.h; the whole-model issue's
// "real sizes in the GUI"): a paper configuration too large for the evaluator is verified on the
// same zoo model with its sizes shrunk as far as its sharding allows, sharded as the full one is.
#include <QElapsedTimer>
#include <QtTest>

#include <string>

#include "app/pipeline/propagate.h"
#include "app/pipeline/reproduce.h"
#include "app/pipeline/small_twin.h"
#include "core/zoo/zoo.h"

using namespace shardscope;
using namespace shardscope::pipeline;

namespace {

// A paper column's module at its sizes, propagated as the GUI and the CLI propagate it.
std::unique_ptr<Module> FullModule(const ReproduceColumn& c) {
  auto m = ZooBuild(c.model, c.settings);
  if (!m.ok()) qFatal("%s", m.error().message.c_str());
  auto p = Propagate(**m, StandardPropagationOptions());
  if (!p.ok()) qFatal("%s", p.error().message.c_str());
  return std::move(m).value();
}

const ReproduceColumn& Column(const std::string& case_name, const std::string& label) {
  auto c = FindReproduceCase(case_name);
  if (!c.ok()) qFatal("%s", c.error().message.c_str());
  for (const ReproduceColumn& col : c.value()->columns)
    if (col.label == label) return col;
  qFatal("no column %s", label.c_str());
}

}  // namespace

class TestSmallTwin : public QObject {
  Q_OBJECT
 private slots:
  // GSPMD Table 2's 64B Transformer on 128 cores (validation.md G4): far above the evaluator's
  // limits, so the full module is not verified; its twin is (the same names, the same 2D finalized
  // shardings on X=8,Y=16, every size as small as they allow), and its partitioned program matches.
  void gspmdTable2Column() {
    const ReproduceColumn& col = Column("gspmd-table2", "64B, 128 devices");
    auto full = FullModule(col);
    QCOMPARE(full->num_partitions, int64_t{128});
    auto twin = BuildSmallTwin(col.model, col.settings, *full);
    QVERIFY2(twin.ok(), twin.ok() ? "" : twin.error().message.c_str());
    qInfo("twin: %s; %lld instructions, %lld shardings copied", twin->changes.c_str(),
          static_cast<long long>(twin->module->instruction_count()), static_cast<long long>(twin->shardings_copied));
    // The sizes shrink to what the mesh splits them into: the batch over X (8), the model, hidden
    // and head dimensions over Y (16), the vocabulary over Y; the unsplit sequence and head size to
    // 2; 32 layers to 2.
    QVERIFY2(twin->changes.find("batch 64 -> 8") != std::string::npos, twin->changes.c_str());
    QVERIFY2(twin->changes.find("model 8192 -> 16") != std::string::npos, twin->changes.c_str());
    QVERIFY2(twin->changes.find("hidden 65536 -> 16") != std::string::npos, twin->changes.c_str());
    QVERIFY2(twin->changes.find("layers 32 -> 2") != std::string::npos, twin->changes.c_str());
    QVERIFY2(twin->changes.find("seq 1024 -> 8") != std::string::npos, twin->changes.c_str());
    // Sharded as the full module: a weight and an activation of layer 0, by name.
    for (const char* name : {"layer0_wqkv", "layer0_wi", "layer0_ffn_hidden"}) {
      Instruction* a = full->FindInstruction(name);
      Instruction* b = twin->module->FindInstruction(name);
      if (!a || !b) continue;
      QVERIFY2(a->has_sharding() && b->has_sharding(), name);
      QVERIFY2(*a->sharding() == *b->sharding(), (std::string(name) + ": " + a->sharding()->ToString() + " vs " +
                                                   b->sharding()->ToString()).c_str());
    }
    QVERIFY(twin->shardings_copied > 100);

    auto v = VerifySmallTwin(col.model, col.settings, *full, 128);
    QVERIFY2(v.ok(), v.ok() ? "" : v.error().message.c_str());
    QVERIFY2(v->verdict.state == VerificationVerdict::State::kMatch,
             (v->verdict.reason + v->verdict.report.detail).c_str());
    qInfo("twin verified (%s; %lld instructions) in %.0f ms, max |error| %g", v->changes.c_str(),
          static_cast<long long>(v->instructions), v->verdict.millis, v->verdict.report.max_abs_error);
  }

  // The other tables' configurations, one or two each (the whole sweep, every zoo column of GSPMD
  // Tables 2-8, is in docs/partitioner.md): pipelined (Tables 4-5, GPipe and circular), MoE (6, 7)
  // and the 3-D U-Net (8) take the same mechanism, no rule of their own. Table 4's (8,8,4) twin
  // differs in a few isolated elements on seed 1 (a LayerNorm scale's gradient of a tiny variance):
  // the check finds them ill-conditioned (its own program moves them when its sums are rounded in
  // another order), leaves them out and says so; everything else matches.
  void paperConfigurations() {
    const std::pair<const char*, const char*> columns[] = {
        {"gspmd-table2", "64B, 512 devices"},          {"gspmd-table3", "(16,8) 128 devices"},
        {"gspmd-table4", "(8,8,4) 32x32"},             {"gspmd-table5", "12.95B (16,1,2) circular 32x1"},
        {"gspmd-table6", "32 experts/devices"},        {"gspmd-table7", "(8,4) 8 experts"},
        {"gspmd-table8", "(1,2) image 128"}};
    for (const auto& [case_name, label] : columns) {
      QElapsedTimer t;
      t.start();
      auto v = VerifyColumnOnSmallTwin(Column(case_name, label));
      const std::string what = std::string(case_name) + " " + label;
      QVERIFY2(v.ok(), (what + ": " + (v.ok() ? "" : v.error().message)).c_str());
      qInfo("%s: %s (%s; %lld instructions) %lld ms", what.c_str(),
            v->verdict.state == VerificationVerdict::State::kMatch ? "match" : (v->verdict.reason + v->verdict.report.detail).c_str(),
            v->changes.c_str(), static_cast<long long>(v->instructions), static_cast<long long>(t.elapsed()));
      QVERIFY2(v->verdict.state == VerificationVerdict::State::kMatch, what.c_str());
      QVERIFY(!v->changes.empty());
      if (std::string(case_name) == "gspmd-table4") {
        const VerifyReport& r = v->verdict.report;
        QVERIFY2(r.ill_conditioned > 0 && r.ill_conditioned * 1000 < r.float_elements && !r.inconclusive,
                 r.detail.substr(0, 300).c_str());
        QVERIFY2(r.detail.find("not judged: ill-conditioned") != std::string::npos, r.detail.substr(0, 300).c_str());
      }
    }
  }

  // The other way (app/pipeline/simulated_sizes.h): a small document simulated at more layers and
  // a larger batch. Its layers keep the document's shardings by name, a hand-edited one included;
  // the layers it does not have keep the zoo's own annotations (2D finalized: the feed-forward
  // weight split on both mesh axes), not whatever propagation would make of them.
  void moreLayersKeepTheZoosAnnotations() {
    auto doc = ZooBuild("transformer", {{"layers", "2"}, {"backward", "1"}, {"optimizer", "adam"}});
    QVERIFY(doc.ok());
    Instruction* wi = (*doc)->FindInstruction("layer0_wi");
    QVERIFY(wi && wi->shape().rank() == 2);
    const std::string zoo_wi = wi->sharding()->ToString();
    QVERIFY(Propagate(**doc, StandardPropagationOptions()).ok());
    // The user's edit, over what propagation gave (as the document's annotations lie over it).
    auto edited = HloSharding::Replicate();
    wi->set_sharding(edited);
    auto big = BuildShardedAs("transformer", {{"layers", "6"}, {"batch", "32"}, {"backward", "1"}, {"optimizer", "adam"}}, **doc);
    QVERIFY2(big.ok(), big.ok() ? "" : big.error().message.c_str());
    QCOMPARE(big->module->FindInstruction("layer0_wi")->sharding()->ToString(), edited.ToString());
    QCOMPARE(big->module->FindInstruction("layer1_wi")->sharding()->ToString(),
             (*doc)->FindInstruction("layer1_wi")->sharding()->ToString());
    const Instruction* deep = big->module->FindInstruction("layer5_wi");
    QVERIFY(deep && deep->has_sharding());
    QCOMPARE(deep->sharding()->ToString(), zoo_wi);
    // Its Adam moments, unannotated in the zoo, are sharded as the document's layers' are (as the
    // document was propagated), not left replicated on every device.
    const Instruction* moment = big->module->FindInstruction("layer5_wi_m");
    QVERIFY(moment && moment->has_sharding());
    QCOMPARE(moment->sharding()->ToString(), (*doc)->FindInstruction("layer1_wi_m")->sharding()->ToString());
    QVERIFY(!moment->sharding()->IsReplicated());
    QCOMPARE(big->module->FindInstruction("x")->shape().dim(0), int64_t{32});
  }

  // A module the zoo did not build (a file, a real dump) has no settings to shrink: its dimensions
  // are (VerifyShrunkTwin, ScaleDimsOptions::shrink). A Transformer step at batch 64, sequence 256,
  // width 512 on 16 devices is beyond the interactive check's limits; its shrunk twin (each class
  // of dimensions at its smallest divisor of at least 8 that keeps the shardings even) verifies,
  // and the changes name the entry parameters' shapes.
  void anyModulesShrunkTwin() {
    auto m = ZooBuild("transformer", {{"layers", "2"}, {"batch", "64"}, {"seq", "256"}, {"model", "512"},
                                      {"hidden", "2048"}, {"heads", "8"}, {"head_dim", "64"}});
    QVERIFY(m.ok());
    auto p = pipeline::Propagate(**m, pipeline::StandardPropagationOptions());
    QVERIFY2(p.ok(), p.ok() ? "" : p.error().message.c_str());
    auto part = pipeline::Partition(**m);
    QVERIFY(part.ok());
    const VerificationVerdict full = pipeline::Verify(**m, *part->module, 16, pipeline::VerifyOptions{});
    QCOMPARE(full.state, VerificationVerdict::State::kSkipped);
    QVERIFY2(full.reason.rfind("too large", 0) == 0, full.reason.c_str());
    auto v = VerifyShrunkTwin(**m, 16);
    QVERIFY2(v.ok(), v.ok() ? "" : v.error().message.c_str());
    QVERIFY2(v->verdict.state == VerificationVerdict::State::kMatch, (v->verdict.reason + v->verdict.report.detail.substr(0, 300)).c_str());
    QVERIFY2(v->changes.rfind("dimensions shrunk: x f32[64,256,512] -> f32[8,8,8]", 0) == 0, v->changes.c_str());
    QCOMPARE(v->instructions, (*m)->instruction_count());
  }

  void errors() {
    auto full = ZooBuild("mlp");
    QVERIFY(full.ok());
    QVERIFY(!BuildSmallTwin("no-such-model", {}, **full).ok());
    QVERIFY(!BuildSmallTwin("mlp", {{"no_such_setting", "3"}}, **full).ok());
  }
};

QTEST_GUILESS_MAIN(TestSmallTwin)
#include "test_small_twin.moc"
