// The partitioned view: the collectives the partitioner inserted with their estimated time on the
// default chip, the program as one chosen device sees it, the numerical verification badge,
// cancelling a partitioning, and newer requests superseding queued ones in the job tracker.
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QTabWidget>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableView>
#include <QAbstractItemModelTester>
#include <QToolButton>
#include <QtTest>

#include "app/gui/analysis_jobs.h"
#include "app/gui/project_file.h"
#include "app/pipeline/partition.h"
#include "app/pipeline/simulate.h"
#include "app/pipeline/sources.h"
#include "core/base/units.h"
#include "core/ir/hlo_text.h"
#include "core/zoo/zoo.h"
#include "gui_test_support.h"
#include "simulator/collectives/cost.h"
#include "simulator/hardware.h"
#include "simulator/topology.h"
#include "views/analysis_model.h"
#include "views/document_model.h"
#include "views/item_models.h"
#include "views/job_indicator.h"
#include "views/job_tracker.h"
#include "views/partitioned_view.h"

using namespace shardscope;
using namespace shardscope::views;
using shardscope::gui::Session;
using shardscope::gui::WaitUntilIdle;

namespace {

// d = a x b with the contracting dim split in two: devices {0,1} hold k-tile 0 and {2,3} k-tile 1
// (the other factor of two replicates), so the partial sums are added within {0,2} and {1,3}.
const char* kContracting = R"(HloModule contracting, num_partitions=4

ENTRY main {
  a = f32[8,16] parameter(0), sharding={devices=[1,2,2]0,1,2,3 last_tile_dim_replicate}
  b = f32[16,32] parameter(1), sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}
  ROOT d = f32[8,32] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={replicated}
}
)";

}  // namespace

class TestGuiPartitioned : public QObject {
  Q_OBJECT

 private:
  static bool Partition(Session& session, PartitionedView& view) {
    QSignalSpy spy(session.analysis(), &AnalysisModel::partitionUpdated);
    view.partitionNow();
    return spy.wait(120000);
  }

  static void Attach(Session& session, PartitionedView& view) {
    view.setModels(session.document(), session.analysis(), session.jobs());
  }

