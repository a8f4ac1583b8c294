// Verification at real sizes on a small twin (app/pipeline/small_twin.h; the whole-model issue's
// "real sizes in the GUI"): a paper configuration too large for the evaluator is verified on the
// same zoo model with its sizes shrunk as far as its sharding allows, sharded as the full one is.
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

const ReproduceColumn& Column(const char* case_name, const char* label) {
  auto c = FindReproduceCase(case_name);
  if (!c.ok()) qFatal("%s", c.error().message.c_str());
  for (const ReproduceColumn& col : c.value()->columns)
    if (col.label == label) return col;
  qFatal("no column %s", label);
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

  // A pipelined column (GSPMD Table 5's circular schedule on (8,1,2)) and a MoE column (Table 6 on
  // 32 devices): the same mechanism, no rule of their own.
  void pipelinedAndMoeColumns() {
    for (auto [case_name, label] : {std::pair{"gspmd-table5", "6.47B (8,1,2) circular 16x1"}, std::pair{"gspmd-table6", "32 experts/devices"}}) {
      auto spec = FindReproduceCase(case_name);
      QVERIFY(spec.ok());
      const ReproduceColumn* col = nullptr;
      for (const ReproduceColumn& c : spec.value()->columns)
        if (c.label == label) col = &c;
      QVERIFY2(col, label);
      auto full = FullModule(*col);
      auto v = VerifySmallTwin(col->model, col->settings, *full, full->num_partitions);
      QVERIFY2(v.ok(), v.ok() ? "" : v.error().message.c_str());
      qInfo("%s %s: twin %s, %lld instructions", case_name, label, v->changes.c_str(), static_cast<long long>(v->instructions));
      QVERIFY2(v->verdict.state == VerificationVerdict::State::kMatch,
               (std::string(label) + ": " + v->verdict.reason + v->verdict.report.detail).c_str());
      QVERIFY(!v->changes.empty());
    }
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
