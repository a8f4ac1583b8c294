// The partitioned view: the collectives the partitioner inserted with their estimated time on the
// default chip, the program as one chosen device sees it, the numerical verification badge, and
// cancelling a partitioning.
#include <QLabel>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableView>
#include <QToolButton>
#include <QtTest>

#include "core/ir/hlo_text.h"
#include "simulator/collectives/cost.h"
#include "simulator/hardware.h"
#include "simulator/topology.h"
#include "views/document.h"
#include "views/engine.h"
#include "views/item_models.h"
#include "views/job_indicator.h"
#include "views/partitioned_view.h"

using namespace shardscope;
using namespace shardscope::sim;
using namespace shardscope::views;

namespace {

const bool kOffscreen = [] {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  return true;
}();

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
  static bool Partition(Document& doc, PartitionedView& view) {
    QSignalSpy spy(&doc, &Document::partitionUpdated);
    view.partitionNow();
    return spy.wait(120000);
  }

 private slots:
  void collectivesWithEstimatesAndVerification() {
    Document doc;
    PartitionedView view;
    view.setDocument(&doc);
    Status st = doc.loadHloText(kContracting, "contracting.hlo");
    QVERIFY2(st.ok(), st.error().message.c_str());
    QVERIFY(doc.waitUntilIdle(60000));
    QVERIFY(Partition(doc, view));
    const PartitionOutput& p = doc.partition();
    if (!p.engine_available) QSKIP("the SPMD partitioner is not built in");
    QVERIFY2(p.ok, p.message.c_str());

    // One all-reduce of the 8x32 f32 partial result within {0,2} and {1,3}.
    CollectiveTableModel* model = view.collectives();
    QCOMPARE(model->rowCount(), 1);
    const CollectiveInfo* c = model->at(0);
    QCOMPARE(c->kind, std::string("all-reduce"));
    QCOMPARE(c->bytes_per_device, int64_t{8 * 32 * 4});
    QCOMPARE(c->groups, (std::vector<std::vector<int64_t>>{{0, 2}, {1, 3}}));
    QVERIFY(!c->halo);

    // The estimate is the simulator's own figure for the same collective on the default chip.
    auto spec = ChipPreset(p.chip);
    QVERIFY(spec.ok());
    auto topology = Topology::ForMesh(*spec, doc.mesh());
    QVERIFY(topology.ok());
    auto cost = EstimateCollective(*topology, CollectiveKind::kAllReduce, {{0, 2}, {1, 3}}, 8 * 32 * 4);
    QVERIFY(cost.ok());
    QVERIFY(cost->time_s > 0);
    QCOMPARE(c->estimated_seconds, cost->time_s);
    QCOMPARE(model->index(0, CollectiveTableModel::kTime).data().toString(), FormatSeconds(cost->time_s));
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
    QVERIFY(p.verification.max_abs_error <= p.verification.tolerance);
    QLabel* badge = view.verificationBadge();
    QVERIFY(!badge->isHidden());
    QVERIFY(badge->text().contains("verified"));
    QCOMPARE(badge->property("verdict").toInt(), static_cast<int>(VerificationVerdict::State::kMatch));
  }

  void verificationIsSkippedForLargeModules() {
    auto module = ParseModuleText(kContracting, "contracting.hlo");
    QVERIFY(module.ok());
    // Shardings on every instruction already: partition directly.
    PartitionRequestOptions options;
    options.max_verify_flops = 100;  // the dot is 2 x 8 x 16 x 32 = 8192 FLOPs
    PartitionOutput out = RunPartitioner(std::move(*module), DeviceMesh({{"X", 2}, {"Y", 2}}), options);
    if (!out.engine_available) QSKIP("the SPMD partitioner is not built in");
    QVERIFY2(out.ok, out.message.c_str());
    QCOMPARE(out.verification.state, VerificationVerdict::State::kSkipped);
    QVERIFY(QString::fromStdString(out.verification.detail).contains("too large"));

    auto again = ParseModuleText(kContracting, "contracting.hlo");
    QVERIFY(again.ok());
    options.verify = false;
    out = RunPartitioner(std::move(*again), DeviceMesh({{"X", 2}, {"Y", 2}}), options);
    QCOMPARE(out.verification.state, VerificationVerdict::State::kNotRun);
  }

