// Annotating through the mesh view: the graph items show the propagated shardings (recoloured,
// never laid out again), the device grid shows who holds what, and every edit undoes and redoes.
#include <QApplication>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QHelpEvent>
#include <QMimeData>
#include <QSignalSpy>
#include <QUndoStack>
#include <QtTest>

#include "app/pipeline/sources.h"
#include "core/sharding/mesh.h"
#include "gui_test_support.h"
#include "views/document_model.h"
#include "views/graph_layout.h"
#include "views/graph_view.h"
#include "views/mesh_view.h"
#include "views/sharding_style.h"

using namespace shardscope;
using namespace shardscope::views;
using shardscope::gui::Session;
using shardscope::gui::WaitForLayout;
using shardscope::gui::WaitUntilIdle;

namespace {

// Headless unless told otherwise.
// a[8,16] x b[16,32] -> d[8,32]; r = d + d. num_partitions=4 gives the 2x2 mesh X=2,Y=2.
const char* kDotModule = R"(HloModule dotmod, num_partitions=4

ENTRY main {
  a = f32[8,16] parameter(0)
  b = f32[16,32] parameter(1)
  d = f32[8,32] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT r = f32[8,32] add(d, d)
}
)";

HloSharding Shard(const DeviceMesh& mesh, int64_t rank, std::vector<std::vector<int64_t>> dims) {
  AxisAssignment a;
  a.dim_axes = std::move(dims);
  auto s = MeshShard(rank, mesh, a);
  if (!s.ok()) qFatal("MeshShard: %s", s.error().message.c_str());
  return *s;
}

}  // namespace

class TestGuiMesh : public QObject {
  Q_OBJECT

 private:
  Session* session_ = nullptr;
  DocumentModel* doc_ = nullptr;
  GraphView* graph_ = nullptr;
  MeshView* mesh_ = nullptr;

  int64_t Id(const char* name) const {
    const Instruction* inst = doc_->findInstruction(name);
    if (!inst) qFatal("no instruction %s", name);
    return inst->id();
  }
  GraphNodeItem* Node(const char* name) const { return graph_->nodeForInstruction(Id(name)); }
  // What the pointer resting on a node shows: the view writes a node's tooltip when it is asked for.
  QString HoverText(GraphNodeItem* node) const {
    const QPoint at = graph_->mapFromScene(node->sceneBoundingRect().center());
    QHelpEvent event(QEvent::ToolTip, at, graph_->viewport()->mapToGlobal(at));
    QApplication::sendEvent(graph_->viewport(), &event);
    return node->toolTip();
  }

 private slots:
  void init() {
    session_ = new Session;
    doc_ = session_->document();
    graph_ = new GraphView;
    mesh_ = new MeshView;
    graph_->setJobTracker(session_->jobs());
    graph_->setDocument(doc_);
    mesh_->setDocument(doc_);
    graph_->resize(800, 600);
    mesh_->resize(420, 800);
    Status st = session_->loadHloText(kDotModule, "dot.hlo");
    QVERIFY2(st.ok(), st.error().message.c_str());
    QVERIFY(WaitForLayout(*graph_));
    QVERIFY(WaitUntilIdle(*session_));
  }

  void cleanup() {
    delete mesh_;
    delete graph_;
    delete session_;
  }

  void meshGuessedFromPartitions() {
    QCOMPARE(QString::fromStdString(doc_->mesh().ToString()), QString("X=2,Y=2"));
    QCOMPARE(graph_->nodes().size(), 4);  // a, b, d, r: no scopes, nothing collapsed
    for (GraphNodeItem* n : graph_->nodes()) QVERIFY(!n->sharding().has_value());
  }

