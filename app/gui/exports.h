// What the window writes to files besides projects: the annotated and the partitioned HLO, a
// simulation run as a Chrome/Perfetto trace or CSV, and pictures of the graph or of any chart (PNG
// or SVG, by the file's suffix). Where the save dialogs start: the document's folder, with a file
// name made from the module ("jit_train.spmd.hlo", not "proj1.shardscope.hlo").
#pragma once

#include <QByteArray>
#include <QColor>
#include <QString>

#include "core/base/status.h"

class QGraphicsScene;
class QWidget;

namespace shardscope::views {
class DocumentModel;
}

namespace shardscope::gui {

// The folder a save dialog starts in: the document's own, else `fallback` (the last folder used),
// else the home folder.
QString ExportFolder(const views::DocumentModel& doc, const QString& fallback);
// "<folder>/<base><suffix>", base being the document file's name without its suffixes, else the
// module's name, else "untitled". `suffix` starts with '.'.
QString ExportPath(const views::DocumentModel& doc, const QString& fallback_folder, const QString& suffix);

// Writes `bytes` atomically (a failure leaves an existing file as it was).
Status WriteFileAtomically(const QString& path, const QByteArray& bytes);
// A widget as it is drawn (charts, timelines): SVG when `path` ends in .svg, else a PNG at twice
// the screen resolution.
Status ExportWidgetImage(QWidget* widget, const QString& path);
// A whole graphics scene (the graph, not only the part in view), on `background`.
Status ExportSceneImage(QGraphicsScene* scene, const QColor& background, const QString& path);

}  // namespace shardscope::gui