  // A halo exchange (collective-permute between neighbours on a line of four) seen from each device.
  void permuteSeenFromEachDevice() {
    CollectiveTableModel model;
    CollectiveInfo info;
    info.kind = "collective-permute";
    info.instruction = "cp";
    info.replica_groups = "{{0,1},{1,2},{2,3}}";
    info.groups = {{0, 1}, {1, 2}, {2, 3}};
    info.halo = true;
    info.bytes_per_device = 32 * 4;
    model.setCollectives({info});
    QCOMPARE(model.index(0, CollectiveTableModel::kKind).data().toString(), QString("collective-permute (halo)"));
    model.setDevice(0);
    QCOMPARE(model.index(0, CollectiveTableModel::kGroups).data().toString(), QString("sends to 1"));
    model.setDevice(2);
    QCOMPARE(model.index(0, CollectiveTableModel::kGroups).data().toString(), QString("sends to 3; receives from 1"));
    model.setDevice(3);
    QCOMPARE(model.index(0, CollectiveTableModel::kGroups).data().toString(), QString("receives from 2"));
    QVERIFY(model.involves(0, 3));
    info.groups = {{0, 1}};
    model.setCollectives({info});
    QVERIFY(!model.involves(0, 3));
    QCOMPARE(model.index(0, CollectiveTableModel::kGroups).data().toString(), QString("device 3 takes no part"));
    QVERIFY(model.index(0, CollectiveTableModel::kKind).data(Qt::ForegroundRole).isValid());
  }

  void cancelDropsTheResult() {
    Document doc;
    PartitionedView view;
    view.setDocument(&doc);
    Status st = doc.loadHloText(kContracting, "contracting.hlo");
    QVERIFY2(st.ok(), st.error().message.c_str());
    QVERIFY(doc.waitUntilIdle(60000));
    auto* button = view.findChild<QPushButton*>();
    QVERIFY(button);
    QSignalSpy cancelled(&doc, &Document::partitionCancelled);
    QSignalSpy updated(&doc, &Document::partitionUpdated);
    view.partitionNow();
    QCOMPARE(button->text(), QString("Cancel"));
    button->click();
    QCOMPARE(cancelled.count(), 1);
    QCOMPARE(button->text(), QString("Partition"));
    QVERIFY(!doc.partitionBusy());
    QVERIFY(!doc.partition().ok);
    // The status-bar indicator lists the job and cancels it.
    JobIndicator jobs;
    jobs.setDocument(&doc);
    QVERIFY(jobs.runningJobs().isEmpty());
    QVERIFY(jobs.cancelButton()->isHidden());
    view.partitionNow();
    QCOMPARE(jobs.runningJobs(), QStringList{"partitioning and verifying"});
    jobs.refresh();
    QVERIFY(!jobs.cancelButton()->isHidden());
    QVERIFY(jobs.cancelJobs());
    QCOMPARE(cancelled.count(), 2);
    QVERIFY(jobs.runningJobs().isEmpty());
    QVERIFY(!jobs.cancelJobs());  // nothing left to cancel
    QCOMPARE(button->text(), QString("Partition"));
    // Partition again: the worker finishes the cancelled job first (one thread, in order) and
    // drops its result; only the last lands.
    QVERIFY(Partition(doc, view));
    if (!doc.partition().engine_available) QSKIP("the SPMD partitioner is not built in");
    QVERIFY(doc.partition().ok);
    QCOMPARE(updated.count(), 1);
    QCOMPARE(view.collectives()->rowCount(), 1);
  }
};

QTEST_MAIN(TestGuiPartitioned)
#include "test_gui_partitioned.moc"