 private slots:
  void collectivesWithEstimatesAndVerification() {
    Session session;
    PartitionedView view;
    QAbstractItemModelTester tester(view.collectives(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    Attach(session, view);
    Status st = session.loadHloText(kContracting, "contracting.hlo");
    QVERIFY2(st.ok(), st.error().message.c_str());
    QVERIFY(WaitUntilIdle(session));
    QVERIFY(Partition(session, view));
    const PartitionedProgram& p = session.analysis()->partition();
    QVERIFY2(p.ok(), p.message.c_str());
    // The program's graph shows the analysis's own module (shared, not copied), its shardings as given.
    const DocumentModel* spmd = view.spmdDocument();
    QCOMPARE(spmd->module(), p.result->module.get());
    int sharded = 0;
    for (const auto& comp : p.result->module->computations()) {
      for (const auto& inst : comp->instructions()) {
        if (!inst->has_sharding()) continue;
        ++sharded;
        QVERIFY(spmd->sharding(inst->id()) == *inst->sharding());
      }
    }
    QVERIFY(sharded > 0);

    // One all-reduce of the 8x32 f32 partial result within {0,2} and {1,3}.
    CollectiveTableModel* model = view.collectives();
    QCOMPARE(model->rowCount(), 1);
    const InsertedCollective* c = model->at(0);
    QCOMPARE(c->kind, Opcode::kAllReduce);
    QCOMPARE(c->bytes_per_device, int64_t{8 * 32 * 4});
    QCOMPARE(model->participants(0), (std::vector<std::vector<int64_t>>{{0, 2}, {1, 3}}));
    QVERIFY(!model->isHalo(0));

    // The estimate is the simulator's own figure for the same collective on the default chip.
    QCOMPARE(p.chip, pipeline::DefaultChip());
    auto spec = ChipPreset(p.chip);
    QVERIFY(spec.ok());
    auto topology = Topology::ForMesh(*spec, session.document()->mesh());
    QVERIFY(topology.ok());
    auto cost = EstimateCollective(*topology, CollectiveKind::kAllReduce, {{0, 2}, {1, 3}}, 8 * 32 * 4);
    QVERIFY(cost.ok());
    QVERIFY(cost->time_s > 0);
    QVERIFY(model->estimate(0));
    QCOMPARE(model->estimate(0)->time_s, cost->time_s);
    QCOMPARE(model->index(0, CollectiveTableModel::kTime).data().toString(), QString::fromStdString(FormatSeconds(cost->time_s)));
    QVERIFY(model->index(0, CollectiveTableModel::kTime).data(Qt::ToolTipRole).toString().contains(
        QString::fromStdString(cost->algorithm)));

    // Seen from device 1: its group only.
    QCOMPARE(model->index(0, CollectiveTableModel::kGroups).data().toString(), QString("{{0,2},{1,3}}"));
    view.setDevice(1);
    QCOMPARE(model->index(0, CollectiveTableModel::kGroups).data().toString(), QString("{1,3} (1 of 2 groups)"));
    view.setDevice(-1);
    QCOMPARE(model->device(), int64_t{-1});

    // Verified numerically: the badge says so.
    QCOMPARE(p.verification.state, VerificationVerdict::State::kMatch);
    QVERIFY(p.verification.report.max_abs_error <= p.verification.report.tolerance);
    QLabel* badge = view.verificationBadge();
    QVERIFY(!badge->isHidden());
    QVERIFY(badge->text().contains("verified"));
    QCOMPARE(badge->property("verdict").toInt(), static_cast<int>(VerificationVerdict::State::kMatch));

    // The HLO tab is filled when it is shown (not before: a large program's text is costly), with
    // the program the analysis printed: the all-reduce within {0,2} and {1,3}.
    QPlainTextEdit* hlo = view.hloText();
    QVERIFY(hlo->toPlainText().isEmpty());
    auto* tabs = view.findChild<QTabWidget*>();
    QVERIFY(tabs);
    tabs->setCurrentWidget(hlo);
    QCOMPARE(hlo->toPlainText(), QString::fromStdString(p.Text()));
    QVERIFY(hlo->toPlainText().contains("all-reduce("));
    QVERIFY(hlo->toPlainText().contains("replica_groups={{0,2},{1,3}}"));
    // A new partitioning while the tab is shown replaces the text at once.
    QVERIFY(Partition(session, view));
    QCOMPARE(hlo->toPlainText(), QString::fromStdString(session.analysis()->partition().Text()));
  }

  void verificationIsSkippedForLargeModules() {
    auto module = ParseHloModule(kContracting, "contracting.hlo");
    QVERIFY(module.ok());
    // Shardings on every instruction already: partition directly.
    auto part = pipeline::Partition(**module);
    QVERIFY(part.ok());
    pipeline::VerifyOptions options;
    options.max_flops = 100;  // the dot is 2 x 8 x 16 x 32 = 8192 FLOPs
    VerificationVerdict v = pipeline::Verify(**module, *part->module, 4, options);
    QCOMPARE(v.state, VerificationVerdict::State::kSkipped);
    QVERIFY(QString::fromStdString(v.reason).contains("too large"));
    // The badge says so, greyed.
    Session session;
    PartitionedView view;
    Attach(session, view);
    QVERIFY(session.loadHloText(kContracting, "contracting.hlo").ok());
    PartitionedProgram program;
    program.result = std::make_shared<const PartitionResult>(std::move(part).value());
    program.devices = 4;
    program.verification = v;
    session.analysis()->setPartition(std::move(program));
    QVERIFY(!view.verificationBadge()->isHidden());
    QVERIFY(view.verificationBadge()->text().contains("not verified (too large)"));
    QCOMPARE(view.verificationBadge()->property("verdict").toInt(), static_cast<int>(VerificationVerdict::State::kSkipped));
    QVERIFY(WaitUntilIdle(session));
  }

  // At real sizes (the whole-model issue): GSPMD Table 2's 64B Transformer on 128 cores is far
  // above the evaluator's limits, so the badge proves the sharding on its small twin instead (the
  // same zoo model with each size shrunk as the sharding allows, sharded as this one by name;
  // app/pipeline/small_twin.h) and says so; the same module read from a file, without zoo
  // settings, is verified on its shrunk twin (its dimensions shrunk, each keeping its sharding).
  void realSizesAreVerifiedOnASmallTwin() {
    Session session;
    PartitionedView view;
    Attach(session, view);
    QVERIFY(session.loadPaperConfiguration("gspmd-table2", "64B, 128 devices").ok());
    QVERIFY(session.document()->zooSettings().has_value());
    QVERIFY(WaitUntilIdle(session, 300000));
    QVERIFY(Partition(session, view));
    const PartitionedProgram& p = session.analysis()->partition();
    QVERIFY2(p.ok(), p.message.c_str());
    QCOMPARE(p.devices, int64_t{128});
    QCOMPARE(p.verification.state, VerificationVerdict::State::kMatch);
    QVERIFY2(p.verification_full_skipped.find("too large") != std::string::npos, p.verification_full_skipped.c_str());
    QVERIFY2(p.verification_twin.find("batch 64 -> 8") != std::string::npos, p.verification_twin.c_str());
    QVERIFY2(view.verificationBadge()->text().contains("verified on a small twin"), qPrintable(view.verificationBadge()->text()));
    QVERIFY2(view.verificationBadge()->toolTip().contains("too large to evaluate") &&
                 view.verificationBadge()->toolTip().contains("batch 64 -&gt; 8"),
             qPrintable(view.verificationBadge()->toolTip()));
    // Saved as a project, the zoo settings go with it (reopened, it has its twin again).
    auto project = shardscope::gui::ParseProject(shardscope::gui::ProjectJson(*session.document()), "p.shardscope");
    QVERIFY2(project.ok(), project.ok() ? "" : project.error().message.c_str());
    QVERIFY(project->contents.zoo_settings == session.document()->zooSettings());
    QCOMPARE(project->contents.zoo_settings->at("hidden"), std::string("65536"));
    // The module opened from its HLO text instead: no zoo settings, its dimensions shrunk.
    auto built = ZooBuild("transformer", {{"layers", "32"}, {"model", "8192"}, {"hidden", "65536"}, {"heads", "128"},
                                          {"head_dim", "256"}, {"seq", "1024"}, {"batch", "64"}, {"mesh_x", "8"}, {"mesh_y", "16"}});
    QVERIFY(built.ok());
    QVERIFY(session.loadHloText(QString::fromStdString(PrintHloModule(**built)), "big.hlo").ok());
    QVERIFY(!session.document()->zooSettings().has_value());
    QVERIFY(WaitUntilIdle(session, 300000));
    QVERIFY(Partition(session, view));
    const PartitionedProgram& file = session.analysis()->partition();
    QCOMPARE(file.verification.state, VerificationVerdict::State::kMatch);
    QVERIFY2(file.verification_full_skipped.find("too large") != std::string::npos, file.verification_full_skipped.c_str());
    QVERIFY2(file.verification_twin.rfind("dimensions shrunk: ", 0) == 0 &&
                 file.verification_twin.find(" -> ") != std::string::npos,
             file.verification_twin.c_str());
    QVERIFY2(view.verificationBadge()->text().contains("verified on a small twin"), qPrintable(view.verificationBadge()->text()));
    QVERIFY2(view.verificationBadge()->toolTip().contains("the same module with its dimensions shrunk"),
             qPrintable(view.verificationBadge()->toolTip()));
    qInfo("%s", file.verification_twin.c_str());
  }

  // A halo exchange (collective-permute between neighbours on a line of four) seen from each device.
  void permuteSeenFromEachDevice() {
    CollectiveTableModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    auto program = [](const char* pairs) {
      auto m = ParseHloModule(std::string(R"(HloModule halo, num_partitions=4

ENTRY main {
  p = f32[32] parameter(0)
  ROOT cp = f32[32] collective-permute(p), source_target_pairs=)") + pairs + "\n}\n", "halo.hlo");
      if (!m.ok()) qFatal("%s", m.error().message.c_str());
      auto r = std::make_shared<PartitionResult>();
      r->module = std::move(m).value();
      r->collectives = {{"conv", "cp", Opcode::kCollectivePermute, 32 * 4, "", "halo exchange of 1 row along X"}};
      return r;
    };
    model.setProgram(program("{{0,1},{1,2},{2,3}}"), {}, "tpu-v4");
    QVERIFY(model.isHalo(0));
    QCOMPARE(model.index(0, CollectiveTableModel::kKind).data().toString(), QString("collective-permute (halo)"));
    model.setDevice(0);
    QCOMPARE(model.index(0, CollectiveTableModel::kGroups).data().toString(), QString("sends to 1"));
    model.setDevice(2);
    QCOMPARE(model.index(0, CollectiveTableModel::kGroups).data().toString(), QString("sends to 3; receives from 1"));
    model.setDevice(3);
    QCOMPARE(model.index(0, CollectiveTableModel::kGroups).data().toString(), QString("receives from 2"));
    QVERIFY(model.involves(0, 3));
    model.setProgram(program("{{0,1}}"), {}, "tpu-v4");
    QVERIFY(!model.involves(0, 3));
    QCOMPARE(model.index(0, CollectiveTableModel::kGroups).data().toString(), QString("device 3 takes no part"));
    QVERIFY(model.index(0, CollectiveTableModel::kKind).data(Qt::ForegroundRole).isValid());
  }

  void cancelDropsTheResult() {
    Session session;
    PartitionedView view;
    Attach(session, view);
    Status st = session.loadHloText(kContracting, "contracting.hlo");
    QVERIFY2(st.ok(), st.error().message.c_str());
    QVERIFY(WaitUntilIdle(session));
    auto* button = view.findChild<QPushButton*>();
    QVERIFY(button);
    QSignalSpy cancelled(session.analysis(), &AnalysisModel::partitionCancelled);
    QSignalSpy updated(session.analysis(), &AnalysisModel::partitionUpdated);
    view.partitionNow();
    QCOMPARE(button->text(), QString("Cancel"));
    QVERIFY(session.analysis()->partitionBusy());
    button->click();
    QCOMPARE(cancelled.count(), 1);
    QCOMPARE(button->text(), QString("Partition"));
    QVERIFY(!session.analysis()->partitionBusy());
    QVERIFY(!session.analysis()->partition().ok());
    // The status-bar indicator lists the job and cancels it.
    JobIndicator jobs;
    jobs.setJobTracker(session.jobs());
    QVERIFY(jobs.runningJobs().isEmpty());
    QVERIFY(jobs.cancelButton()->isHidden());
    view.partitionNow();
    QCOMPARE(jobs.runningJobs(), QStringList{"partitioning and verifying"});
    QVERIFY(!jobs.cancelButton()->isHidden());
    QVERIFY(jobs.cancelJobs());
    QCOMPARE(cancelled.count(), 2);
    QVERIFY(jobs.runningJobs().isEmpty());
    QVERIFY(!jobs.cancelJobs());  // nothing left to cancel
    QCOMPARE(button->text(), QString("Partition"));
    // Partition again: the engine's lane finishes the cancelled jobs first (in order) and their
    // results are dropped; only the last lands.
    QVERIFY(Partition(session, view));
    QVERIFY(session.analysis()->partition().ok());
    QCOMPARE(updated.count(), 1);
    QCOMPARE(view.collectives()->rowCount(), 1);
  }

  // A newer request supersedes an older one still queued: it never runs, and only the newest
  // result is shown.
  void aNewerPartitioningSupersedesTheQueuedOne() {
    Session session;
    PartitionedView view;
    Attach(session, view);
    QVERIFY(session.loadHloText(kContracting, "contracting.hlo").ok());
    QVERIFY(WaitUntilIdle(session));
    QSignalSpy updated(session.analysis(), &AnalysisModel::partitionUpdated);
    QSignalSpy cancelled(session.analysis(), &AnalysisModel::partitionCancelled);
    for (int i = 0; i < 5; ++i) session.analysis()->requestPartition();
    QCOMPARE(session.jobs()->labels(), QStringList{"partitioning and verifying"});
    QVERIFY(updated.wait(120000));
    QVERIFY(WaitUntilIdle(session));
    QCOMPARE(updated.count(), 1);
    QCOMPARE(cancelled.count(), 0);
    QCOMPARE(session.analysisJobs()->partitionings(), 1);
    QVERIFY(session.analysis()->partition().ok());
  }
};

QTEST_MAIN(TestGuiPartitioned)
#include "test_gui_partitioned.moc"
