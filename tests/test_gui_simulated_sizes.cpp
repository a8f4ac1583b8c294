// Simulating at other sizes than the document's (issue 12, "real sizes in the GUI": "the
// simulation panel takes the model's sizes — the zoo's settings, or 'scale this module's dims by
// k' — independently of the numerically verified instance"). The document stays small and
// verified; the simulation runs the same model, sharded the same way, at the sizes asked for.
#include <QDialog>
#include <QDialogButtonBox>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QToolButton>
#include <QUndoStack>
#include <QtTest>

#include "app/gui/project_file.h"
#include "app/gui/session.h"
#include "core/ir/hlo_text.h"
#include "core/zoo/zoo.h"
#include "gui_test_support.h"
#include "simulator/hardware.h"
#include "views/analysis_model.h"
#include "views/document_model.h"
#include "views/simulated_sizes_control.h"
#include "views/simulation_view.h"

using namespace shardscope;
using namespace shardscope::views;
using shardscope::gui::Session;
using shardscope::gui::WaitUntilIdle;

namespace {

// 16 devices, a dot with both operands split: every dimension scaled by 4 makes its FLOPs 64x.
const char* kModule = R"(HloModule sizes, num_partitions=16

ENTRY main {
  x = f32[256,512] parameter(0), sharding={devices=[4,4]<=[16]}
  w = f32[512,1024] parameter(1), sharding={devices=[4,4]<=[16]}
  ROOT y = f32[256,1024] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[4,4]<=[16]}
}
)";

void AcceptDialog(QDialog* d) {
  auto* box = d->findChild<QDialogButtonBox*>();
  QVERIFY(box);
  box->button(QDialogButtonBox::Ok)->click();
}

}  // namespace

class TestGuiSimulatedSizes : public QObject {
  Q_OBJECT

  QTemporaryDir runs_dir_;

 private slots:
  void initTestCase() { QVERIFY(shardscope::gui::UseTestRunStore(runs_dir_)); }

