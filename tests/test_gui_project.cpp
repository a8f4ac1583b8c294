// Project files: save/load round trip (module, mesh, annotations, selection), atomic writes, and
// errors a person can act on (FILE:LINE:COLUMN for HLO and JSON).
#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QJsonArray>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QUndoStack>
#include <QtTest>

#include "core/ir/hlo_text.h"
#include "core/sharding/mesh.h"
#include "app/pipeline/sources.h"
#include "gui_test_support.h"
#include "views/document_model.h"

using namespace shardscope;
using namespace shardscope::views;
using shardscope::gui::Session;
using shardscope::gui::WaitUntilIdle;

namespace {

const char* kModule = R"(HloModule proj, num_partitions=8

ENTRY main {
  x = f32[16,64] parameter(0)
  w = f32[64,32] parameter(1)
  y = f32[16,32] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = f32[16,32] tanh(y)
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

class TestGuiProject : public QObject {
  Q_OBJECT

 private slots:
  void roundTrip() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    Session doc;
    QVERIFY(doc.loadHloText(kModule, "proj.hlo").ok());
    QCOMPARE(QString::fromStdString(doc.document()->mesh().ToString()), QString("X=2,Y=4"));
    // A 3-axis mesh with a non-default name, two annotations, a selection.
    auto mesh = DeviceMesh::Parse("data=2,model=2,pipe=2");
    QVERIFY(mesh.ok());
    QVERIFY(doc.document()->setMesh(*mesh));
    const Instruction* x = doc.document()->findInstruction("x");
    const Instruction* w = doc.document()->findInstruction("w");
    QVERIFY(x && w);
    const HloSharding xs = Shard(*mesh, 2, {{0}, {}});       // x[I_data, J], replicated over model, pipe
    const HloSharding ws = Shard(*mesh, 2, {{}, {1, 2}});    // w[I, J_model.pipe]
    QVERIFY(doc.document()->annotate(x->id(), xs));
    QVERIFY(doc.document()->annotate(w->id(), ws));
    doc.document()->select(w->id());
    QVERIFY(doc.document()->isModified());

    const QString path = dir.filePath("model.shardscope");
    Status st = doc.saveProject(path);
    QVERIFY2(st.ok(), st.error().message.c_str());
    QVERIFY(!doc.document()->isModified());
    // Atomic write: only the project itself is left in the folder.
    QCOMPARE(QDir(dir.path()).entryList(QDir::Files), QStringList{"model.shardscope"});
    // The file is readable JSON naming what it holds.
    QFile f(path);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonObject root = QJsonDocument::fromJson(f.readAll()).object();
    QCOMPARE(root["format"].toString(), QString("shardscope-project"));
    QCOMPARE(root["mesh"].toString(), QString("data=2,model=2,pipe=2"));
    QCOMPARE(root["annotations"].toArray().size(), 2);
    QCOMPARE(root["selected"].toString(), QString("w"));

    Session loaded;
    st = loaded.loadProject(path);
    QVERIFY2(st.ok(), st.error().message.c_str());
    std::string why;
    QVERIFY2(ModulesEqual(*doc.document()->module(), *loaded.document()->module(), &why), why.c_str());
    QVERIFY(loaded.document()->mesh() == *mesh);
    QCOMPARE(loaded.document()->annotations().size(), size_t{2});
    QCOMPARE(*loaded.document()->annotation(loaded.document()->findInstruction("x")->id()), xs);
    QCOMPARE(*loaded.document()->annotation(loaded.document()->findInstruction("w")->id()), ws);
    QCOMPARE(loaded.document()->selected(), loaded.document()->findInstruction("w")->id());
    QCOMPARE(loaded.document()->filePath(), path);
    QVERIFY(!loaded.document()->isModified());
    QCOMPARE(loaded.document()->undoStack()->count(), 0);
    // The same project opened off the GUI thread (File > Open): the same document.
    Session background;
    QSignalSpy opened(&background, &Session::loadFinished);
    background.requestLoadFile(path);
    QVERIFY(background.loadBusy());
    QVERIFY(opened.wait(30000));
    QVERIFY2(opened.last().at(1).toBool(), qPrintable(opened.last().at(2).toString()));
    QVERIFY2(ModulesEqual(*doc.document()->module(), *background.document()->module(), &why), why.c_str());
    QVERIFY(background.document()->mesh() == *mesh);
    QCOMPARE(*background.document()->annotation(background.document()->findInstruction("w")->id()), ws);
    QCOMPARE(background.document()->selected(), background.document()->findInstruction("w")->id());
    QCOMPARE(background.document()->filePath(), path);
    QVERIFY(!background.document()->isModified());
    // A broken project: FILE:LINE:COLUMN and nothing replaced.
    const QString broken = dir.filePath("broken.shardscope");
    {
      QFile out(broken);
      QVERIFY(out.open(QIODevice::WriteOnly));
      out.write("{\n  \"format\": \"shardscope-project\",\n  \"mesh\": [oops\n}\n");
    }
    background.requestLoadFile(broken);
    QVERIFY(opened.wait(30000));
    QVERIFY(!opened.last().at(1).toBool());
    QVERIFY2(opened.last().at(2).toString().startsWith(broken + ":3:"), qPrintable(opened.last().at(2).toString()));
    QCOMPARE(background.document()->filePath(), path);
    QCOMPARE(background.document()->annotations().size(), size_t{2});
    // Saving the loaded project again gives the same bytes.
    const QString again = dir.filePath("again.shardscope");
    QVERIFY(loaded.saveProject(again).ok());
    QFile a(path), b(again);
    QVERIFY(a.open(QIODevice::ReadOnly) && b.open(QIODevice::ReadOnly));
    QCOMPARE(a.readAll(), b.readAll());
  }

  void annotatedModuleTextCarriesShardings() {
    Session doc;
    QVERIFY(doc.loadHloText(kModule, "proj.hlo").ok());
    const Instruction* x = doc.document()->findInstruction("x");
    QVERIFY(doc.document()->annotate(x->id(), Shard(doc.document()->mesh(), 2, {{0}, {1}})));
    // Re-importing the exported text restores the annotation (shardings on instructions are the
    // user's annotations).
    Session again;
    QVERIFY(again.loadHloText(doc.document()->moduleText(false), "export.hlo").ok());
    QCOMPARE(again.document()->annotations().size(), size_t{1});
    QCOMPARE(*again.document()->annotation(again.document()->findInstruction("x")->id()), Shard(doc.document()->mesh(), 2, {{0}, {1}}));
  }

  void errorsNameTheFileAndPosition() {
    QTemporaryDir dir;
    Session doc;
    QVERIFY(doc.loadHloText(kModule, "proj.hlo").ok());
    const quint64 generation = doc.document()->moduleGeneration();

    // HLO syntax error: FILE:LINE:COLUMN, document unchanged.
    const QString bad_hlo = dir.filePath("bad.hlo");
    QFile f(bad_hlo);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("HloModule m\n\nENTRY main {\n  a = f32[4] parameter(0)\n  ROOT b = f32[4] frobnicate(a, \n}\n");
    f.close();
    Status st = doc.loadHloFile(bad_hlo);
    QVERIFY(!st.ok());
    const QString msg = QString::fromStdString(st.error().message);
    QVERIFY2(QRegularExpression("bad\\.hlo:\\d+:\\d+: ").match(msg).hasMatch(), qPrintable(msg));
    QCOMPARE(doc.document()->moduleGeneration(), generation);
    QVERIFY(doc.document()->findInstruction("x"));

    // Broken JSON: FILE:LINE:COLUMN of the JSON error.
    st = doc.loadProjectJson("{\n  \"format\": \"shardscope-project\",\n  \"version\": 1,\n  oops\n}", "p.shardscope");
    QVERIFY(!st.ok());
    QVERIFY2(QString::fromStdString(st.error().message).startsWith("p.shardscope:4:"), st.error().message.c_str());

    // Not a project, a newer version, an unknown instruction.
    st = doc.loadProjectJson("{\"format\": \"something-else\"}", "q.json");
    QVERIFY(!st.ok());
    QVERIFY(QString::fromStdString(st.error().message).contains("not a ShardScope project"));
    QJsonObject root = QJsonDocument::fromJson(doc.projectJson()).object();
    root["version"] = 99;
    st = doc.loadProjectJson(QJsonDocument(root).toJson(), "new.shardscope");
    QVERIFY(QString::fromStdString(st.error().message).contains("newer ShardScope"));
    root["version"] = 1;
    QJsonArray anns;
    anns.append(QJsonObject{{"instruction", "nope"}, {"sharding", "{replicated}"}});
    root["annotations"] = anns;
    st = doc.loadProjectJson(QJsonDocument(root).toJson(), "ann.shardscope");
    QVERIFY(!st.ok());
    QVERIFY(QString::fromStdString(st.error().message).contains("\"nope\""));
    QCOMPARE(doc.document()->moduleGeneration(), generation);  // none of these replaced the document

    // Saving somewhere unwritable fails with the path in the message.
    st = doc.saveProject("/nonexistent-dir/x.shardscope");
    QVERIFY(!st.ok());
    QVERIFY(QString::fromStdString(st.error().message).contains("/nonexistent-dir/x.shardscope"));
  }

  // Opening from the File menu: read and parsed on the worker; errors leave the open module alone.
  void loadsInTheBackground() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString good = dir.filePath("good.hlo"), bad = dir.filePath("bad.hlo");
    {
      QFile f(good);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(kModule);
    }
    {
      QFile f(bad);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write("HloModule broken\n\nENTRY main {\n  x = f32[4] parameter(0)\n  ROOT y = f32[4 add(x, x)\n}\n");
    }
    Session doc;
    QVERIFY(doc.loadExample(QString::fromStdString(pipeline::DefaultExample())).ok());
    const std::string example = doc.document()->module()->name();
    QSignalSpy finished(&doc, &Session::loadFinished);

    doc.requestLoadFile(bad);
    QVERIFY(doc.loadBusy());
    QVERIFY(finished.wait(30000));
    QCOMPARE(finished.last().at(1).toBool(), false);
    const QString message = finished.last().at(2).toString();
    QVERIFY2(message.startsWith(bad + ":5:"), qPrintable(message));  // FILE:LINE:COLUMN
    QCOMPARE(doc.document()->module()->name(), example);                          // nothing lost
    QVERIFY(!doc.loadBusy());

    doc.requestLoadFile(good);
    QVERIFY(finished.wait(30000));
    QCOMPARE(finished.last().at(1).toBool(), true);
    QCOMPARE(doc.document()->module()->name(), std::string("proj"));
    QCOMPARE(doc.document()->filePath(), good);
    QCOMPARE(QString::fromStdString(doc.document()->mesh().ToString()), QString("X=2,Y=4"));
    QVERIFY(doc.document()->findInstruction("w") != nullptr);

    // Cancelled: the result is dropped when it arrives.
    QVERIFY(doc.loadExample(QString::fromStdString(pipeline::DefaultExample())).ok());
    finished.clear();
    doc.requestLoadFile(good);
    doc.cancelLoad();
    QVERIFY(!doc.loadBusy());
    QVERIFY(!finished.wait(1000));
    QCOMPARE(doc.document()->module()->name(), example);

    // A missing file.
    doc.requestLoadFile(dir.filePath("missing.hlo"));
    QVERIFY(finished.wait(30000));
    QCOMPARE(finished.last().at(1).toBool(), false);
    QVERIFY(finished.last().at(2).toString().contains("cannot open"));
  }
};

QTEST_MAIN(TestGuiProject)
#include "test_gui_project.moc"
