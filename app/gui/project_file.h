// The GUI's side of the project file (.shardscope, JSON): the format itself — module text, mesh with
// its device order, annotations by instruction name, selection — is read and written by
// core/project/project_file.h (plain C++, safe on a worker thread); here the document is turned into
// it and files are written atomically (QSaveFile).
#pragma once

#include <QByteArray>
#include <QString>

#include "core/base/status.h"
#include "core/project/project_file.h"

namespace shardscope::views {
class DocumentModel;
}

namespace shardscope::gui {

// ".shardscope" or ".json".
bool IsProjectFile(const QString& path);
QByteArray ProjectJson(const views::DocumentModel& doc);
// Errors name `where` ("FILE:LINE:COLUMN: error: not valid JSON: ..." for bad JSON). The module's
// instructions carry the annotations.
Result<Project> ParseProject(const QByteArray& json, const QString& where);
Result<Project> ReadProject(const QString& path);
Status WriteProject(const views::DocumentModel& doc, const QString& path);

}  // namespace shardscope::gui
