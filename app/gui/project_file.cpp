#include "app/gui/project_file.h"

#include <QFile>
#include <QFileInfo>
#include <QSaveFile>

#include "views/document_model.h"

namespace shardscope::gui {

bool IsProjectFile(const QString& path) {
  const QString suffix = QFileInfo(path).suffix().toLower();
  return suffix == "shardscope" || suffix == "json";
}

QByteArray ProjectJson(const views::DocumentModel& doc) {
  ProjectContents contents;
  contents.mesh = doc.mesh();
  contents.source_kind = doc.sourceKind().toStdString();
  contents.source = doc.source().toStdString();
  contents.zoo_settings = doc.zooSettings();
  for (const auto& [id, s] : doc.annotations()) {
    if (const Instruction* inst = doc.instruction(id)) contents.annotations.push_back({doc.qualifiedName(inst).toStdString(), s});
  }
  if (const Instruction* sel = doc.instruction(doc.selected())) contents.selected = doc.qualifiedName(sel).toStdString();
  contents.weight_update_sharding = doc.weightUpdateSharding();
  contents.slice = doc.sliceOverride();
  contents.simulated_sizes = doc.simulatedSizes();
  // The document keeps the annotations apart from its module: the module is written without them.
  return QByteArray::fromStdString(WriteProjectFile(doc.module(), contents));
}

Result<Project> ParseProject(const QByteArray& json, const QString& where) {
  return ReadProjectFile(std::string_view(json.constData(), static_cast<size_t>(json.size())), where.toStdString());
}

Result<Project> ReadProject(const QString& path) {
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
