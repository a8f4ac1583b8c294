// The window's state as JSON, for sessions driven from outside with real input (a script clicking
// under Xvfb): what is open and shown (title, mode, module, selection, teaching step, compared runs,
// the partitioner's status, readiness) and where on the screen the things a script clicks are (the
// mode tabs, the visible graph nodes, the Replicate and Expand all buttons). `shardscope --state
// FILE` keeps FILE up to date with it.
#pragma once

#include <QJsonObject>
#include <QObject>
#include <QString>

class QTimer;

namespace shardscope::gui {

class MainWindow;

QJsonObject WindowState(const MainWindow& window);

// Rewrites `path` (atomically) whenever WindowState changes, checking every `interval_ms`.
class WindowStateWriter : public QObject {
  Q_OBJECT
 public:
  WindowStateWriter(const MainWindow* window, QString path, int interval_ms = 100);

 private:
  void poll();
  const MainWindow* window_;
  QString path_;
  QByteArray last_;
  QTimer* timer_;
};

}  // namespace shardscope::gui