  // A zoo example (the Transformer, small and verified) simulated at a larger batch and width set
  // in the panel's dialog: the run has the larger model's FLOPs, the document and its verified
  // partitioned program stay as they were, the choice is undoable and saved with the project.
  void zooSettingsInTheDialog() {
    if (sim::ChipPresetNames().empty()) QSKIP("the simulator is not built in");
    Session session;
    SimulationView view;
    view.setModels(session.document(), session.analysis(), session.runs());
    QVERIFY(session.loadExample("transformer").ok());
    QVERIFY(session.document()->zooSettings().has_value());
    QVERIFY(WaitUntilIdle(session, 120000));
    session.analysis()->requestPartition();
    QVERIFY(WaitUntilIdle(session, 120000));
    const auto program = session.analysis()->partition().result;
    QCOMPARE(session.analysis()->partition().verification.state, VerificationVerdict::State::kMatch);
    const std::string doc_text = session.document()->moduleText().toStdString();
    session.analysis()->requestSimulation("tpu-v4");
    QVERIFY(WaitUntilIdle(session, 120000));
    QVERIFY2(session.analysis()->simulation().ok(), session.analysis()->simulation().message.c_str());
    const auto small = session.analysis()->simulation().run;
    QVERIFY(session.analysis()->simulation().sizes.empty());
    QCOMPARE(view.simulatedSizes()->button()->text(), QString("Sizes: the document's"));

    // The dialog: the model's settings at the document's values; the mesh's fixed.
    QDialog* d = view.simulatedSizes()->openDialog();
    QVERIFY(d);
    auto* batch = d->findChild<QSpinBox*>("size_batch");
    auto* model = d->findChild<QSpinBox*>("size_model");
    auto* mesh_x = d->findChild<QSpinBox*>("size_mesh_x");
    QVERIFY(batch && model && mesh_x && d->findChild<QSpinBox*>("size_scale"));
    const std::string batch_was = session.document()->zooSettings()->count("batch")
                                      ? session.document()->zooSettings()->at("batch")
                                      : std::to_string(batch->value());
    QCOMPARE(std::to_string(batch->value()), batch_was);
    QVERIFY(!mesh_x->isEnabled());
    batch->setValue(batch->value() * 8);
    model->setValue(model->value() * 2);
    AcceptDialog(d);
    QCOMPARE(session.document()->simulatedSizes().zoo_settings.size(), size_t{2});
    // The change simulated again by itself.
    QVERIFY(WaitUntilIdle(session, 300000));
    const SimulatedStep& big = session.analysis()->simulation();
    QVERIFY2(big.ok(), big.message.c_str());
    QVERIFY2(big.sizes.find("batch " + batch_was + " -> ") != std::string::npos, big.sizes.c_str());
    QVERIFY2(big.sizes.find("model ") != std::string::npos, big.sizes.c_str());
    // 8x the batch and twice the width: the FLOPs of the step grow by more than 8x (the weights'
    // matmuls 16x, attention's 8x).
    QVERIFY2(big.run->summary.total_flops > 8 * small->summary.total_flops,
             qPrintable(QString("%1 -> %2").arg(small->summary.total_flops).arg(big.run->summary.total_flops)));
    bool recorded = false;
    for (const auto& [k, v] : big.run->inputs.settings) recorded = recorded || (k == "option.simulated_sizes" && v == big.sizes);
    QVERIFY(recorded);
    QVERIFY(view.simulatedSizes()->button()->text().startsWith("Sizes: batch="));
    // The document, its partitioned program and its badge stay as they were.
    QCOMPARE(session.document()->moduleText().toStdString(), doc_text);
    QCOMPARE(session.analysis()->partition().result, program);
    QCOMPARE(session.analysis()->partition().verification.state, VerificationVerdict::State::kMatch);

    // Saved with the project and read back.
    auto project = shardscope::gui::ParseProject(shardscope::gui::ProjectJson(*session.document()), "p.shardscope");
    QVERIFY2(project.ok(), project.ok() ? "" : project.error().message.c_str());
    QVERIFY(project->contents.simulated_sizes == session.document()->simulatedSizes());

    // Undone: the document's sizes again, and the step simulated as before.
    session.document()->undoStack()->undo();
    QVERIFY(session.document()->simulatedSizes().empty());
    QVERIFY(WaitUntilIdle(session, 120000));
    QVERIFY(session.analysis()->simulation().ok());
    QCOMPARE(session.analysis()->simulation().run->summary.step_time_s, small->summary.step_time_s);
    QCOMPARE(view.simulatedSizes()->button()->text(), QString("Sizes: the document's"));
  }

