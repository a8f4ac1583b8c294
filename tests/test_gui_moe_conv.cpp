// The GUI's views of the MoE and convolution models (issue 15): in the teaching panel, an MoE
// dispatch all-to-all of the zoo's moe-transformer (the paper's expert annotations, E over a 1-D
// mesh of 4) shows who sends which expert's tokens to whom; in the mesh view, a spatially
// partitioned U-Net convolution (the zoo's unet3d, only the input's depth annotated) shows the
// selected device's slab and the halo rows each neighbour sends — the forward conv and the
// backward pass's filter-gradient conv (its kernel's spatial dim split, partial sums
// all-reduced). Both through the main window, as a user gets there, and the screenshots a person
// looks at.
#include <QDockWidget>
#include <QFileInfo>
#include <QImage>
#include <QLabel>
#include <QProcess>
#include <QScrollArea>
#include <QScrollBar>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest>

#include "app/gui/main_window.h"
#include "app/pipeline/pipeline.h"
#include "gui_test_support.h"
#include "gui_window_test_support.h"
#include "views/collective_stepper.h"
#include "views/document_model.h"
#include "views/halo_slabs_view.h"
#include "views/item_models.h"
#include "views/mesh_view.h"
#include "views/partitioned_view.h"
#include "tests/built_paths.h"

using namespace shardscope;
using namespace shardscope::views;
using shardscope::gui::MainWindow;
using shardscope::gui::OpenExample;
using shardscope::gui::WaitReady;

namespace {

// Runs the GUI binary for a screenshot; the PNG's size, or an empty size with the reason in *why.
QSize Screenshot(const QStringList& args, const QString& png, QString* why) {
  QProcess p;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert("QT_QPA_PLATFORM", "offscreen");
  p.setProcessEnvironment(env);
  p.start(SHARDSCOPE_GUI_PATH, QStringList{"--screenshot", png} + args);
  if (!p.waitForFinished(600000)) {
    *why = "timed out";
    return {};
  }
  if (p.exitCode() != 0) {
    *why = QString::fromUtf8(p.readAllStandardError());
    return {};
  }
  return QImage(png).size();
}

// Clicks the grid's tile of `device` (found by scanning for the point whose click shows its halo).
bool ClickDevice(MeshView* mesh, int64_t device) {
  DeviceGridWidget* grid = mesh->grid();
  for (int y = 4; y < grid->height(); y += 6) {
    for (int x = 4; x < grid->width(); x += 6) {
      QTest::mouseClick(grid, Qt::LeftButton, {}, QPoint(x, y));
      if (mesh->haloView()->halo() && mesh->haloView()->halo()->device == device) return true;
    }
  }
  return false;
}

}  // namespace

