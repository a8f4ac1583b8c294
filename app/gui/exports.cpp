#include "app/gui/exports.h"

#include <QColor>
#include <QDir>
#include <QFileInfo>
#include <QGraphicsScene>
#include <QImage>
#include <QPainter>
#include <QSaveFile>
#include <QSvgGenerator>
#include <QWidget>

#include "views/document_model.h"

namespace shardscope::gui {

namespace {

bool IsSvg(const QString& path) { return QFileInfo(path).suffix().compare("svg", Qt::CaseInsensitive) == 0; }

// Draws `draw` (a painter on a `size` canvas) into an SVG or a PNG file.
template <typename Draw>
Status PaintToFile(const QString& path, QSizeF size, const QColor& background, const QString& title, Draw draw) {
  if (size.isEmpty()) return Error(QString("%1: nothing to draw").arg(path).toStdString());
  if (IsSvg(path)) {
    QSvgGenerator svg;
    svg.setFileName(path);
    svg.setSize(size.toSize());
    svg.setViewBox(QRectF(QPointF(0, 0), size));
    svg.setTitle(title);
    QPainter p;
    if (!p.begin(&svg)) return Error(QString("%1: cannot write the SVG file").arg(path).toStdString());
    if (background.isValid()) p.fillRect(QRectF(QPointF(0, 0), size), background);
    draw(p, size);
    p.end();
    if (!QFileInfo(path).exists() || QFileInfo(path).size() == 0) {
      return Error(QString("%1: cannot write the SVG file").arg(path).toStdString());
    }
    return Status::Ok();
  }
  QImage image((size * 2).toSize(), QImage::Format_ARGB32);
  image.fill(background.isValid() ? background : QColor(Qt::transparent));
  {
    QPainter p(&image);
    p.setRenderHint(QPainter::Antialiasing);
    p.scale(2, 2);
    draw(p, size);
  }
  if (!image.save(path)) return Error(QString("%1: cannot write the image (is the folder writable?)").arg(path).toStdString());
  return Status::Ok();
}

}  // namespace

QString ExportFolder(const views::DocumentModel& doc, const QString& fallback) {
  if (!doc.filePath().isEmpty()) {
    const QFileInfo f(doc.filePath());
    if (f.absoluteDir().exists()) return f.absolutePath();
  }
  if (!fallback.isEmpty() && QDir(fallback).exists()) return fallback;
  return QDir::homePath();
}

QString ExportPath(const views::DocumentModel& doc, const QString& fallback_folder, const QString& suffix) {
  QString base;
  if (!doc.filePath().isEmpty()) base = QFileInfo(doc.filePath()).baseName();  // "proj1.shardscope" -> "proj1"
  if (base.isEmpty() && doc.module()) base = QString::fromStdString(doc.module()->name());
  if (base.isEmpty()) base = "untitled";
  return QDir(ExportFolder(doc, fallback_folder)).filePath(base + suffix);
}

Status WriteFileAtomically(const QString& path, const QByteArray& bytes) {
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly) || f.write(bytes) != bytes.size() || !f.commit()) {
    return Error(QString("%1: %2").arg(path, f.errorString()).toStdString());
  }
  return Status::Ok();
}

Status ExportWidgetImage(QWidget* widget, const QString& path) {
  if (!widget) return Error(QString("%1: nothing to draw").arg(path).toStdString());
  return PaintToFile(path, widget->size(), widget->palette().color(QPalette::Window), widget->windowTitle(),
                     [widget](QPainter& p, QSizeF) { widget->render(&p, QPoint(), QRegion(), QWidget::DrawChildren); });
}

Status ExportSceneImage(QGraphicsScene* scene, const QColor& background, const QString& path) {
  if (!scene) return Error(QString("%1: nothing to draw").arg(path).toStdString());
  const QRectF r = scene->sceneRect();
  return PaintToFile(path, r.size(), background, "graph",
                     [scene, r](QPainter& p, QSizeF size) { scene->render(&p, QRectF(QPointF(0, 0), size), r); });
}

}  // namespace shardscope::gui
