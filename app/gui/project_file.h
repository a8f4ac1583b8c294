// The project file (.shardscope, JSON): the module text, the mesh (with its device order), the
// annotations by instruction name (HLO sharding and named-axis notation) and the selection.
// Reading is plain data in, plain data out (safe on a worker thread); writing is atomic (QSaveFile).
#pragma once

#include <memory>

#include <QByteArray>
#include <QString>

#include "core/base/status.h"
#include "core/ir/ir.h"
#include "core/sharding/mesh.h"

namespace shardscope::views {
class DocumentModel;
}

namespace shardscope::gui {

// A project read into plain data: its module's instructions carry the annotations.
struct ParsedProject {
  std::unique_ptr<Module> module;
  DeviceMesh mesh;
  QString source_kind, source, selected;
};

// ".shardscope" or ".json".
bool IsProjectFile(const QString& path);
QByteArray ProjectJson(const views::DocumentModel& doc);
// Errors name `where` ("FILE:LINE:COLUMN: error: not valid JSON: ..." for bad JSON).
Result<ParsedProject> ParseProject(const QByteArray& json, const QString& where);
Result<ParsedProject> ReadProject(const QString& path);
Status WriteProject(const views::DocumentModel& doc, const QString& path);

}  // namespace shardscope::gui