class TestGuiMoeConv : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

 private slots:
  void initTestCase() {
    QVERIFY(gui::UseTestRunStore(dir_));
  }

  // moe-transformer (gshard annotations, 4 devices): the first MoE layer's dispatch all-to-all,
  // opened in the teaching panel the way a double-click in the Collectives list does it, names
  // every piece by its group and expert.
  void teachingPanelNamesTheDispatchPieces() {
    MainWindow w;
    QString error;
    QVERIFY2(OpenExample(w, "moe-transformer", &error), qPrintable(error));
    QCOMPARE(w.document()->mesh().num_devices(), int64_t{4});
    QVERIFY(w.teachCollective("layer1_moe_dispatched"));
    QVERIFY(WaitReady(w));
    CollectiveStepper* stepper = w.teachingPanel();
    QTRY_VERIFY_WITH_TIMEOUT(stepper->hasPlan() && stepper->plan().walk.kind == sim::CollectiveKind::kAllToAll, 60000);
    QCOMPARE(w.mode(), MainWindow::Mode::kTeaching);
    const TeachingRequest& r = stepper->plan().request;
    QVERIFY2(stepper->titleText().contains("MoE dispatch"), qPrintable(stepper->titleText()));
    QCOMPARE(r.piece_names.size(), size_t{4});
    QCOMPARE(r.piece_names[3][1], std::string("tokens of group 3 for expert 1"));
    // The list beside the mesh: who sends what to whom.
    const QString pieces = stepper->piecesText();
    QVERIFY2(pieces.contains("MoE dispatch"), qPrintable(pieces));
    QVERIFY2(pieces.contains("device 3 \u2192 device 1: tokens of group 3 for expert 1"), qPrintable(pieces));
    QVERIFY2(pieces.contains("device 0 \u2192 device 2: tokens of group 0 for expert 2"), qPrintable(pieces));
    // The arrows of every step carry those names: each transfer of piece i -> j is "... group i for expert j".
    QVERIFY(stepper->stepCount() >= 1);
    const auto& group = stepper->plan().walk.groups.front();
    int arrows = 0;
    for (int s = 1; s <= stepper->stepCount(); ++s) {
      stepper->setStep(s);
      for (const auto& t : stepper->currentTransfers()) {
        const int64_t from = group[static_cast<size_t>(t.chunks.front())];
        const auto to = std::find(group.begin(), group.end(), t.final_dst_device) - group.begin();
        const QString want = QString("tokens of group %1 for expert %2").arg(t.chunks.front()).arg(to);
        QVERIFY2(QString::fromStdString(t.piece).endsWith(want), t.piece.c_str());
        QVERIFY(from >= 0);
        ++arrows;
      }
      // This step's pieces come first in the list, marked.
      QVERIFY(stepper->piecesText().contains("\u25B6 device"));
    }
    QVERIFY(arrows >= 12);
    stepper->setStep(1);
    stepper->grab();  // paints the labelled arrows
    QVERIFY(stepper->canvas()->lastPaintStats().arrows > 0);
  }

  // unet3d (spatial annotations: the depth split 4 ways): selecting a 3x3x3 convolution shows the
  // selected device's own slab of the input and the 1-row halos its two neighbours send; at the
  // array's edge a device gets one halo only. Clicking a device in the grid selects it.
  void meshViewShowsTheConvHalo() {
    MainWindow w;
    QString error;
    QVERIFY2(OpenExample(w, "unet3d", &error), qPrintable(error));
    QVERIFY(w.selectInstruction("down0_conva_conv"));
    QVERIFY(w.showView("mesh"));
    MeshView* mesh = w.meshView();
    QTRY_VERIFY(mesh->haloShown());
    const auto& halo = mesh->haloView()->halo();
    QVERIFY(halo);
    QCOMPARE(halo->conv, std::string("down0_conva_conv"));
    QCOMPARE(halo->dims.size(), size_t{1});
    const HaloDim& d = halo->dims[0];
    QCOMPARE(d.input_dim, int64_t{1});  // the depth
    QCOMPARE(d.tiles, int64_t{4});
    QCOMPARE(d.full, int64_t{128});
    QCOMPARE(d.shard, int64_t{32});
    // The default device has neighbours on both sides (tile 1).
    QCOMPARE(d.tile, int64_t{1});
    const int64_t device = halo->device;
    QCOMPARE(mesh->grid()->selectedDevice(), device);
    QCOMPARE(d.slabs.size(), size_t{3});
    QCOMPARE(d.slabs[0].width(), int64_t{1});
    QCOMPARE(d.slabs[0].begin, int64_t{31});
    QCOMPARE(d.slabs[1].from_device, device);
    QCOMPARE(d.slabs[1].width(), int64_t{32});
    QCOMPARE(d.slabs[2].width(), int64_t{1});
    QCOMPARE(d.slabs[2].begin, int64_t{64});
    // The neighbours are the devices holding tiles 0 and 2 of the conv's depth.
    const auto sh = w.document()->sharding(w.document()->findInstruction("down0_conva_conv")->id());
    QVERIFY(sh);
    QCOMPARE(sh->TileIndexForDevice(d.slabs[0].from_device).at(1), int64_t{0});
    QCOMPARE(sh->TileIndexForDevice(d.slabs[2].from_device).at(1), int64_t{2});
    const QStringList labels = mesh->haloView()->slabLabels();
    QCOMPARE(labels.size(), 3);
    QCOMPARE(labels[0], QString("1 row from device %1").arg(d.slabs[0].from_device));
    QCOMPARE(labels[1], QString("rows 32\u201363: device %1's own").arg(device));
    QCOMPARE(labels[2], QString("1 row from device %1").arg(d.slabs[2].from_device));

    // A click on the device holding tile 0: only a right halo.
    int64_t edge = -1;
    for (int64_t dev = 0; dev < 4; ++dev)
      if (sh->TileIndexForDevice(dev).at(1) == 0) edge = dev;
    QVERIFY(edge >= 0);
    DeviceGridWidget* grid = mesh->grid();
    QTRY_VERIFY(grid->isVisible() && grid->width() > 0);
    int tile_index = -1;
    for (size_t i = 0; i < grid->tiles().size(); ++i)
      if (grid->tiles()[i].device == edge) tile_index = static_cast<int>(i);
    QVERIFY(tile_index >= 0);
    QVERIFY(ClickDevice(mesh, edge));
    const HaloDim& e = mesh->haloView()->halo()->dims[0];
    QCOMPARE(e.tile, int64_t{0});
    QCOMPARE(e.left, int64_t{0});
    QCOMPARE(e.right, int64_t{1});
    QCOMPARE(e.slabs.size(), size_t{2});
    QCOMPARE(grid->selectedDevice(), edge);

    // Not a convolution: no halo box.
    QVERIFY(w.selectInstruction("x"));
    QTRY_VERIFY(!mesh->haloShown());

    // A click on one of the conv's halo collective-permutes in the partitioned program's list
    // selects the conv: its halo is shown again.
    QVERIFY(w.showView("collectives"));
    QVERIFY(WaitReady(w));
    PartitionedView* partitioned = w.partitionedView();
    QTableView* table = partitioned->collectiveTable();
    QTRY_VERIFY(table->isVisible() && table->model()->rowCount() > 0);
    int row = -1;
    for (int r = 0; r < partitioned->collectives()->rowCount() && row < 0; ++r) {
      const InsertedCollective* c = partitioned->collectives()->at(r);
      if (c && c->origin == "down0_conva_conv" && c->kind == Opcode::kCollectivePermute) row = r;
    }
    QVERIFY(row >= 0);
    const QModelIndex index = table->model()->index(row, 0);
    table->scrollTo(index);
    QTest::mouseClick(table->viewport(), Qt::LeftButton, {}, table->visualRect(index).center());
    QCOMPARE(w.document()->instruction(w.document()->selected())->name(), std::string("down0_conva_conv"));
    QTRY_VERIFY(mesh->haloShown());
    QCOMPARE(mesh->haloView()->halo()->dims.at(0).tiles, int64_t{4});
  }

  // unet3d's backward pass: the filter gradient of down0_conva_conv (dW = conv(x, dy), its kernel
  // dy and its input x split along the depth 4 ways like the forward conv, its result the kernel's
  // shape, replicated). Selecting it shows the selected device's slab of x and the 1-row halos its
  // neighbours send, captioned as a partial filter gradient whose partial sums are all-reduced;
  // clicking a device at the edge shows its one-sided halo. The mesh view is grabbed to a PNG for
  // a person to look at.
  void meshViewShowsTheFilterGradientHalo() {
    MainWindow w;
    QString error;
    QVERIFY2(OpenExample(w, "unet3d", &error), qPrintable(error));
    const std::string name = "backward_down0_conva_dconv_kernel";
    const Instruction* conv = w.document()->findInstruction(QString::fromStdString(name));
    QVERIFY(conv);
    QCOMPARE(conv->opcode(), Opcode::kConvolution);
    QVERIFY(w.selectInstruction(QString::fromStdString(name)));
    QVERIFY(w.showView("mesh"));
    MeshView* mesh = w.meshView();
    QTRY_VERIFY(mesh->haloShown());
    const auto& halo = mesh->haloView()->halo();
    QVERIFY(halo);
    QCOMPARE(halo->conv, name);
    QCOMPARE(halo->input, conv->operand(0)->name());
    QCOMPARE(halo->kernel, conv->operand(1)->name());
    QVERIFY(halo->partial_sums());
    QCOMPARE(halo->dims.size(), size_t{1});
    const HaloDim& d = halo->dims[0];
    QCOMPARE(d.split, HaloSplit::kKernel);
    QCOMPARE(d.input_dim, int64_t{1});  // the depth
    QCOMPARE(d.tiles, int64_t{4});
    QCOMPARE(d.full, int64_t{128});
    QCOMPARE(d.shard, int64_t{32});
    QCOMPARE(d.window, int64_t{128});  // the output gradient's depth: every tap
    QCOMPARE(d.tile, int64_t{1});      // the default: neighbours on both sides
    QCOMPARE(d.kernel_begin, int64_t{32});
    QCOMPARE(d.kernel_end, int64_t{64});
    const int64_t device = halo->device;
    QCOMPARE(mesh->grid()->selectedDevice(), device);
    QCOMPARE(d.slabs.size(), size_t{3});
    QCOMPARE(d.slabs[0].begin, int64_t{31});
    QCOMPARE(d.slabs[0].width(), int64_t{1});
    QCOMPARE(d.slabs[1].from_device, device);
    QCOMPARE(d.slabs[1].begin, int64_t{32});
    QCOMPARE(d.slabs[1].end, int64_t{64});
    QCOMPARE(d.slabs[2].begin, int64_t{64});
    QCOMPARE(d.slabs[2].width(), int64_t{1});
    // The neighbours hold tiles 0 and 2 of the input's depth (the handler exchanges along x).
    const auto xs = w.document()->sharding(conv->operand(0)->id());
    QVERIFY(xs);
    QCOMPARE(xs->TileIndexForDevice(device).at(1), int64_t{1});
    QCOMPARE(xs->TileIndexForDevice(d.slabs[0].from_device).at(1), int64_t{0});
    QCOMPARE(xs->TileIndexForDevice(d.slabs[2].from_device).at(1), int64_t{2});
    const QStringList labels = mesh->haloView()->slabLabels();
    QCOMPARE(labels.size(), 3);
    QCOMPARE(labels[0], QString("1 row from device %1").arg(d.slabs[0].from_device));
    QCOMPARE(labels[1], QString("rows 32\u201363: device %1's own").arg(device));
    QCOMPARE(labels[2], QString("1 row from device %1").arg(d.slabs[2].from_device));
    QCOMPARE(DimCaption(*halo, d), QString("dim 1 of x: tile 1 of 4, 32 rows each; kernel split: taps 32\u201363 of 128"));
    // The caption says what the device computes and that the partial sums are all-reduced.
    auto* info = mesh->findChild<QLabel*>("haloInfo");
    QVERIFY(info);
    const QString text = info->text();
    QVERIFY2(text.contains(QString("Device <b>%1</b> computes a partial filter gradient").arg(device)), qPrintable(text));
    QVERIFY2(text.contains(QString("1 row from device %1").arg(d.slabs[0].from_device)), qPrintable(text));
    QVERIFY2(text.contains("all-reduced"), qPrintable(text));
    // At 1600x1000 the names fit on a line: the text as given, not broken at underscores.
    QVERIFY2(!text.contains(QChar(0x200B)), qPrintable(text));

    // What a person sees: the mesh view, grabbed (kept in the build's tests folder).
    DeviceGridWidget* grid = mesh->grid();
    QTRY_VERIFY(grid->isVisible() && grid->width() > 0);
    const QString out_dir = qEnvironmentVariable("SHARDSCOPE_REPORT_DIR", dir_.path());
    const QString png = out_dir + "/mesh-filter-gradient-halo.png";
    QTest::qWait(300);  // the dock's layout settles (the halo box was just shown)
    // The dock's whole scrolled content (the device grid and the halo box under it), not only
    // the part in view.
    auto* box = mesh->findChild<QWidget*>("haloBox");
    QVERIFY(box && box->parentWidget());
    QVERIFY(box->parentWidget()->grab().save(png));
    QVERIFY(QImage(png).width() > 0);

    // A click on the device holding tile 3 of the depth: a left halo only.
    int64_t edge = -1;
    for (int64_t dev = 0; dev < xs->NumDevices() && edge < 0; ++dev)
      if (xs->TileIndexForDevice(dev).at(1) == 3) edge = dev;
    QVERIFY(edge >= 0);
    QVERIFY(ClickDevice(mesh, edge));
    const HaloDim& e = mesh->haloView()->halo()->dims.at(0);
    QCOMPARE(e.split, HaloSplit::kKernel);
    QCOMPARE(e.tile, int64_t{3});
    QCOMPARE(e.left, int64_t{1});
    QCOMPARE(e.right, int64_t{0});
    QCOMPARE(e.slabs.size(), size_t{2});
    QCOMPARE(e.slabs[0].begin, int64_t{95});
    QCOMPARE(e.slabs[1].begin, int64_t{96});
    QCOMPARE(e.kernel_begin, int64_t{96});
    QCOMPARE(grid->selectedDevice(), edge);
    QVERIFY2(info->text().contains("none from the right (the array's edge)"), qPrintable(info->text()));
  }

  // At 1024x700 the mesh dock is about 300 px wide: its content follows the dock's width (rows
  // wrap, captions word-wrap) so the dock's scroll area needs no horizontal scroll bar and the halo
  // box's texts are whole — the caption over the halo's bar broken into lines that each fit, the
  // word-wrapped text above it inside the viewport. The filter-gradient conv's halo (the longest
  // caption) and a transformer tensor's per-dimension rows over the 4x4 mesh.
  void meshDockFitsItsWidthAt1024x700() {
    MainWindow w;
    QString error;
    QVERIFY2(OpenExample(w, "unet3d", &error, QSize(1024, 700)), qPrintable(error));
    QVERIFY(w.selectInstruction("backward_down0_conva_dconv_kernel"));
    QVERIFY(w.showView("halo"));
    MeshView* mesh = w.meshView();
    QTRY_VERIFY(mesh->haloShown());
    QTest::qWait(300);  // the default dock sizes are applied after the first show; the layout settles
    QCOMPARE(w.size(), QSize(1024, 700));
    auto* scroll = mesh->findChild<QScrollArea*>();
    QVERIFY(scroll && scroll->widget());
    QWidget* viewport = scroll->viewport();
    QVERIFY2(viewport->width() < 400, qPrintable(QString("viewport %1 px: not the narrow dock").arg(viewport->width())));
    // Every widget in the dock whose minimum is wider than the viewport, named when it fails.
    auto too_wide = [&] {
      QStringList out;
      for (QWidget* c : scroll->widget()->findChildren<QWidget*>())
        if (c->isVisibleTo(scroll->widget()) && c->minimumSizeHint().width() > viewport->width())
          out << QString("%1 (%2): %3").arg(c->objectName(), c->metaObject()->className()).arg(c->minimumSizeHint().width());
      return out.join("; ");
    };
    // Empty when the dock's content fits the viewport and no horizontal scroll bar shows.
    auto overflow = [&]() -> QString {
      if (scroll->widget()->minimumSizeHint().width() > viewport->width())
        return QString("content needs %1 px, viewport %2 px: %3")
            .arg(scroll->widget()->minimumSizeHint().width())
            .arg(viewport->width())
            .arg(too_wide());
      return scroll->horizontalScrollBar()->isVisible() ? QString("a horizontal scroll bar shows") : QString();
    };
    QVERIFY2(overflow().isEmpty(), qPrintable(overflow()));
    QVERIFY(scroll->widget()->width() <= viewport->width());
    // The text over the bar: inside the viewport, word-wrapped.
    auto* info = mesh->findChild<QLabel*>("haloInfo");
    QVERIFY(info && info->isVisible() && info->wordWrap());
    // The conv's name breaks at its underscores (zero-width breaks) exactly when it is wider than
    // the box; a narrower dock makes it so.
    const QString conv = "backward_down0_conva_dconv_kernel";
    auto name_wider_than_box = [&] {
      QFont bold = info->font();
      bold.setBold(true);
      return QFontMetrics(bold).horizontalAdvance(conv) > info->contentsRect().width();
    };
    const QString broken = QString("backward_") + QChar(0x200B) + "down0_";
    QCOMPARE(info->text().contains(broken), name_wider_than_box());
    auto* mesh_dock = w.findChild<QDockWidget*>("meshDock");
    QVERIFY(mesh_dock);
    const int dock_width = mesh_dock->width();
    w.resizeDocks({mesh_dock}, {260}, Qt::Horizontal);  // the dock's width before only the shown mode bounded the centre
    QTRY_VERIFY2_WITH_TIMEOUT(name_wider_than_box(), qPrintable(QString::number(info->contentsRect().width())), 10000);
    QTRY_VERIFY2_WITH_TIMEOUT(info->text().contains(broken), qPrintable(info->text()), 10000);
    QTRY_VERIFY_WITH_TIMEOUT(scroll->widget()->width() <= viewport->width(), 10000);
    w.resizeDocks({mesh_dock}, {dock_width}, Qt::Horizontal);
    QTRY_VERIFY_WITH_TIMEOUT(std::abs(mesh_dock->width() - dock_width) <= 4, 10000);
    QVERIFY2(info->mapTo(viewport, QPoint(info->width(), 0)).x() <= viewport->width(),
             qPrintable(QString("haloInfo ends at %1 px of %2").arg(info->mapTo(viewport, QPoint(info->width(), 0)).x()).arg(viewport->width())));
    // The caption over the bar: all of its text, in lines that each fit the widget.
    HaloSlabsWidget* halo = mesh->haloView();
    QVERIFY(halo->mapTo(viewport, QPoint(halo->width(), 0)).x() <= viewport->width());
    const QString caption = DimCaption(*halo->halo(), halo->halo()->dims.at(0));
    const QStringList lines = halo->captionLines(0);
    QVERIFY2(lines.size() >= 2, qPrintable(lines.join(" | ")));  // ~420 px of caption in ~270
    QCOMPARE(lines.join(' '), caption);
    const QFontMetrics fm(halo->captionFont());
    for (const QString& line : lines)
      QVERIFY2(fm.horizontalAdvance(line) <= halo->width() - 8, qPrintable(QString("%1: %2 px in %3").arg(line).arg(fm.horizontalAdvance(line)).arg(halo->width())));
    // What a person sees: the dock's whole scrolled content (kept in the build's tests folder).
    const QString out_dir = qEnvironmentVariable("SHARDSCOPE_REPORT_DIR", dir_.path());
    QVERIFY(scroll->widget()->grab().save(out_dir + "/mesh-dock-1024x700-halo.png"));
    QVERIFY2(halo->height() >= halo->heightForWidth(halo->width()),
             qPrintable(QString("%1 px high, needs %2").arg(halo->height()).arg(halo->heightForWidth(halo->width()))));

    // A tensor's per-dimension rows: the transformer's 4x4 mesh, a rank-4 activation split on two dims.
    QVERIFY2(w.openExample("transformer", &error), qPrintable(error));
    QVERIFY(WaitReady(w));
    QVERIFY(w.selectInstruction("layer0_residual1"));
    QVERIFY(w.showView("mesh"));
    QTRY_VERIFY(mesh->findChild<QWidget*>("dropDim0") != nullptr);
    QTest::qWait(300);
    QCOMPARE(w.document()->mesh().num_axes(), int64_t{2});
    QVERIFY2(overflow().isEmpty(), qPrintable(overflow()));
    // Each dimension's row inside the viewport, its axis buttons included.
    for (int d = 0; d < 3; ++d) {
      auto* b = mesh->findChild<QWidget*>(QString("dim%1axis1").arg(d));
      QVERIFY(b && b->isVisible());
      QVERIFY2(b->mapTo(viewport, QPoint(b->width(), 0)).x() <= viewport->width(), qPrintable(b->objectName()));
    }
    QVERIFY(scroll->widget()->grab().save(out_dir + "/mesh-dock-1024x700-tensor.png"));

    // The device grid inside the dock: a 4x16 mesh (16 tiles a row) and a 1-D mesh of 16 (which
    // wraps into rows) keep every tile inside the grid's width.
    auto grid_fits = [&](int devices) {
      DeviceGridWidget* grid = mesh->grid();
      if (static_cast<int>(grid->tiles().size()) != devices) return QString("%1 tiles, not %2").arg(grid->tiles().size()).arg(devices);
      for (int i = 0; i < devices; ++i)
        if (grid->tileRect(i).right() > grid->width()) return QString("tile %1 ends at %2 of %3").arg(i).arg(grid->tileRect(i).right()).arg(grid->width());
      if (grid->height() < grid->heightForWidth(grid->width())) return QString("grid cut at the bottom");
      if (scroll->widget()->minimumSizeHint().width() > viewport->width()) return QString("content needs %1 px").arg(scroll->widget()->minimumSizeHint().width());
      return QString();
    };
    QVERIFY(mesh->setAxisSize(1, 16));
    QVERIFY(WaitReady(w));
    QTRY_COMPARE(static_cast<int>(mesh->grid()->tiles().size()), 64);
    QTest::qWait(200);
    QVERIFY2(grid_fits(64).isEmpty(), qPrintable(grid_fits(64)));
    QVERIFY(mesh->grid()->grab().save(out_dir + "/mesh-dock-1024x700-grid-4x16.png"));
    QVERIFY(mesh->removeAxis(0));
    QVERIFY(WaitReady(w));
    QTRY_COMPARE(static_cast<int>(mesh->grid()->tiles().size()), 16);
    QTest::qWait(200);
    QVERIFY2(grid_fits(16).isEmpty(), qPrintable(grid_fits(16)));
    QVERIFY(mesh->grid()->tileRect(15).top() > mesh->grid()->tileRect(0).bottom());  // wrapped into rows
    QVERIFY(mesh->grid()->tileRect(0).width() >= 18);
    QVERIFY(mesh->grid()->grab().save(out_dir + "/mesh-dock-1024x700-grid-16.png"));
    QVERIFY(!scroll->horizontalScrollBar()->isVisible());
  }

  // The screenshots a person reads: the teaching panel on the dispatch, the mesh view on the conv
  // and on its filter gradient.
  void screenshots_data() {
    QTest::addColumn<QString>("size");
    QTest::newRow("1600x1000") << "1600x1000";
    QTest::newRow("1024x700") << "1024x700";
  }
  void screenshots() {
    if (!QFileInfo::exists(SHARDSCOPE_GUI_PATH)) QSKIP("the shardscope binary is not built (ninja shardscope)");
    QFETCH(QString, size);
    const QStringList wh = size.split('x');
    const QSize want(wh[0].toInt(), wh[1].toInt());
    QString why;
    const QString moe = dir_.filePath("moe-" + size + ".png");
    QCOMPARE(Screenshot({"--example", "moe-transformer", "--collective", "layer1_moe_dispatched", "--view", "teaching",
                         "--size", size},
                        moe, &why),
             want);
    QVERIFY2(why.isEmpty(), qPrintable(why));
    const QString unet = dir_.filePath("unet-" + size + ".png");
    QCOMPARE(Screenshot({"--example", "unet3d", "--select", "down0_conva_conv", "--view", "halo", "--size", size}, unet, &why),
             want);
    QVERIFY2(why.isEmpty(), qPrintable(why));
    const QString wgrad = dir_.filePath("unet-wgrad-" + size + ".png");
    QCOMPARE(Screenshot({"--example", "unet3d", "--select", "backward_down0_conva_dconv_kernel", "--view", "halo", "--size",
                         size},
                        wgrad, &why),
             want);
    QVERIFY2(why.isEmpty(), qPrintable(why));
    // Kept for a person to look at when SHARDSCOPE_KEEP_SCREENSHOTS names a folder.
    const QString keep = qEnvironmentVariable("SHARDSCOPE_KEEP_SCREENSHOTS");
    if (!keep.isEmpty()) {
      QFile::copy(moe, keep + "/moe-" + size + ".png");
      QFile::copy(unet, keep + "/unet-" + size + ".png");
      QFile::copy(wgrad, keep + "/unet-wgrad-" + size + ".png");
    }
  }
};

QTEST_MAIN(TestGuiMoeConv)
#include "test_gui_moe_conv.moc"