  // Any module (an HLO file): every dimension scaled by 4 — a dot's FLOPs 64x; zoo settings are
  // refused with a message that says why, and nothing else changes.
  void scaleAnyModule() {
    if (sim::ChipPresetNames().empty()) QSKIP("the simulator is not built in");
    Session session;
    SimulationView view;
    view.setModels(session.document(), session.analysis(), session.runs());
    QVERIFY(session.loadHloText(kModule, "sizes.hlo").ok());
    QVERIFY(WaitUntilIdle(session, 60000));
    session.analysis()->requestSimulation("tpu-v4");
    QVERIFY(WaitUntilIdle(session, 120000));
    QVERIFY(session.analysis()->simulation().ok());
    const double flops = session.analysis()->simulation().run->summary.total_flops;
    QDialog* d = view.simulatedSizes()->openDialog();
    QVERIFY(d);
    QVERIFY(!d->findChild<QSpinBox*>("size_batch"));  // not built by the zoo: scaling only
    auto* scale = d->findChild<QSpinBox*>("size_scale");
    QVERIFY(scale);
    scale->setValue(4);
    AcceptDialog(d);
    QVERIFY(WaitUntilIdle(session, 120000));
    const SimulatedStep& step = session.analysis()->simulation();
    QVERIFY2(step.ok(), step.message.c_str());
    QVERIFY2(step.sizes.find("every dimension x4") != std::string::npos, step.sizes.c_str());
    QCOMPARE(step.run->summary.total_flops, 64 * flops);

    // One dimension alone: the dialog lists the module's dimensions class by class (x's rows; x's
    // columns with w's rows, which a dot contracts; w's columns); x's rows x8 make the dot 8x.
    QDialog* again = view.simulatedSizes()->openDialog();
    QVERIFY(again);
    QCOMPARE(again->findChild<QSpinBox*>("size_scale")->value(), 4);
    again->findChild<QSpinBox*>("size_scale")->setValue(1);
    auto* rows = again->findChild<QSpinBox*>("factor_x:0");
    QVERIFY(rows && again->findChild<QSpinBox*>("factor_x:1") && again->findChild<QSpinBox*>("factor_w:1"));
    QVERIFY(!again->findChild<QSpinBox*>("factor_w:0"));  // x:1's class
    QVERIFY2(rows->toolTip().contains("x:0"), qPrintable(rows->toolTip()));
    rows->setValue(8);
    AcceptDialog(again);
    QCOMPARE(session.document()->simulatedSizes().dimension_factors.at("x:0"), int64_t{8});
    QVERIFY(WaitUntilIdle(session, 120000));
    const SimulatedStep& one = session.analysis()->simulation();
    QVERIFY2(one.ok(), one.message.c_str());
    QCOMPARE(one.run->summary.total_flops, 8 * flops);
    QVERIFY2(one.sizes == "x:0 x8", one.sizes.c_str());
    QCOMPARE(view.simulatedSizes()->button()->text(), QString("Sizes: x:0 x8"));

    ProjectSimulatedSizes wrong;
    wrong.zoo_settings["batch"] = "64";
    session.document()->setSimulatedSizes(wrong);
    QVERIFY(WaitUntilIdle(session, 120000));
    const SimulatedStep& failed = session.analysis()->simulation();
    QVERIFY(!failed.ok());
    QVERIFY(failed.sizes_failed);
    QVERIFY2(failed.message.find("model zoo") != std::string::npos, failed.message.c_str());
  }

  // A Transformer read from its HLO text (no zoo settings): each layer's weights are their own
  // classes, and the dialog gives the same dimension of every layer one row (the heads of layer 0
  // and layer 1), whose factor goes to each layer's class.
  void layersShareARow() {
    Session session;
    SimulationView view;
    view.setModels(session.document(), session.analysis(), session.runs());
    auto built = ZooBuild("transformer", {{"layers", "2"}});
    QVERIFY(built.ok());
    QVERIFY(session.loadHloText(QString::fromStdString(PrintHloModule(**built)), "t.hlo").ok());
    QVERIFY(WaitUntilIdle(session, 60000));
    QDialog* d = view.simulatedSizes()->openDialog();
    QVERIFY(d);
    auto* heads = d->findChild<QSpinBox*>("factor_layer0_wqkv:2");
    QVERIFY(heads);
    QVERIFY(!d->findChild<QSpinBox*>("factor_layer1_wqkv:2"));
    QVERIFY2(heads->toolTip().contains("2 classes, one per layer") && heads->toolTip().contains("layer1_wqkv:2"),
             qPrintable(heads->toolTip()));
    heads->setValue(2);
    AcceptDialog(d);
    const auto& f = session.document()->simulatedSizes().dimension_factors;
    QCOMPARE(f.at("layer0_wqkv:2"), int64_t{2});
    QCOMPARE(f.at("layer1_wqkv:2"), int64_t{2});
    QCOMPARE(f.size(), size_t{2});
  }
};

QTEST_MAIN(TestGuiSimulatedSizes)
#include "test_gui_simulated_sizes.moc"