  // XLA's own test modules often leave num_partitions out: the devices the shardings name decide.
  void meshGuessedFromShardingsWithoutNumPartitions() {
    const char* text = R"(HloModule conv

ENTRY entry {
  p = f32[8,16] parameter(0), sharding={devices=[2,3]<=[6]}
  q = f32[8,16] parameter(1), sharding={maximal device=7}
  ROOT a = f32[8,16] add(p, q), sharding={replicated}
}
)";
    auto model = pipeline::ParseModel(text, "conv.hlo");
    QVERIFY(model.ok());
    QCOMPARE(model->module->num_partitions, int64_t{1});
    // Device 7 is named, so 8 devices: no sharding spans all of them, a near-square 2-D mesh.
    QCOMPARE(QString::fromStdString(model->mesh.ToString()), QString("X=2,Y=4"));
    const std::string without_maximal = std::string(text).replace(std::string(text).find("maximal device=7"), 16, "replicated");
    auto six = pipeline::ParseModel(without_maximal, "conv.hlo");
    QVERIFY(six.ok());
    QCOMPARE(QString::fromStdString(pipeline::GuessMesh(*six->module).ToString()), QString("X=2,Y=3"));  // the [2,3] tiling
  }

  void annotateThroughMeshViewPropagatesToGraph() {
    const int layouts = graph_->layoutsApplied();
    const int recolours = graph_->recolourCount();
    const DeviceMesh mesh = doc_->mesh();

    // a: split dim 0 along X (click the X button of dim 0).
    doc_->select(Id("a"));
    QVERIFY(mesh_->toggleAxis(0, 0));
    QVERIFY(WaitUntilIdle(*session_));
    const HloSharding a_x = Shard(mesh, 2, {{0}, {}});
    QCOMPARE(*Node("a")->sharding(), a_x);
    QVERIFY(Node("a")->look().user);
    QCOMPARE(Node("a")->look().sharding_line, QString("[I_X, J]"));
    // Propagation carries X to the dot's rows and to the add.
    QCOMPARE(*Node("d")->sharding(), a_x);
    QCOMPARE(*Node("r")->sharding(), a_x);
    QVERIFY(!Node("d")->look().user);
    QCOMPARE(doc_->origin(Id("d")), TensorOrigin::kInferred);
    // Same sharding, same colour; the user's node has the thick border, the inferred one not.
    QCOMPARE(Node("d")->look().fill, Node("a")->look().fill);
    QCOMPARE(Node("d")->look().fill, ShardingFillColor(a_x, graph_->palette()));

    // b: typed in named-axis notation, columns along Y.
    doc_->select(Id("b"));
    QVERIFY(mesh_->applyNamedAxes("[I, J_Y]"));
    QVERIFY(WaitUntilIdle(*session_));
    QCOMPARE(*Node("b")->sharding(), Shard(mesh, 2, {{}, {1}}));
    // The dot merges lhs rows (X) and rhs columns (Y): d[I_X, J_Y], fully tiled over 4 devices.
    const HloSharding d_xy = Shard(mesh, 2, {{0}, {1}});
    QCOMPARE(*Node("d")->sharding(), d_xy);
    QCOMPARE(*Node("r")->sharding(), d_xy);
    QCOMPARE(Node("r")->look().sharding_line, QString("[I_X, J_Y]"));
    // The recolour left the tooltip out of date; resting the pointer on the node writes it afresh.
    QVERIFY(!Node("r")->toolTipCurrent());
    QVERIFY(HoverText(Node("r")).contains("f32[4,16]"));  // per-device shape on hover
    QVERIFY(Node("r")->toolTip().contains("[I_X, J_Y]"));
    QVERIFY(Node("r")->toolTipCurrent());

    // The "why" chain of d goes back to an annotation.
    const auto why = doc_->why(Id("d"));
    QVERIFY(!why.empty());
    QCOMPARE(why.front().instruction, doc_->findInstruction("d"));  // this document's instructions
    QCOMPARE(why.back().origin.direction, prop::Direction::kAnnotation);
    QVERIFY(why.back().instruction == doc_->findInstruction("a") || why.back().instruction == doc_->findInstruction("b"));

    // Annotation edits recolour; they never lay out again.
    QCOMPARE(graph_->layoutsApplied(), layouts);
    QVERIFY(graph_->recolourCount() > recolours);
  }

  void deviceGridShowsShardsAndReplication() {
    const DeviceMesh mesh = doc_->mesh();
    doc_->select(Id("a"));
    QVERIFY(mesh_->toggleAxis(0, 0));  // a[I_X, J]: replicated along Y
    QVERIFY(WaitUntilIdle(*session_));
    DeviceGridWidget* grid = mesh_->grid();
    QCOMPARE(grid->tiles().size(), size_t{4});
    QCOMPARE(grid->distinctShards(), 2);
    // Devices 0,1 (X=0) hold rows 0:4, devices 2,3 (X=1) rows 4:8; each shard twice.
    QCOMPARE(grid->tiles()[0].ranges, QString("0:4, 0:16"));
    QCOMPARE(grid->tiles()[1].shard, grid->tiles()[0].shard);
    QCOMPARE(grid->tiles()[3].ranges, QString("4:8, 0:16"));
    QVERIFY(grid->tiles()[2].shard != grid->tiles()[0].shard);
    QCOMPARE(grid->tiles()[0].bytes, int64_t{4 * 16 * 4});

    // Drag Y onto dim 1: a[I_X, J_Y], four distinct shards of 4x8 floats.
    QVERIFY(mesh_->assignAxis(1, 1));
    QVERIFY(WaitUntilIdle(*session_));
    QCOMPARE(*doc_->annotation(Id("a")), Shard(mesh, 2, {{0}, {1}}));
    QCOMPARE(grid->distinctShards(), 4);
    QCOMPARE(grid->tiles()[1].ranges, QString("0:4, 8:16"));
    QCOMPARE(grid->tiles()[1].bytes, int64_t{4 * 8 * 4});
    // Both axes on dim 0 (I_XY): rows split 4 ways.
    QVERIFY(mesh_->applyNamedAxes("[I_XY, J]"));
    QCOMPARE(*doc_->annotation(Id("a")), Shard(mesh, 2, {{0, 1}, {}}));
    QCOMPARE(grid->tiles()[3].ranges, QString("6:8, 0:16"));
  }

  void undoRedo() {
    const DeviceMesh mesh = doc_->mesh();
    QUndoStack* stack = doc_->undoStack();
    QCOMPARE(stack->count(), 0);
    doc_->select(Id("a"));
    QVERIFY(mesh_->toggleAxis(0, 0));
    QVERIFY(mesh_->toggleAxis(1, 1));
    QCOMPARE(stack->count(), 2);
    QCOMPARE(*doc_->annotation(Id("a")), Shard(mesh, 2, {{0}, {1}}));
    stack->undo();
    QCOMPARE(*doc_->annotation(Id("a")), Shard(mesh, 2, {{0}, {}}));
    stack->undo();
    QVERIFY(!doc_->annotation(Id("a")).has_value());
    QVERIFY(WaitUntilIdle(*session_));
    QVERIFY(!Node("a")->sharding().has_value());
    QVERIFY(!Node("d")->sharding().has_value());
    stack->redo();
    stack->redo();
    QVERIFY(WaitUntilIdle(*session_));
    QCOMPARE(*Node("a")->sharding(), Shard(mesh, 2, {{0}, {1}}));

    // A rejected edit leaves no undo step.
    QVERIFY(!mesh_->applyNamedAxes("[I_Q, J]"));
    QCOMPARE(stack->count(), 2);

    // Mesh edits are undoable and re-express annotations over the new mesh (by axis name).
    QVERIFY(mesh_->setAxisSize(0, 4));  // X=4,Y=2
    QCOMPARE(QString::fromStdString(doc_->mesh().ToString()), QString("X=4,Y=2"));
    const DeviceMesh bigger = doc_->mesh();
    QCOMPARE(*doc_->annotation(Id("a")), Shard(bigger, 2, {{0}, {1}}));
    QCOMPARE(doc_->annotation(Id("a"))->NumTiles(), int64_t{8});
    stack->undo();
    QCOMPARE(QString::fromStdString(doc_->mesh().ToString()), QString("X=2,Y=2"));
    QCOMPARE(*doc_->annotation(Id("a")), Shard(mesh, 2, {{0}, {1}}));
    // Renaming an axis keeps the annotation on the renamed axis.
    QVERIFY(mesh_->setAxisName(1, "model"));
    QCOMPARE(QString::fromStdString(doc_->mesh().ToString()), QString("X=2,model=2"));
    QCOMPARE(*doc_->annotation(Id("a")), Shard(doc_->mesh(), 2, {{0}, {1}}));
    QVERIFY(!mesh_->setAxisName(0, "model"));  // duplicate name refused
    stack->undo();
    QCOMPARE(QString::fromStdString(doc_->mesh().ToString()), QString("X=2,Y=2"));
  }

  void layoutIsCachedPerModule() {
    // Loading the same text again is a new module: one new layout. Re-showing the same structure
    // (collapse/expand round trip) is served from the cache.
    const int runs = LayoutCache::instance().layoutsRun();
    auto* second = new GraphView;
    second->setJobTracker(session_->jobs());
    second->setDocument(doc_);
    QVERIFY(WaitForLayout(*second));
    QCOMPARE(LayoutCache::instance().layoutsRun(), runs);  // same module + structure: cached
    QCOMPARE(second->nodes().size(), 4);
    delete second;
  }

  // The drop rows take what an axis chip carries, through real drag-enter and drop events.
  void dragAxisChipOntoDimension() {
    const DeviceMesh mesh = doc_->mesh();
    doc_->select(Id("b"));
    QCoreApplication::processEvents();
    QVERIFY(mesh_->findChild<QWidget*>("axisChip1") != nullptr);
    auto drop = [&](const char* row_name, int axis) {
      auto* row = mesh_->findChild<QWidget*>(row_name);
      if (!row) return false;
      std::unique_ptr<QMimeData> mime(MeshView::axisMimeData(axis));
      const QPointF at(row->width() / 2.0, row->height() / 2.0);
      QDragEnterEvent enter(at.toPoint(), Qt::MoveAction, mime.get(), Qt::LeftButton, Qt::NoModifier);
      QApplication::sendEvent(row, &enter);
      if (!enter.isAccepted()) return false;
      QDropEvent dropped(at, Qt::MoveAction, mime.get(), Qt::LeftButton, Qt::NoModifier);
      QApplication::sendEvent(row, &dropped);
      QCoreApplication::processEvents();  // the rows are rebuilt after the edit
      return dropped.isAccepted();
    };
    // Y (axis 1) dropped on dim 1 of b: b[I, J_Y].
    QVERIFY(drop("dropDim1", 1));
    QVERIFY(WaitUntilIdle(*session_));
    QCOMPARE(*doc_->annotation(Id("b")), Shard(mesh, 2, {{}, {1}}));
    // X dropped on dim 0 as well: b[I_X, J_Y].
    QVERIFY(drop("dropDim0", 0));
    QCOMPARE(*doc_->annotation(Id("b")), Shard(mesh, 2, {{0}, {1}}));
    // Moving Y from dim 1 to dim 0: b[I_XY, J].
    QVERIFY(drop("dropDim0", 1));
    QCOMPARE(*doc_->annotation(Id("b")), Shard(mesh, 2, {{0, 1}, {}}));
    // X onto the replicate row: b[I_Y, J], Y stays.
    QVERIFY(drop("dropReplicate", 0));
    QCOMPARE(*doc_->annotation(Id("b")), Shard(mesh, 2, {{1}, {}}));
    // Each drop was one undoable edit.
    QCOMPARE(doc_->undoStack()->count(), 4);
    doc_->undoStack()->undo();
    QCOMPARE(*doc_->annotation(Id("b")), Shard(mesh, 2, {{0, 1}, {}}));
    // Something that is not an axis is refused at drag-enter.
    auto* row = mesh_->findChild<QWidget*>("dropDim0");
    QVERIFY(row);
    QMimeData text;
    text.setText("X");
    QDragEnterEvent enter(QPoint(2, 2), Qt::MoveAction, &text, Qt::LeftButton, Qt::NoModifier);
    enter.setAccepted(false);
    QApplication::sendEvent(row, &enter);
    QVERIFY(!enter.isAccepted());
  }
};

QTEST_MAIN(TestGuiMesh)
#include "test_gui_mesh.moc"
