#include "app/gui/project_file.h"

#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSaveFile>

#include "core/ir/hlo_text.h"
#include "views/document_model.h"

namespace shardscope::gui {


namespace {

constexpr const char* kProjectFormat = "shardscope-project";
constexpr int kProjectVersion = 1;

QString Q(const std::string& s) { return QString::fromStdString(s); }

}  // namespace

bool IsProjectFile(const QString& path) {
  const QString suffix = QFileInfo(path).suffix().toLower();
  return suffix == "shardscope" || suffix == "json";
}

QByteArray ProjectJson(const views::DocumentModel& doc) {
  QJsonObject root;
  root["format"] = kProjectFormat;
  root["version"] = kProjectVersion;
  if (const Module* module = doc.module()) {
    QJsonObject src;
    src["kind"] = doc.sourceKind();
    src["source"] = doc.source();
    root["source"] = src;
    root["mesh"] = Q(doc.mesh().ToString());
    QJsonArray order;
    for (int64_t d : doc.mesh().device_order()) order.append(static_cast<qint64>(d));
    root["mesh_devices"] = order;
    root["module"] = Q(PrintHloModule(*module));  // no shardings: the annotations are listed below
    QJsonArray anns;
    for (const auto& [id, s] : doc.annotations()) {
      const Instruction* inst = doc.instruction(id);
      if (!inst) continue;
      QJsonObject a;
      a["instruction"] = doc.qualifiedName(inst);
      a["sharding"] = Q(s.ToString());
      if (inst->shape().IsArray()) {
        auto named = ToNamedAxes(s, inst->shape().rank(), doc.mesh(), inst->name());
        if (named.ok()) a["named"] = Q(*named);
      }
      anns.append(a);
    }
    root["annotations"] = anns;
    if (const Instruction* sel = doc.instruction(doc.selected())) root["selected"] = doc.qualifiedName(sel);
  }
  return QJsonDocument(root).toJson(QJsonDocument::Indented);
}

Result<ParsedProject> ParseProject(const QByteArray& json, const QString& where) {
  auto fail = [&](const QString& msg) { return Error((where + ": " + msg).toStdString()); };
  QJsonParseError perr;
  const QJsonDocument doc = QJsonDocument::fromJson(json, &perr);
  if (doc.isNull()) {
    // Translate the byte offset into line:column for the message.
    int line = 1, col = 1;
    for (int i = 0; i < perr.offset && i < json.size(); ++i) {
      if (json[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return Error(QString("%1:%2:%3: error: not valid JSON: %4").arg(where).arg(line).arg(col)
                     .arg(perr.errorString()).toStdString());
  }
  const QJsonObject root = doc.object();
  if (root["format"].toString() != kProjectFormat) return fail("not a ShardScope project (format is not \"shardscope-project\")");
  if (root["version"].toInt() > kProjectVersion) {
    return fail(QString("written by a newer ShardScope (project version %1; this one reads up to %2)")
                    .arg(root["version"].toInt()).arg(kProjectVersion));
  }
  auto parsed = ParseHloModule(root["module"].toString().toStdString(), (where + "#module").toStdString());
  if (!parsed.ok()) return fail("the embedded module does not parse: " + Q(parsed.error().message));
  auto mesh = DeviceMesh::Parse(root["mesh"].toString().toStdString());
  if (!mesh.ok()) return fail("bad mesh \"" + root["mesh"].toString() + "\": " + Q(mesh.error().message));
  ParsedProject p;
  p.mesh = *mesh;
  const QJsonArray order = root["mesh_devices"].toArray();
  if (!order.isEmpty()) {
    std::vector<int64_t> devices;
    for (const auto& v : order) devices.push_back(v.toInteger());
    if (static_cast<int64_t>(devices.size()) != p.mesh.num_devices()) {
      return fail(QString("mesh_devices lists %1 devices but the mesh has %2").arg(devices.size()).arg(p.mesh.num_devices()));
    }
    p.mesh = DeviceMesh(p.mesh.axes(), devices);
  }
  p.module = std::move(parsed).value();
  // The annotations go onto the module's instructions (the document takes them from there).
  for (const auto& v : root["annotations"].toArray()) {
    const QJsonObject a = v.toObject();
    const QString name = a["instruction"].toString();
    Instruction* inst = p.module->FindInstruction(name.toStdString());
    if (!inst) return fail("annotation for unknown instruction \"" + name + "\"");
    auto s = HloSharding::Parse(a["sharding"].toString().toStdString());
    if (!s.ok()) return fail("bad sharding for \"" + name + "\": " + Q(s.error().message));
    inst->set_sharding(*s);
  }
  const QJsonObject src = root["source"].toObject();
  p.source_kind = src["kind"].toString();
  p.source = src["source"].toString();
  if (root.contains("selected")) p.selected = root["selected"].toString();
  return p;
}

Result<ParsedProject> ReadProject(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) {
    return Error(QString("%1: cannot open: %2").arg(path, f.errorString()).toStdString());
  }
  return ParseProject(f.readAll(), path);
}

Status WriteProject(const views::DocumentModel& doc, const QString& path) {
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly)) {
    return Error(QString("%1: cannot write: %2").arg(path, f.errorString()).toStdString());
  }
  const QByteArray json = ProjectJson(doc);
  if (f.write(json) != json.size() || !f.commit()) {
    return Error(QString("%1: cannot write: %2").arg(path, f.errorString()).toStdString());
  }
  return Status::Ok();
}

}  // namespace shardscope::gui
